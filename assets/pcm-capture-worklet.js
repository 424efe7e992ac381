/**
 * voxgate microphone capture worklet.
 *
 * Runs on the audio rendering thread. Takes the first channel of its input at the context's
 * sample rate, low-pass filters it (when down-sampling), resamples it to the target rate (24 kHz
 * by default) with linear interpolation, converts to PCM16 little-endian mono and posts one
 * message per chunk (20 ms by default = 480 samples = 960 bytes at 24 kHz):
 *
 *   { type: "chunk", pcm: ArrayBuffer, rms: number, peak: number }
 *
 * The ArrayBuffer is transferred, not copied. The main thread may post `{ type: "flush" }` to get
 * the partial chunk held so far (sent as a shorter chunk), e.g. before stopping; `{ type: "flushed" }`
 * follows it (also when nothing was held), so the main thread knows when it may close the context.
 *
 * Registered as "voxgate-pcm-capture". Processor options:
 *   targetRate (number, default 24000), chunkMs (number, default 20).
 */

/** Second-order Butterworth low-pass (RBJ cookbook biquad), direct form I. */
class LowPass {
  /**
   * @param {number} cutoff cut-off frequency in Hz
   * @param {number} rate sample rate in Hz
   */
  constructor(cutoff, rate) {
    const w0 = (2 * Math.PI * cutoff) / rate;
    const alpha = Math.sin(w0) / (2 * Math.SQRT1_2);
    const cos = Math.cos(w0);
    const a0 = 1 + alpha;
    this.b0 = (1 - cos) / 2 / a0;
    this.b1 = (1 - cos) / a0;
    this.b2 = (1 - cos) / 2 / a0;
    this.a1 = (-2 * cos) / a0;
    this.a2 = (1 - alpha) / a0;
    this.x1 = 0;
    this.x2 = 0;
    this.y1 = 0;
    this.y2 = 0;
  }

  /** @param {number} x @returns {number} */
  step(x) {
    const y = this.b0 * x + this.b1 * this.x1 + this.b2 * this.x2 - this.a1 * this.y1 - this.a2 * this.y2;
    this.x2 = this.x1;
    this.x1 = x;
    this.y2 = this.y1;
    this.y1 = y;
    return y;
  }
}

class PcmCaptureProcessor extends AudioWorkletProcessor {
  /** @param {{processorOptions?: {targetRate?: number, chunkMs?: number}}} options */
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.targetRate = opts.targetRate || 24000;
    const chunkMs = opts.chunkMs || 20;
    // `sampleRate` is the AudioWorkletGlobalScope's rate: the context's.
    this.inRate = sampleRate;
    this.step = this.inRate / this.targetRate; // input samples per output sample
    // Two cascaded biquads: a fourth-order anti-alias filter a little below the target Nyquist.
    this.filters = this.step > 1
      ? [new LowPass(this.targetRate * 0.45, this.inRate), new LowPass(this.targetRate * 0.45, this.inRate)]
      : [];
    this.chunkSamples = Math.max(1, Math.round((this.targetRate * chunkMs) / 1000));
    this.newChunk();
    // Position of the next output sample, in input samples relative to `prev` (index -1) .. block.
    this.pos = 0;
    this.prev = 0;
    this.port.onmessage = (event) => {
      if (!event.data || event.data.type !== "flush") return;
      this.emit();
      // After the partial chunk (if any): the main thread may now close the context.
      this.port.postMessage({ type: "flushed" });
    };
  }

  newChunk() {
    this.buffer = new ArrayBuffer(this.chunkSamples * 2);
    this.view = new DataView(this.buffer);
    this.filled = 0;
    this.sumSquares = 0;
    this.peak = 0;
  }

  /** Post the current chunk (possibly partial) and start a new one. */
  emit() {
    if (this.filled === 0) return;
    const n = this.filled;
    const pcm = n === this.chunkSamples ? this.buffer : this.buffer.slice(0, n * 2);
    const rms = Math.sqrt(this.sumSquares / n);
    this.port.postMessage({ type: "chunk", pcm, rms, peak: this.peak }, [pcm]);
    this.newChunk();
  }

  /** @param {number} sample float in [-1, 1] at the target rate */
  push(sample) {
    const s = Math.max(-1, Math.min(1, sample));
    this.view.setInt16(this.filled * 2, s < 0 ? Math.round(s * 0x8000) : Math.round(s * 0x7fff), true);
    this.filled += 1;
    this.sumSquares += s * s;
    const a = Math.abs(s);
    if (a > this.peak) this.peak = a;
    if (this.filled === this.chunkSamples) this.emit();
  }

  /**
   * @param {Float32Array[][]} inputs
   * @returns {boolean}
   */
  process(inputs) {
    const input = inputs[0];
    const channel = input && input[0];
    if (!channel || channel.length === 0) return true;
    const block = new Float32Array(channel.length);
    for (let i = 0; i < channel.length; i += 1) {
      let x = channel[i];
      for (const f of this.filters) x = f.step(x);
      block[i] = x;
    }
    // Linear interpolation between sample i-1 (`prev` when i = 0) and sample i.
    const len = block.length;
    while (this.pos < len) {
      const i = Math.floor(this.pos);
      const frac = this.pos - i;
      const a = i === 0 ? this.prev : block[i - 1];
      const b = block[i];
      // pos is measured so that pos = i + frac lies between sample (i - 1) and sample i.
      this.push(a + (b - a) * frac);
      this.pos += this.step;
    }
    this.pos -= len;
    this.prev = block[len - 1];
    return true;
  }
}

registerProcessor("voxgate-pcm-capture", PcmCaptureProcessor);
