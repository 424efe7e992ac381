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

/** How long `closeCapture` waits for the worklet to hand over its partial chunk, in ms. */
const FLUSH_TIMEOUT_MS = 250;

/**
 * Stop a capture: the partial chunk is flushed (passed to `onChunk` like any other), then the
 * tracks are stopped and the context closed. The tracks stop at once; the context is closed when
 * the worklet has answered the flush (or after {@link FLUSH_TIMEOUT_MS}), so the last words before
 * the stop are not lost.
 * @param {Capture} capture
 * @param {{flush?: boolean}} [options] `flush: false` drops the partial chunk (a cancelled start)
 */
export function closeCapture(capture, { flush = true } = {}) {
  let timer = 0;
  const finish = () => {
    clearTimeout(timer);
    capture.node.port.onmessage = null;
    capture.context.close().catch(() => {});
  };
  try {
    capture.source.disconnect();
    if (flush) {
      const onChunk = capture.node.port.onmessage;
      // The worklet answers a flush with the partial chunk (if any), then `flushed`.
      capture.node.port.onmessage = (event) => {
        if (event.data && event.data.type === "flushed") finish();
        else if (onChunk) onChunk.call(capture.node.port, event);
      };
      capture.node.port.postMessage({ type: "flush" });
      timer = setTimeout(finish, FLUSH_TIMEOUT_MS);
    } else {
      finish();
    }
  } catch {
    // Nodes already gone.
    finish();
  }
  capture.stream.getTracks().forEach((t) => t.stop());
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
 * @typedef {object} PlayerChunk  one scheduled buffer
 * @property {AudioBufferSourceNode} source
 * @property {number} start     on the context's clock, in s
 * @property {number} duration  in s
 * @property {boolean} cut      stopped before its end
 * @property {PlayerItem} item
 */

/**
 * @typedef {object} PlayerItem  an assistant item with audio queued
 * @property {string} itemId
 * @property {number} contentIndex
 * @property {number} playedMs  ms of its chunks that played to their end
 * @property {Set<PlayerChunk>} pending  its chunks not yet ended
 */

/**
 * Gapless playback of 24 kHz PCM16 chunks on one AudioContext. The service sends audio faster
 * than real time, so chunks are scheduled back to back on the audio clock, and the next item's
 * audio is often queued while the last one is still heard; `stop()` cuts them all at once and
 * says, per item, how much was actually heard.
 */
export class PcmPlayer {
  /**
   * @param {{stats: () => PlayerStats, onState: (detail: {state: string, item_id: string|null, audio_end_ms?: number}) => void, onContextState?: (state: string) => void}} hooks
   *   `stats` returns the counters to update (the client replaces them per session); `onState`
   *   hears `started` (an item begins, or plays again after everything had ended), `ended`
   *   (everything queued has played) and `interrupted` (stopped early and nothing is left
   *   playing; the item heard when it was stopped); `onContextState` hears the context's state
   *   each time it changes from the last one reported (`running`, `suspended`, `interrupted`,
   *   `closed`).
   */
  constructor({ stats, onState, onContextState = () => {} }) {
    this.stats = stats;
    this.onState = onState;
    this.onContextState = onContextState;
    /** The context state last reported: a context that starts suspended is reported on first use. */
    this.reportedState = "running";
    this.context = null;
    this.playHead = 0;
    /** @type {Set<PlayerChunk>} every chunk scheduled and not yet ended */
    this.sources = new Set();
    /** @type {Map<string, PlayerItem>} the items with audio queued, in the order they began */
    this.items = new Map();
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

  /** @returns {string[]} the items with audio playing or queued, in the order they began */
  queuedItems() {
    return [...this.items.values()].filter((item) => item.pending.size > 0).map((item) => item.itemId);
  }

  /**
   * @param {string} itemId
   * @returns {number} ms of the item's audio that played to its end (floored; 0 for an item the
   *   player does not hold: never queued, or cut by `stop()`)
   */
  heardMs(itemId) {
    const item = this.items.get(itemId);
    return item ? Math.floor(item.playedMs) : 0;
  }

  /**
   * Queue one base64 PCM16 24 kHz chunk, gapless after the previous one.
   * @param {string} itemId
   * @param {number} contentIndex
   * @param {string} b64
   * @returns {boolean} false if the chunk was dropped, unheard: the context is not running
   */
  play(itemId, contentIndex, b64) {
    const samples = decodePcm16(b64);
    const stats = this.stats();
    stats.audioChunksReceived += 1;
    stats.audioMsReceived += (samples.length / WIRE_SAMPLE_RATE) * 1000;
    if (samples.length === 0) return true;
    const ctx = this.createContext();
    if (ctx.state !== "running") {
      // Not scheduled: it would pile up and play late, all at once, when the context resumes.
      this.reportState();
      return false;
    }
    let item = this.items.get(itemId);
    if (!item || this.sources.size === 0) {
      if (!item) {
        // Items whose audio has all played are done with: only the new one and those still heard stay.
        for (const [id, old] of this.items) if (old.pending.size === 0) this.items.delete(id);
        item = { itemId, contentIndex: contentIndex || 0, playedMs: 0, pending: new Set() };
        this.items.set(itemId, item);
      }
      this.onState({ state: "started", item_id: itemId });
    }
    const buffer = ctx.createBuffer(1, samples.length, WIRE_SAMPLE_RATE);
    buffer.copyToChannel(samples, 0);
    const source = ctx.createBufferSource();
    source.buffer = buffer;
    source.connect(ctx.destination);
    const startAt = Math.max(this.playHead, ctx.currentTime + 0.02);
    /** @type {PlayerChunk} */
    const chunk = { source, start: startAt, duration: buffer.duration, cut: false, item };
    source.onended = () => this.onEnded(chunk);
    source.start(startAt);
    this.playHead = startAt + buffer.duration;
    this.sources.add(chunk);
    item.pending.add(chunk);
    stats.audioChunksScheduled += 1;
    return true;
  }

  /** @param {PlayerChunk} chunk */
  onEnded(chunk) {
    if (!this.sources.delete(chunk)) return;
    chunk.item.pending.delete(chunk);
    if (!chunk.cut) {
      const stats = this.stats();
      stats.audioChunksPlayed += 1;
      stats.msPlayed += chunk.duration * 1000;
      chunk.item.playedMs += chunk.duration * 1000;
    }
    if (this.sources.size === 0) this.onState({ state: "ended", item_id: chunk.item.itemId });
  }

  /**
   * Stop audio at once: all of it, or only that of the items in `only`.
   * @param {Set<string>} [only] the items to stop (default: every item)
   * @returns {Array<{itemId: string, contentIndex: number, audioEndMs: number}>|null} each item
   *   stopped before its end, in queue order (the one heard at the stop first), with the ms of it
   *   actually played (floored; 0 for an item still waiting its turn); null if nothing was stopped
   */
  stop(only) {
    if (!this.context || this.sources.size === 0) return null;
    const now = this.context.currentTime;
    const stats = this.stats();
    const cuts = [];
    for (const item of [...this.items.values()]) {
      if (only && !only.has(item.itemId)) continue;
      // An item whose audio has all played so far needs no cut; it stays, so that what was heard
      // of it is still known if more of its audio comes (`heardMs`).
      if (item.pending.size === 0) continue;
      this.items.delete(item.itemId);
      let heardMs = item.playedMs;
      for (const chunk of item.pending) {
        const heard = Math.max(0, Math.min(chunk.duration, now - chunk.start));
        heardMs += heard * 1000;
        chunk.cut = true;
        stats.msPlayed += heard * 1000;
        if (heard >= chunk.duration) stats.audioChunksPlayed += 1;
        try {
          chunk.source.stop();
        } catch {
          // Never started.
        }
        chunk.source.disconnect();
        this.sources.delete(chunk);
      }
      item.pending.clear();
      cuts.push({ itemId: item.itemId, contentIndex: item.contentIndex, audioEndMs: Math.floor(heardMs) });
    }
    if (cuts.length === 0) return null;
    // What is left (another item's audio) keeps its place on the clock.
    this.playHead = 0;
    for (const chunk of this.sources) this.playHead = Math.max(this.playHead, chunk.start + chunk.duration);
    stats.interruptions += 1;
    // Audio left playing (an earlier answer, when only some items were stopped): the assistant is
    // still heard, and `ended` follows when it is over.
    if (this.sources.size === 0) {
      this.onState({ state: "interrupted", item_id: cuts[0].itemId, audio_end_ms: cuts[0].audioEndMs });
    }
    return cuts;
  }
}
