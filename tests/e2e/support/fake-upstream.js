/**
 * A fake OpenAI Realtime server (GA wire protocol) for the browser tests: voxgate connects to it
 * as its upstream (`upstream.kind = "openai"`, `upstream.url = ws://127.0.0.1:PORT/v1/realtime`; any
 * path is accepted).
 *
 * It records what arrives — every event, and the PCM16 audio of `input_audio_buffer.append` with
 * timestamps — and answers like the real service, as far as the tests need:
 * `session.created` on connect, `session.updated`, `conversation.item.added/done`,
 * `conversation.item.truncated`, responses with `response.output_audio.delta` (a tone, generated
 * faster than real time like the real service) plus transcript deltas, function calls chosen by
 * `rules` on the last user text, and `response.done` (cancelled on `response.cancel`).
 *
 * For what goes wrong in real life: an answer that never ends (`hang` rules,
 * `respondWithoutEnd`), one that ends `failed`/`incomplete` (`respondAndEndWith`), a response
 * forgotten without its `response.done` (`forgetResponse`), a frame that does not parse
 * (`sendRaw`), and the connection dropped (`dropConnection`: voxgate resumes on a new one, which
 * starts with no response running).
 */

import { WebSocketServer } from "ws";

const RATE = 24000;

/** @param {number} n */
const id = (prefix, n) => `${prefix}_${String(n).padStart(16, "0")}`;

/**
 * PCM16 LE mono 24 kHz sine tone.
 * @param {number} ms
 * @param {number} [freq]
 * @returns {Buffer}
 */
export function tone(ms, freq = 440) {
  const n = Math.round((RATE * ms) / 1000);
  const buf = Buffer.alloc(n * 2);
  for (let i = 0; i < n; i += 1) buf.writeInt16LE(Math.round(Math.sin((2 * Math.PI * freq * i) / RATE) * 8000), i * 2);
  return buf;
}

/**
 * Statistics of PCM16 LE audio.
 * @param {Buffer} pcm
 * @returns {{samples: number, rms: number, peak: number, ms: number}}
 */
export function pcmStats(pcm) {
  const samples = pcm.length >> 1;
  let sum = 0;
  let peak = 0;
  for (let i = 0; i < samples; i += 1) {
    const v = pcm.readInt16LE(i * 2);
    sum += v * v;
    if (Math.abs(v) > peak) peak = Math.abs(v);
  }
  return { samples, rms: samples ? Math.sqrt(sum / samples) : 0, peak, ms: (samples / RATE) * 1000 };
}

/**
 * The frequency of a steady tone in PCM16 LE audio taken to be at 24 kHz, from its rising zero
 * crossings (with a little hysteresis so noise near zero does not count). Audio sent at another
 * rate but labelled 24 kHz shows up here as a wrong frequency.
 * @param {Buffer} pcm
 * @returns {number} Hz
 */
export function toneFrequency(pcm) {
  const samples = pcm.length >> 1;
  const threshold = 500;
  let crossings = 0;
  let first = -1;
  let last = -1;
  let below = false;
  for (let i = 0; i < samples; i += 1) {
    const v = pcm.readInt16LE(i * 2);
    if (v < -threshold) below = true;
    else if (v > threshold && below) {
      below = false;
      if (first < 0) first = i;
      else crossings += 1;
      last = i;
    }
  }
  return crossings > 0 ? (crossings * RATE) / (last - first) : 0;
}

/**
 * @typedef {object} Rule  a function call the fake model makes when the user's text matches
 * @property {RegExp} match
 * @property {string} [name]
 * @property {object} [arguments]
 * @property {Array<{name: string, arguments: object}>} [calls]  several calls in one response
 *   (parallel function calls), instead of `name` and `arguments`
 * @property {string} [hang]  instead of a call: an answer that starts with this text and never
 *   finishes (no `response.done`), like a response cut off when the upstream goes away
 */

export class FakeUpstream {
  /** @param {{rules?: Rule[], replyMs?: number}} [options] */
  constructor({ rules = [], replyMs = 600 } = {}) {
    this.rules = rules;
    this.replyMs = replyMs;
    /** @type {Array<object>} every client event, parsed */
    this.events = [];
    /** @type {Array<{at: number, bytes: number}>} */
    this.appends = [];
    this.audio = [];
    this.connections = 0;
    /** @type {Array<import("node:http").IncomingHttpHeaders>} upgrade request headers, per connection */
    this.headers = [];
    /** @type {string[]} upgrade request URLs (path and query), per connection */
    this.urls = [];
    /** @type {Array<{name: string, call_id: string, arguments: object}>} function calls this fake made */
    this.calls = [];
    this.counter = 0;
    this.socket = null;
    this.activeResponse = null;
    this.lastUserText = "";
    this.outputsSinceResponse = [];
    this.waiters = [];
  }

