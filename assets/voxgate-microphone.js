/**
 * The browser client's microphone: `startMicrophone()` opens the device (getUserMedia with the
 * processing constraints), starts the capture AudioWorklet (voxgate-audio.js) and sends each chunk
 * as one `input_audio_buffer.append`; `stopMicrophone()` stops it. Failures become `error` events
 * with a code (`microphone_denied`, `microphone_unavailable`, `microphone_insecure`,
 * `capture_failed`, `microphone_ended`); each chunk also gives a `level` event, and starting or
 * stopping a `microphone` event.
 *
 * A mixin, not a class: `voxgate-client.js` installs {@link microphoneMethods} on
 * `VoxgateClient.prototype`, and `this` is the client (its state: `mic`, the open capture;
 * `micStarting`, the capture being opened; `micCancelled`). The methods are documented as the
 * client's in docs/client-module.md.
 *
 * @module voxgate-microphone
 */

import { WIRE_SAMPLE_RATE, bytesToBase64, closeCapture, levelFromRms, openCapture } from "./voxgate-audio.js";

/** @typedef {import("./voxgate-client.js").ClientOptions} ClientOptions */

/** The client's microphone methods; `this` is the client. */
export const microphoneMethods = {
  /**
   * Start capturing the microphone: getUserMedia → AudioWorklet (resampling to 24 kHz PCM16
   * mono) → `input_audio_buffer.append` every `chunkMs`. Must be called from a user gesture on
   * pages without autoplay permission.
   * @param {Partial<Pick<ClientOptions, "echoCancellation"|"noiseSuppression"|"autoGainControl"|"deviceId">>} [overrides]
   * @returns {Promise<void>}
   */
  startMicrophone(overrides = {}) {
    if (this.mic) return Promise.resolve();
    // A second call while the first is still opening the device waits for the same capture.
    if (!this.micStarting) {
      this.micCancelled = false;
      this.micStarting = this.openMicrophone(overrides).finally(() => {
        this.micStarting = null;
      });
    }
    return this.micStarting;
  },

  /**
   * @param {Partial<ClientOptions>} overrides
   * @returns {Promise<void>}
   */
  async openMicrophone(overrides) {
    const opts = { ...this.options, ...overrides };
    const audio = {
      channelCount: 1,
      echoCancellation: !!opts.echoCancellation,
      noiseSuppression: !!opts.noiseSuppression,
      autoGainControl: !!opts.autoGainControl,
    };
    if (opts.deviceId) audio.deviceId = { exact: opts.deviceId };
    if (!navigator.mediaDevices || typeof navigator.mediaDevices.getUserMedia !== "function") {
      // Browsers hide getUserMedia on pages served over plain http (other than localhost).
      const insecure = globalThis.isSecureContext === false;
      this.emitError("microphone", insecure ? "microphone_insecure" : "microphone_unavailable",
        insecure ? "the microphone needs a secure page: open it over https (or on localhost)"
          : "this browser cannot capture audio");
      throw new Error("no mediaDevices");
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio, video: false });
    } catch (err) {
      const denied = err && (err.name === "NotAllowedError" || err.name === "SecurityError");
      this.emitError("microphone", denied ? "microphone_denied" : "microphone_unavailable",
        denied ? "microphone access was denied" : "no microphone could be opened");
      throw err;
    }
    let mic;
    try {
      mic = await this.buildCapture(stream, opts.chunkMs);
    } catch (err) {
      stream.getTracks().forEach((t) => t.stop());
      this.emitError("microphone", "capture_failed", "the audio capture could not start");
      throw err;
    }
    if (this.micCancelled) {
      // stopMicrophone() (or a disconnect) came while the device was opening: honour it.
      this.micCancelled = false;
      closeCapture(mic, { flush: false });
      return;
    }
    this.mic = mic;
    // A device unplugged or a permission withdrawn ends the track without a word otherwise.
    for (const track of stream.getAudioTracks()) {
      track.addEventListener("ended", () => this.onMicrophoneEnded(mic), { once: true });
    }
    this.emit("microphone", { active: true });
  },

  /** @param {object} mic the capture whose track ended */
  onMicrophoneEnded(mic) {
    if (this.mic !== mic) return;
    this.stopMicrophone();
    this.emitError("microphone", "microphone_ended", "the microphone stopped (unplugged, or access to it was withdrawn)");
  },

  /**
   * @param {MediaStream} stream
   * @param {number} chunkMs
   */
  buildCapture(stream, chunkMs) {
    return openCapture(stream, { chunkMs, workletUrl: this.options.workletUrl, onChunk: (data) => this.onCaptureChunk(data) });
  },

  /** @param {{type: string, pcm: ArrayBuffer, rms: number, peak: number}} data */
  onCaptureChunk(data) {
    if (!data || data.type !== "chunk") return;
    // The partial chunk flushed at a stop is still sent, but the meter stays at rest.
    if (this.mic) this.emit("level", { level: levelFromRms(data.rms), rms: data.rms, peak: data.peak });
    const bytes = new Uint8Array(data.pcm);
    if (this.send({ type: "input_audio_buffer.append", audio: bytesToBase64(bytes) })) {
      this.stats.appendsSent += 1;
      this.stats.audioBytesSent += bytes.length;
      this.stats.audioMsSent += (bytes.length / 2 / WIRE_SAMPLE_RATE) * 1000;
    }
  },

  /** Stop the microphone (tracks stopped, capture context closed). */
  stopMicrophone() {
    const mic = this.mic;
    if (!mic) {
      if (this.micStarting) this.micCancelled = true;
      return;
    }
    this.mic = null;
    closeCapture(mic);
    this.emit("level", { level: 0, rms: 0, peak: 0 });
    this.emit("microphone", { active: false });
  },
};
