/**
 * The audio half of the voxgate browser client: PCM16 helpers, microphone capture through the
 * `voxgate-pcm-capture` AudioWorklet, and gapless playback of the assistant's audio that can be
 * cut off at once on barge-in, knowing to the millisecond how much was heard.
 *
 * The realtime wire carries PCM16 little-endian mono at 24 kHz both ways, base64 in JSON. Browsers
 * capture and play at the device's rate (usually 44.1 or 48 kHz): the worklet resamples the
 * microphone down to 24 kHz; for playback a 24 kHz `AudioBuffer` lets the browser resample up.
 *
 * No dependencies; used by voxgate-client.js, usable on its own.
 *
 * @module voxgate-audio
 */

/** Sample rate of the audio on the wire (input and output): PCM16 mono little-endian. */
export const WIRE_SAMPLE_RATE = 24000;

/**
 * Base64 of bytes (btoa over a binary string, built in slices to bound argument counts).
 * @param {Uint8Array} bytes
 * @returns {string}
 */
export function bytesToBase64(bytes) {
  let binary = "";
  const step = 0x8000;
  for (let i = 0; i < bytes.length; i += step) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + step));
  }
  return btoa(binary);
}

/**
 * Decode base64 PCM16 little-endian mono into float samples in [-1, 1).
 * @param {string} b64
 * @returns {Float32Array}
 */
export function decodePcm16(b64) {
  const binary = atob(b64);
  const n = binary.length >> 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i += 1) {
    let v = binary.charCodeAt(2 * i) | (binary.charCodeAt(2 * i + 1) << 8);
    if (v >= 0x8000) v -= 0x10000;
    out[i] = v / 0x8000;
  }
  return out;
}

/**
 * Map an RMS amplitude to a 0..1 meter level (-60 dBFS .. 0 dBFS).
 * @param {number} rms
 * @returns {number}
 */
export function levelFromRms(rms) {
  if (!(rms > 0)) return 0;
  const db = 20 * Math.log10(rms);
  return Math.max(0, Math.min(1, (db + 60) / 60));
}

/** How long starting the capture's AudioContext may take before the capture fails, in ms. */
const CONTEXT_START_TIMEOUT_MS = 3000;

/**
 * A promise that rejects with `message` if `promise` has not settled within `ms`: the browser may
 * leave `AudioContext.resume()` pending for good (no user gesture, the device gone).
 * @template T
 * @param {Promise<T>} promise
 * @param {number} ms
 * @param {string} message
 * @returns {Promise<T>}
 */