  /** @returns {Promise<string>} the ws:// URL voxgate should use */
  async start() {
    this.server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    await new Promise((resolve) => this.server.on("listening", resolve));
    this.server.on("connection", (socket, request) => this.onConnection(socket, request));
    const { port } = /** @type {import("node:net").AddressInfo} */ (this.server.address());
    this.url = `ws://127.0.0.1:${port}/v1/realtime`;
    return this.url;
  }

  async stop() {
    for (const client of this.server.clients) client.terminate();
    await new Promise((resolve) => this.server.close(resolve));
  }

  /** All appended audio so far, concatenated. */
  get audioBuffer() {
    return Buffer.concat(this.audio);
  }

  /** @param {string} type @returns {Array<object>} */
  eventsOf(type) {
    return this.events.filter((e) => e.type === type);
  }

  /**
   * The `function_call_output` voxgate sent for a call, with its output parsed, or undefined.
   * @param {string} callId
   * @returns {{call_id: string, output: any} | undefined}
   */
  outputFor(callId) {
    const event = this.events.find((e) => e.type === "conversation.item.create" && e.item
      && e.item.type === "function_call_output" && e.item.call_id === callId);
    if (!event) return undefined;
    let output;
    try {
      output = JSON.parse(event.item.output);
    } catch {
      output = event.item.output;
    }
    return { call_id: callId, output };
  }

  /** @param {string} prefix */
  nextId(prefix) {
    this.counter += 1;
    return id(prefix, this.counter);
  }

  /** @param {object} event */
  send(event) {
    if (!this.socket || this.socket.readyState !== 1) return;
    this.socket.send(JSON.stringify({ event_id: this.nextId("event"), ...event }));
  }

  /**
   * @param {import("ws").WebSocket} socket
   * @param {import("node:http").IncomingMessage} request
   */
  onConnection(socket, request) {
    this.connections += 1;
    this.headers.push(request.headers);
    this.urls.push(request.url || "");
    this.socket = socket;
    // A new connection is a new upstream session: nothing of the old one is running in it.
    if (this.activeResponse) for (const t of this.activeResponse.timers) clearTimeout(t);
    this.activeResponse = null;
    this.outputsSinceResponse = [];
    socket.on("message", (data, isBinary) => {
      if (isBinary) return;
      let event;
      try {
        event = JSON.parse(data.toString());
      } catch {
        return;
      }
      this.onEvent(event);
      for (const waiter of [...this.waiters]) waiter();
    });
    this.send({
      type: "session.created",
      session: {
        type: "realtime", object: "realtime.session", id: this.nextId("sess"), model: "gpt-realtime",
        output_modalities: ["audio"], instructions: "", tools: [], tool_choice: "auto",
        audio: { input: { format: { type: "audio/pcm", rate: RATE } }, output: { format: { type: "audio/pcm", rate: RATE }, voice: "marin" } },
      },
    });
  }

  /** @param {any} event */
  onEvent(event) {
    if (event.type === "input_audio_buffer.append") {
      const pcm = Buffer.from(event.audio || "", "base64");
      this.audio.push(pcm);
      this.appends.push({ at: Date.now(), bytes: pcm.length });
      this.events.push({ type: event.type, bytes: pcm.length });
      return;
    }
    this.events.push(event);
    switch (event.type) {
      case "session.update":
        this.send({ type: "session.updated", session: { type: "realtime", ...event.session } });
        break;
      case "conversation.item.create":
        this.onItemCreate(event.item || {});
        break;
      case "conversation.item.truncate":
        this.send({ type: "conversation.item.truncated", item_id: event.item_id, content_index: event.content_index, audio_end_ms: event.audio_end_ms });
        break;
      case "response.create":
        this.onResponseCreate(event);
        break;
      case "response.cancel":
        if (this.activeResponse) this.activeResponse.cancel();
        else this.error("response_cancel_not_active", "Cancellation failed: no active response found", event.event_id);
        break;
      default:
        break;
    }
  }

  /** @param {any} item */
  onItemCreate(item) {
    const itemId = item.id || this.nextId("item");
    if (item.type === "message" && item.role === "user") {
      const text = (item.content || []).map((c) => c.text || "").join(" ");
      this.lastUserText = text;
    }
    if (item.type === "function_call_output") this.outputsSinceResponse.push(item);
    const done = { ...item, id: itemId, status: "completed" };
    this.send({ type: "conversation.item.added", previous_item_id: null, item: done });
    this.send({ type: "conversation.item.done", previous_item_id: null, item: done });
  }

  error(code, message, eventId) {
    this.send({ type: "error", error: { type: "invalid_request_error", code, message, param: null, event_id: eventId || null } });
  }

  /** @param {any} event */
  onResponseCreate(event) {
    if (this.activeResponse) {
      this.error("conversation_already_has_active_response", "Conversation already has an active response in progress.", event.event_id);
      return;
    }
    const outputs = this.outputsSinceResponse;
    this.outputsSinceResponse = [];
    if (outputs.length > 0) {
      this.respondWithAudio(`All done. ${outputs.length} result received.`, this.replyMs);
      return;
    }
    const rule = this.rules.find((r) => r.match.test(this.lastUserText));
    this.lastUserText = "";
    if (rule && rule.hang) this.respondWithoutEnd(rule.hang);
    else if (rule && rule.calls) this.respondWithCalls(rule.calls);
    else if (rule) this.respondWithCall(rule.name, rule.arguments);
    else this.respondWithAudio("Hello from the fake model.", this.replyMs);
  }

  /**
   * Start a response; returns its id and a `finish(status)` function.
   * @returns {{id: string, finish: (status: string, output: object[]) => void, cancelled: boolean}}
   */
  beginResponse() {
    const responseId = this.nextId("resp");
    const response = {
      id: responseId,
      cancelled: false,
      timers: [],
      output: [],
      finish: (status) => {
        for (const t of response.timers) clearTimeout(t);
        if (this.activeResponse === response) this.activeResponse = null;
        this.send({ type: "response.done", response: { object: "realtime.response", id: responseId, status, output: response.output } });
      },
      cancel: () => {
        response.cancelled = true;
        response.finish("cancelled");
      },
    };
    this.activeResponse = response;
    this.send({ type: "response.created", response: { object: "realtime.response", id: responseId, status: "in_progress", output: [] } });
    return response;
  }

  /**
   * A function call, as the live service sequences it (PROTOCOL-NOTES §4).
   * @param {string} name
   * @param {object} args
   */
  respondWithCall(name, args) {
    this.respondWithCalls([{ name, arguments: args }]);
  }

  /**
   * Function calls in one response (parallel calls), each as the live service sequences it, one
   * output item after the other.
   * @param {Array<{name: string, arguments: object}>} calls
   */
  respondWithCalls(calls) {
    const response = this.beginResponse();
    calls.forEach(({ name, arguments: args }, outputIndex) => {
      const itemId = this.nextId("item");
      const callId = this.nextId("call");
      const argText = JSON.stringify(args);
      this.calls.push({ name, call_id: callId, arguments: args });
      const base = { response_id: response.id, output_index: outputIndex };
      const item = { id: itemId, type: "function_call", status: "in_progress", name, call_id: callId, arguments: "" };
      this.send({ type: "response.output_item.added", ...base, item });
      this.send({ type: "conversation.item.added", previous_item_id: null, item });
      this.send({ type: "response.function_call_arguments.delta", ...base, item_id: itemId, call_id: callId, delta: argText });
      this.send({ type: "response.function_call_arguments.done", ...base, item_id: itemId, call_id: callId, name, arguments: argText });
      const done = { ...item, status: "completed", arguments: argText };
      this.send({ type: "conversation.item.done", previous_item_id: null, item: done });
      this.send({ type: "response.output_item.done", ...base, item: done });
      response.output.push(done);
    });
    response.finish("completed");
  }

  /**
   * A new response with one assistant audio message begun: its item added and its audio part
   * opened, nothing in it yet.
   */
  beginAudioMessage() {
    const response = this.beginResponse();
    const itemId = this.nextId("item");
    const base = { response_id: response.id, item_id: itemId, output_index: 0, content_index: 0 };
    const item = { id: itemId, type: "message", role: "assistant", status: "in_progress", content: [] };
    this.send({ type: "response.output_item.added", response_id: response.id, output_index: 0, item });
    this.send({ type: "conversation.item.added", previous_item_id: null, item });
    this.send({ type: "response.content_part.added", ...base, part: { type: "audio", transcript: "" } });
    return { response, itemId, base, item };
  }