export function withTimeout(promise, ms, message) {
  let timer = 0;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * @typedef {object} Capture  a running microphone capture
 * @property {MediaStream} stream
 * @property {AudioContext} context
 * @property {MediaStreamAudioSourceNode} source
 * @property {AudioWorkletNode} node
 */

/**
 * Feed a microphone stream through the capture worklet. `onChunk` gets every chunk:
 * `{type: "chunk", pcm: ArrayBuffer (PCM16 LE 24 kHz mono), rms, peak}`.
 * @param {MediaStream} stream
 * @param {{chunkMs: number, workletUrl?: string|URL, onChunk: (data: any) => void}} options
 * @returns {Promise<Capture>}
 */
export async function openCapture(stream, { chunkMs, workletUrl, onChunk }) {
  const context = new AudioContext({ latencyHint: "interactive" });
  try {
    await context.audioWorklet.addModule(workletUrl || new URL("./pcm-capture-worklet.js", import.meta.url));
    const source = context.createMediaStreamSource(stream);
    const node = new AudioWorkletNode(context, "voxgate-pcm-capture", {
      numberOfInputs: 1,
      numberOfOutputs: 0,
      channelCount: 1,
      channelCountMode: "explicit",
      processorOptions: { targetRate: WIRE_SAMPLE_RATE, chunkMs },
    });
    node.port.onmessage = (event) => onChunk(event.data);
    source.connect(node);
    if (context.state !== "running") {
      await withTimeout(context.resume(), CONTEXT_START_TIMEOUT_MS, "the capture's audio context did not start");
    }
    return { stream, context, source, node };
  } catch (err) {
    context.close().catch(() => {});
    throw err;
  }
}

/**
 * Stop a capture: the partial chunk is flushed, the tracks stopped, the context closed.
 * @param {Capture} capture
 */
export function closeCapture(capture) {
  try {
    capture.node.port.postMessage({ type: "flush" });
    capture.source.disconnect();
    capture.node.port.onmessage = null;
  } catch {
    // Nodes already gone.
  }
  capture.stream.getTracks().forEach((t) => t.stop());
  capture.context.close().catch(() => {});
}

/**
 * @typedef {object} PlayerStats  the counters the player keeps (a subset of the client's stats)
 * @property {number} audioChunksReceived
 * @property {number} audioMsReceived
 * @property {number} audioChunksScheduled
 * @property {number} audioChunksPlayed
 * @property {number} msPlayed
 * @property {number} interruptions
 */

/**
 * Gapless playback of 24 kHz PCM16 chunks on one AudioContext. The service sends audio faster
 * than real time, so chunks are scheduled back to back on the audio clock; `stop()` cuts them all
 * at once and says how much of the current item was actually heard.
 */
export class PcmPlayer {
  /**
   * @param {{stats: () => PlayerStats, onState: (detail: {state: string, item_id: string|null, audio_end_ms?: number}) => void, onContextState?: (state: string) => void}} hooks
   *   `stats` returns the counters to update (the client replaces them per session); `onState`
   *   hears `started` (a new item begins), `ended` (everything queued has played) and
   *   `interrupted` (stopped early); `onContextState` hears the context's state each time it
   *   changes from the last one reported (`running`, `suspended`, `interrupted`, `closed`).
   */
  constructor({ stats, onState, onContextState = () => {} }) {
    this.stats = stats;
    this.onState = onState;
    this.onContextState = onContextState;
    /** The context state last reported: a context that starts suspended is reported on first use. */
    this.reportedState = "running";
    this.context = null;
    this.playHead = 0;
    /** @type {Set<{source: AudioBufferSourceNode, start: number, duration: number, cut: boolean}>} */
    this.sources = new Set();
    this.itemId = null;
    this.contentIndex = 0;
    this.itemChunks = [];
  }

  /** Create (or resume) the playback context; call from a user gesture for autoplay rules. */
  ensureContext() {
    const ctx = this.createContext();
    if (ctx.state !== "running") ctx.resume().catch(() => {});
    return ctx;
  }

  /** @returns {AudioContext} the playback context, created on first use (not resumed) */
  createContext() {
    if (!this.context) {
      this.context = new AudioContext({ latencyHint: "interactive" });
      // The browser suspends the context (another app took the device, a phone call, power
      // saving): say so rather than queue audio that would play late or never.
      this.context.addEventListener("statechange", () => this.reportState());
    }
    return this.context;
  }

  /** Tell `onContextState` when the context's state differs from the one last reported. */
  reportState() {
    const state = this.context ? this.context.state : "running";
    if (state === this.reportedState) return;
    this.reportedState = state;
    this.onContextState(state);
  }

  /** @returns {boolean} whether the context plays (audio scheduled now is heard now) */
  get running() {
    return !!this.context && this.context.state === "running";
  }

  /** @returns {boolean} whether audio is playing or queued */
  get playing() {
    return this.sources.size > 0;
  }

  /**
   * Queue one base64 PCM16 24 kHz chunk, gapless after the previous one.
   * @param {string} itemId
   * @param {number} contentIndex
   * @param {string} b64
   */
  play(itemId, contentIndex, b64) {
    const samples = decodePcm16(b64);
    const stats = this.stats();
    stats.audioChunksReceived += 1;
    stats.audioMsReceived += (samples.length / WIRE_SAMPLE_RATE) * 1000;
    if (samples.length === 0) return;
    const ctx = this.createContext();
    if (ctx.state !== "running") {
      // Not scheduled: it would pile up and play late, all at once, when the context resumes.
      this.reportState();
      return;
    }
    if (this.itemId !== itemId) {
      this.itemId = itemId;
      this.contentIndex = contentIndex || 0;
      this.itemChunks = [];
      this.onState({ state: "started", item_id: itemId });
    }
    const buffer = ctx.createBuffer(1, samples.length, WIRE_SAMPLE_RATE);
    buffer.copyToChannel(samples, 0);
    const source = ctx.createBufferSource();
    source.buffer = buffer;
    source.connect(ctx.destination);
    const startAt = Math.max(this.playHead, ctx.currentTime + 0.02);
    const chunk = { source, start: startAt, duration: buffer.duration, cut: false };
    source.onended = () => this.onEnded(chunk, itemId);
    source.start(startAt);
    this.playHead = startAt + buffer.duration;
    this.sources.add(chunk);
    this.itemChunks.push(chunk);
    stats.audioChunksScheduled += 1;
  }

  /**
   * @param {{start: number, duration: number, cut: boolean}} chunk
   * @param {string} itemId
   */
  onEnded(chunk, itemId) {
    if (!this.sources.delete(chunk)) return;
    if (!chunk.cut) {
      const stats = this.stats();
      stats.audioChunksPlayed += 1;
      stats.msPlayed += chunk.duration * 1000;
    }
    if (this.sources.size === 0) this.onState({ state: "ended", item_id: itemId });
  }

  /**
   * Stop all audio at once.
   * @returns {{itemId: string|null, contentIndex: number, audioEndMs: number}|null} the item that
   *   was playing and the ms of it actually played (floored), or null if nothing was playing
   */
  stop() {
    if (!this.context || this.sources.size === 0) return null;
    const now = this.context.currentTime;
    const stats = this.stats();
    let playedMs = 0;
    for (const chunk of this.itemChunks) {
      playedMs += Math.max(0, Math.min(chunk.duration, now - chunk.start)) * 1000;
    }
    for (const chunk of this.sources) {
      const heard = Math.max(0, Math.min(chunk.duration, now - chunk.start));
      chunk.cut = true;
      stats.msPlayed += heard * 1000;
      if (heard >= chunk.duration) stats.audioChunksPlayed += 1;
      try {
        chunk.source.stop();
      } catch {
        // Never started.
      }
      chunk.source.disconnect();
    }
    this.sources.clear();
    this.playHead = 0;
    const cut = { itemId: this.itemId, contentIndex: this.contentIndex, audioEndMs: Math.floor(playedMs) };
    stats.interruptions += 1;
    this.itemId = null;
    this.itemChunks = [];
    this.onState({ state: "interrupted", item_id: cut.itemId, audio_end_ms: cut.audioEndMs });
    return cut;
  }
}