  /**
   * An assistant message with `ms` of audio (in 100 ms deltas, sent at once — faster than real
   * time) and its transcript.
   * @param {string} text
   * @param {number} ms
   * @returns {{responseId: string, itemId: string}}
   */
  respondWithAudio(text, ms) {
    const { response, itemId, base, item } = this.beginAudioMessage();
    const pcm = tone(ms);
    const step = 4800; // 100 ms
    for (let offset = 0; offset < pcm.length; offset += step) {
      this.send({ type: "response.output_audio.delta", ...base, delta: pcm.subarray(offset, offset + step).toString("base64") });
    }
    for (const word of text.split(/(?<= )/)) this.send({ type: "response.output_audio_transcript.delta", ...base, delta: word });
    // Like the live service, the response ends (server side) long before the audio has played.
    response.timers.push(setTimeout(() => {
      if (response.cancelled) return;
      this.send({ type: "response.output_audio.done", ...base });
      this.send({ type: "response.output_audio_transcript.done", ...base, transcript: text });
      const done = { ...item, status: "completed", content: [{ type: "output_audio", transcript: text }] };
      this.send({ type: "response.output_item.done", response_id: response.id, output_index: 0, item: done });
      response.output.push(done);
      response.finish("completed");
    }, 100));
    return { responseId: response.id, itemId };
  }

  /**
   * An assistant message that begins (`text` as its transcript so far) and never ends: no
   * `response.done`. The response stays active here until {@link forgetResponse} or a new connection.
   * @param {string} text
   * @returns {{responseId: string, itemId: string}}
   */
  respondWithoutEnd(text) {
    const { response, itemId, base } = this.beginAudioMessage();
    this.send({ type: "response.output_audio_transcript.delta", ...base, delta: text });
    return { responseId: response.id, itemId };
  }

  /**
   * A response that ends badly: its start, a little transcript, then `response.done` with `status`
   * (`failed`, `incomplete`) and `status_details`.
   * @param {string} status
   * @param {object} statusDetails
   * @returns {{responseId: string, itemId: string}}
   */
  respondAndEndWith(status, statusDetails) {
    const started = this.respondWithoutEnd("I was about to");
    this.activeResponse = null;
    this.send({
      type: "response.done",
      response: { object: "realtime.response", id: started.responseId, status, status_details: statusDetails, output: [] },
    });
    return started;
  }

  /** The running response ends here without a word to the client (as if its `response.done` was lost). */
  forgetResponse() {
    if (this.activeResponse) for (const t of this.activeResponse.timers) clearTimeout(t);
    this.activeResponse = null;
  }

  /**
   * A frame exactly as given (e.g. one that does not parse).
   * @param {string} text
   */
  sendRaw(text) {
    if (this.socket && this.socket.readyState === 1) this.socket.send(text);
  }

  /**
   * Close the current connection as a failing service would (voxgate resumes on a new one).
   * @param {number} [code]
   * @param {string} [reason]
   */
  dropConnection(code = 1011, reason = "internal error") {
    if (this.socket) this.socket.close(code, reason);
  }

  /**
   * The server VAD's view of a user turn: speech started (barge-in), stopped, committed, and the
   * transcription of what was said.
   * @param {string} transcript
   */
  userTurn(transcript) {
    const itemId = this.nextId("item");
    const heard = this.audioBuffer.length / 48;
    this.send({ type: "input_audio_buffer.speech_started", audio_start_ms: Math.max(0, Math.round(heard) - 300), item_id: itemId });
    if (this.activeResponse) this.activeResponse.cancel();
    this.send({ type: "input_audio_buffer.speech_stopped", audio_end_ms: Math.round(heard), item_id: itemId });
    this.send({ type: "input_audio_buffer.committed", previous_item_id: null, item_id: itemId });
    this.send({ type: "conversation.item.input_audio_transcription.completed", item_id: itemId, content_index: 0, transcript });
    return itemId;
  }

  /**
   * Wait until `predicate()` holds, re-checking whenever an event arrives.
   * @param {() => any} predicate
   * @param {number} [timeout]
   */
  waitFor(predicate, timeout = 10_000) {
    return new Promise((resolve, reject) => {
      const check = () => {
        const value = predicate();
        if (value) {
          clearTimeout(timer);
          this.waiters = this.waiters.filter((w) => w !== check);
          resolve(value);
        }
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== check);
        reject(new Error("fake upstream: timed out waiting"));
      }, timeout);
      this.waiters.push(check);
      check();
    });
  }
}
