/**
 * voxgate browser client: an ES module with no dependencies and no build step.
 *
 * ```js
 * import { VoxgateClient } from "/assets/voxgate-client.js";
 * const client = new VoxgateClient();
 * client.addEventListener("transcript", (e) => console.log(e.detail.role, e.detail.text));
 * client.addEventListener("confirmation", (e) => client.confirm(e.detail.call_id, true));
 * await client.connect({ token });          // token optional (ticket or JWT)
 * await client.startMicrophone();
 * client.sendText("What is on my calendar tomorrow?");
 * ```
 *
 * It speaks the OpenAI Realtime protocol (GA) to voxgate's `/v1/realtime` and asks for voxgate's
 * own events with the `voxgate.v1` subprotocol. See docs/client-module.md for the full API.
 *
 * @module voxgate-client
 */

import {
  PcmPlayer, WIRE_SAMPLE_RATE, bytesToBase64, closeCapture, decodePcm16, levelFromRms, openCapture, withTimeout,
} from "./voxgate-audio.js";

export { WIRE_SAMPLE_RATE, bytesToBase64, decodePcm16, levelFromRms };

/** The subprotocol that asks voxgate for `voxgate.*` events. */
export const EVENTS_PROTOCOL = "voxgate.v1";

/** The subprotocol prefix that carries a token (a ticket or a JWT). */
export const TOKEN_PROTOCOL_PREFIX = "voxgate-token.";

/** Terminal tool phases: exactly one of them ends every server-tool call. */
export const TERMINAL_PHASES = Object.freeze(["completed", "failed", "declined"]);

/**
 * The session configuration sent after `session.created`: PCM16 24 kHz both ways, server VAD
 * with interruption, and input transcription so the user's words appear in the transcript.
 * voxgate merges its server tools into it.
 */
export const DEFAULT_SESSION_CONFIG = Object.freeze({
  type: "realtime",
  audio: {
    input: {
      format: { type: "audio/pcm", rate: WIRE_SAMPLE_RATE },
      transcription: { model: "gpt-4o-mini-transcribe" },
      turn_detection: { type: "server_vad", create_response: true, interrupt_response: true },
    },
    output: { format: { type: "audio/pcm", rate: WIRE_SAMPLE_RATE } },
  },
});

/** Upstream error codes the client handles itself (they never reach the `error` event). */
const QUIET_ERROR_CODES = new Set(["response_cancel_not_active"]);

/** How long `resumeAudio()` waits for the browser before giving up, in ms. */
const RESUME_TIMEOUT_MS = 3000;

/** `response.done` statuses that mean the answer did not arrive whole. */
const BAD_RESPONSE_STATUSES = new Set(["failed", "incomplete"]);

/**
 * A wire identifier (a status, a reason, an error type or code) fit to show: only short
 * identifier characters pass, so no free text from the model or the service reaches the page.
 * @param {unknown} value
 * @returns {string}
 */
function identifier(value) {
  return typeof value === "string" && /^[A-Za-z0-9_.-]{1,64}$/.test(value) ? value : "";
}

/**
 * Words for a `response.done` that failed or was cut short: its status and, from
 * `status_details`, the reason and the error's type and code (never the error's message).
 * @param {object} response
 * @returns {string}
 */
export function describeBadResponse(response) {
  const details = response.status_details || {};
  const error = details.error || {};
  const why = [identifier(details.reason), identifier(error.type), identifier(error.code)].filter(Boolean);
  const words = response.status === "incomplete" ? "the answer is incomplete" : "the answer failed";
  return why.length > 0 ? `${words} (${why.join(", ")})` : words;
}

/**
 * @typedef {object} ClientOptions
 * @property {boolean} [echoCancellation=true]  microphone constraint
 * @property {boolean} [noiseSuppression=true]  microphone constraint
 * @property {boolean} [autoGainControl=true]   microphone constraint
 * @property {string}  [deviceId]               microphone to use (default: the system's)
 * @property {number}  [chunkMs=20]             length of one `input_audio_buffer.append`, in ms
 * @property {boolean} [playback=true]          play the assistant's audio
 * @property {object|null} [sessionConfig]      `session` object sent in `session.update` after
 *   `session.created`; `null` sends none (default: {@link DEFAULT_SESSION_CONFIG})
 * @property {string|URL} [workletUrl]          the capture worklet (default: next to this module)
 */

/**
 * @typedef {object} ConnectOptions
 * @property {string} [url]    WebSocket URL of `/v1/realtime` (default: this page's host)
 * @property {string} [token]  a session ticket or JWT, sent as subprotocol `voxgate-token.TOKEN`
 * @property {string} [model]  the `model` query parameter (the server's policy may pin it)
 */

/**
 * @typedef {object} ClientStats  counters for diagnostics and tests
 * @property {number} framesSent
 * @property {number} framesReceived
 * @property {number} appendsSent         `input_audio_buffer.append` events sent
 * @property {number} audioBytesSent      PCM bytes sent (before base64)
 * @property {number} audioMsSent         ms of audio sent (at 24 kHz)
 * @property {number} audioChunksReceived `response.output_audio.delta` events received
 * @property {number} audioMsReceived     ms of output audio received
 * @property {number} audioChunksScheduled
 * @property {number} audioChunksPlayed   chunks that played to their end
 * @property {number} msPlayed            ms of output audio actually played (cut chunks count partly)
 * @property {number} truncatesSent       `conversation.item.truncate` events sent (barge-in)
 * @property {number} interruptions       times playback was stopped early
 */

/** @returns {ClientStats} */
function emptyStats() {
  return {
    framesSent: 0,
    framesReceived: 0,
    appendsSent: 0,
    audioBytesSent: 0,
    audioMsSent: 0,
    audioChunksReceived: 0,
    audioMsReceived: 0,
    audioChunksScheduled: 0,
    audioChunksPlayed: 0,
    msPlayed: 0,
    truncatesSent: 0,
    interruptions: 0,
  };
}

/**
 * The default `/v1/realtime` URL for the page this module runs in.
 * @returns {string}
 */
export function defaultRealtimeUrl() {
  const scheme = globalThis.location && globalThis.location.protocol === "https:" ? "wss:" : "ws:";
  const host = globalThis.location ? globalThis.location.host : "127.0.0.1:8080";
  return `${scheme}//${host}/v1/realtime`;
}

/**
 * Words for a WebSocket close code.
 * @param {number} code
 * @returns {string}
 */
export function describeCloseCode(code) {
  switch (code) {
    case 1000: return "the session ended normally";
    case 1001: return "the server is going away";
    case 1005: return "the session ended";
    case 1006: return "the connection was lost or refused (check the address and your token)";
    case 1008: return "the server refused the session (policy)";
    case 1009: return "a message was too large";
    case 1011: return "the server hit an internal error";
    case 1012: return "the server is restarting";
    case 1013: return "the voice service is unavailable; try again later";
    default: return code >= 3000 && code < 5000 ? "the service ended the session" : "the connection closed";
  }
}

/**
 * A voice session with voxgate.
 *
 * Events (all `CustomEvent`s; the payload is `event.detail`):
 * - `status`       `{state: "connecting"|"open"|"closed", code?, reason?, wasClean?, byClient?, description?}`
 * - `session`      `{session_id, tools}` from `voxgate.session.ready`
 * - `closing`      `{reason, reconnect}` from `voxgate.session.closing` (the server will close soon;
 *                  `reconnect: true` means another instance will take a new session at once)
 * - `transcript`   `{role: "user"|"assistant", item_id, text, delta?, final, typed?, interrupted?, failed?}`
 * - `tool`         `{phase, call_id, name, ...}` — phase is `confirmation_requested`, `started`,
 *                  `progress`, `completed`, `failed` or `declined` (the other fields are the wire
 *                  event's), or `interrupted` (local: the socket closed while the call was open)
 * - `resume`       `{state: "resuming"|"resumed", reason, items_restored?, audio_dropped_ms?}` from
 *                  `voxgate.session.resuming/resumed` (voxgate moved the session to a new upstream)
 * - `audio`        `{state}` the playback AudioContext's state when it changes (`running`,
 *                  `suspended`, `interrupted`); while not running, output audio is dropped
 * - `confirmation` `{call_id, name, arguments, prompt, expires_at_ms}` (answer with {@link confirm})
 * - `citations`    `{call_id, name, citations: [{title, url, source, ...}]}`
 * - `error`        `{source: "server"|"connection"|"microphone"|"audio"|"client", code, message, type?, event_id?}`
 *                  (also `response_failed`/`response_incomplete` for a `response.done` that says so)
 * - `level`        `{level, rms, peak}` microphone level per chunk (0..1)
 * - `microphone`   `{active}`
 * - `speech`       `{state: "started"|"stopped", audio_start_ms?, audio_end_ms?, item_id?}` (server VAD)
 * - `playback`     `{state: "started"|"ended"|"interrupted", item_id, audio_end_ms?}`
 * - `response`     `{state: "created"|"done", response_id, status?}`
 * - `event`        every server event, parsed, before the client acts on it
 */
export class VoxgateClient extends EventTarget {
  /** @param {ClientOptions} [options] */
  constructor(options = {}) {
    super();
    /** @type {Required<Omit<ClientOptions, "deviceId"|"workletUrl">> & ClientOptions} */
    this.options = {
      echoCancellation: true,
      noiseSuppression: true,
      autoGainControl: true,
      chunkMs: 20,
      playback: true,
      sessionConfig: DEFAULT_SESSION_CONFIG,
      ...options,
    };
    /** @type {ClientStats} */
    this.stats = emptyStats();
    /** @type {"idle"|"connecting"|"open"|"closed"} */
    this.state = "idle";
    /** @type {string|null} voxgate's session id, from `voxgate.session.ready` */
    this.sessionId = null;
    /** @type {Array<{name: string, category: string, requires_confirmation: boolean}>} */
    this.tools = [];
    /** @type {Map<string, object>} calls awaiting the user's decision, by call_id */
    this.pendingConfirmations = new Map();
    /** @type {Map<string, string>} server calls announced and not yet ended: call_id → name */
    this.openCalls = new Map();
    this.ws = null;
    this.closedByClient = false;
    this.eventCounter = 0;
    this.activeResponseId = null;
    this.responseCreatePending = false;
    this.ourResponseCreates = new Set();
    this.assistantText = new Map();
    this.userText = new Map();
    /** @type {Set<string>} assistant items cut by a barge-in (late audio for them is dropped) */
    this.truncatedItems = new Set();
    this.mic = null;
    /** @type {Promise<void>|null} the capture being opened, if any */
    this.micStarting = null;
    this.micCancelled = false;
    /** @type {PcmPlayer|null} the assistant's audio (null with `playback: false`) */
    this.player = this.options.playback
      ? new PcmPlayer({
        stats: () => this.stats,
        onState: (detail) => this.emit("playback", detail),
        onContextState: (state) => this.onAudioState(state),
      })
      : null;
  }

  // ---------------------------------------------------------------- connection

  /**
   * Open the session. Resolves when the WebSocket is open; rejects if it closes first (a refused
   * token, an unreachable server). Offers subprotocols `realtime`, `voxgate.v1` and, with a
   * token, `voxgate-token.TOKEN`.
   * @param {ConnectOptions} [options]
   * @returns {Promise<void>}
   */
  connect({ url, token, model } = {}) {
    if (this.ws && (this.state === "connecting" || this.state === "open")) {
      return Promise.reject(new Error("already connected"));
    }
    const target = new URL(url || defaultRealtimeUrl(), globalThis.location ? globalThis.location.href : undefined);
    if (model) target.searchParams.set("model", model);
    const protocols = ["realtime", EVENTS_PROTOCOL];
    const trimmed = (token || "").trim();
    if (trimmed) protocols.push(TOKEN_PROTOCOL_PREFIX + trimmed);

    this.resetSession();
    // Connect runs from a click: the moment browsers allow an AudioContext to start.
    if (this.player) this.player.ensureContext();
    this.setStatus({ state: "connecting" });
    let ws;
    try {
      ws = new WebSocket(target.href, protocols);
    } catch (err) {
      // A token with characters a subprotocol cannot carry throws SyntaxError here.
      const message = trimmed ? "the token contains characters that cannot be sent" : String(err && err.message);
      this.emitError("connection", "invalid_connect_options", message);
      this.setStatus({ state: "closed", code: 1006, reason: "", wasClean: false, byClient: false });
      return Promise.reject(new Error(message));
    }
    this.ws = ws;
    this.closedByClient = false;
    return new Promise((resolve, reject) => {
      let opened = false;
      ws.onopen = () => {
        opened = true;
        this.setStatus({ state: "open", protocol: ws.protocol });
        resolve();
      };
      ws.onmessage = (event) => this.onFrame(event.data);
      ws.onerror = () => {
        // The browser hides the cause; the close event that follows carries the code.
      };
      ws.onclose = (event) => {
        if (this.ws === ws) this.ws = null;
        this.onClosed(event, opened);
        if (!opened) reject(new Error(describeCloseCode(event.code)));
      };
    });
  }

  /**
   * Close the session (code 1000). Stops the microphone and playback.
   * @param {string} [reason]
   */
  disconnect(reason = "client disconnect") {
    this.closedByClient = true;
    this.stopMicrophone();
    this.stopPlayback({ truncate: false });
    if (this.ws) {
      try {
        this.ws.close(1000, reason.slice(0, 120));
      } catch {
        // Already closing.
      }
    }
  }

  /** @returns {boolean} whether the socket is open */
  get connected() {
    return this.state === "open" && !!this.ws && this.ws.readyState === WebSocket.OPEN;
  }

  /**
   * Send a client event as JSON. An `event_id` is added when it has none.
   * @param {object} event
   * @returns {boolean} false if the session is not open
   */
  send(event) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    const withId = event.event_id ? event : { ...event, event_id: this.nextEventId() };
    this.ws.send(JSON.stringify(withId));
    this.stats.framesSent += 1;
    return true;
  }

  // ---------------------------------------------------------------- text and confirmations

  /**
   * Send a typed user message and ask for a response. Interrupts playback first; if a response
   * is already running it is cancelled and the new one is requested when it has finished.
   * @param {string} text
   * @returns {boolean} false if not sent (empty text or not connected)
   */
  sendText(text) {
    const trimmed = String(text || "").trim();
    if (!trimmed || !this.connected) return false;
    this.stopPlayback({ truncate: true });
    const eventId = this.nextEventId();
    this.send({
      type: "conversation.item.create",
      event_id: eventId,
      item: { type: "message", role: "user", content: [{ type: "input_text", text: trimmed }] },
    });
    this.emit("transcript", { role: "user", item_id: eventId, text: trimmed, final: true, typed: true });
    if (this.activeResponseId) {
      this.send({ type: "response.cancel" });
      this.responseCreatePending = true;
    } else {
      this.requestResponse();
    }
    return true;
  }

  /**
   * Answer a confirmation request: `{"type":"voxgate.tool_call.confirm","call_id","approved"}`.
   * @param {string} callId
   * @param {boolean} approved
   * @returns {boolean} false if not connected
   */
  confirm(callId, approved) {
    const sent = this.send({ type: "voxgate.tool_call.confirm", call_id: String(callId), approved: !!approved });
    if (sent) this.pendingConfirmations.delete(callId);
    return sent;
  }

  // ---------------------------------------------------------------- microphone

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
  }

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
      closeCapture(mic);
      return;
    }
    this.mic = mic;
    // A device unplugged or a permission withdrawn ends the track without a word otherwise.
    for (const track of stream.getAudioTracks()) {
      track.addEventListener("ended", () => this.onMicrophoneEnded(mic), { once: true });
    }
    this.emit("microphone", { active: true });
  }

  /** @param {object} mic the capture whose track ended */
  onMicrophoneEnded(mic) {
    if (this.mic !== mic) return;
    this.stopMicrophone();
    this.emitError("microphone", "microphone_ended", "the microphone stopped (unplugged, or access to it was withdrawn)");
  }

  /**
   * @param {MediaStream} stream
   * @param {number} chunkMs
   */
  buildCapture(stream, chunkMs) {
    return openCapture(stream, { chunkMs, workletUrl: this.options.workletUrl, onChunk: (data) => this.onCaptureChunk(data) });
  }

  /** @param {{type: string, pcm: ArrayBuffer, rms: number, peak: number}} data */
  onCaptureChunk(data) {
    if (!data || data.type !== "chunk") return;
    this.emit("level", { level: levelFromRms(data.rms), rms: data.rms, peak: data.peak });
    const bytes = new Uint8Array(data.pcm);
    if (this.send({ type: "input_audio_buffer.append", audio: bytesToBase64(bytes) })) {
      this.stats.appendsSent += 1;
      this.stats.audioBytesSent += bytes.length;
      this.stats.audioMsSent += (bytes.length / 2 / WIRE_SAMPLE_RATE) * 1000;
    }
  }

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
  }

  /** @returns {boolean} whether the microphone is capturing */
  get microphoneActive() {
    return !!this.mic;
  }

  // ---------------------------------------------------------------- playback

  /** @returns {boolean} whether assistant audio is playing or queued */
  get playing() {
    return !!this.player && this.player.playing;
  }

  /**
   * Stop all assistant audio at once. With `truncate`, tell the server how much of the item was
   * heard (`conversation.item.truncate` with `audio_end_ms` = ms actually played) so the unheard
   * rest is dropped from the conversation.
   * @param {{truncate?: boolean}} [options]
   * @returns {number|null} ms of the current item that were played, or null if nothing was playing
   */
  stopPlayback({ truncate = true } = {}) {
    const cut = this.player ? this.player.stop() : null;
    if (!cut) return null;
    if (truncate && cut.itemId) {
      this.truncatedItems.add(cut.itemId);
      const event = { type: "conversation.item.truncate", item_id: cut.itemId, content_index: cut.contentIndex, audio_end_ms: cut.audioEndMs };
      if (this.send(event)) this.stats.truncatesSent += 1;
    }
    return cut.audioEndMs;
  }

  /**
   * Resume the assistant's audio after the browser suspended it; call from a click or key press.
   * Rejects if the browser does not resume it within a few seconds.
   * @returns {Promise<void>}
   */
  resumeAudio() {
    if (!this.player) return Promise.resolve();
    const context = this.player.ensureContext();
    return withTimeout(context.resume(), RESUME_TIMEOUT_MS, "the audio output did not resume");
  }

  /** @param {string} state the playback AudioContext's new state */
  onAudioState(state) {
    if (state !== "running") {
      // What was queued would play late, all at once, when the context resumes: cut it now and
      // tell the model how much was heard.
      this.stopPlayback({ truncate: true });
      this.emitError("audio", "audio_suspended", "the browser paused the assistant's audio: click anywhere on the page to resume it");
    }
    this.emit("audio", { state });
  }

  // ---------------------------------------------------------------- incoming events

  /** @param {string|ArrayBuffer|Blob} data */
  onFrame(data) {
    if (typeof data !== "string") return;
    let event;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
    if (!event || typeof event.type !== "string") return;
    this.stats.framesReceived += 1;
    this.emit("event", event);
    const handler = this.handlers[event.type];
    if (handler) handler.call(this, event);
    else if (event.type.startsWith("voxgate.tool_call.")) this.onToolEvent(event);
  }

  /** @param {object} event */
  onToolEvent(event) {
    const phase = event.type.slice("voxgate.tool_call.".length);
    const { type: _type, ...fields } = event;
    if (phase === "confirmation_requested") {
      this.pendingConfirmations.set(event.call_id, fields);
    } else if (TERMINAL_PHASES.includes(phase) || phase === "started") {
      this.pendingConfirmations.delete(event.call_id);
    }
    if (TERMINAL_PHASES.includes(phase)) this.openCalls.delete(event.call_id);
    else if (phase === "confirmation_requested" || phase === "started") this.openCalls.set(event.call_id, event.name);
    this.emit("tool", { phase, ...fields });
    if (phase === "confirmation_requested") this.emit("confirmation", fields);
    if (phase === "completed" && Array.isArray(event.citations) && event.citations.length > 0) {
      this.emit("citations", { call_id: event.call_id, name: event.name, citations: event.citations });
    }
  }

  /** @param {string} itemId @param {string} delta */
  onAssistantDelta(itemId, delta) {
    const text = (this.assistantText.get(itemId) || "") + (delta || "");
    this.assistantText.set(itemId, text);
    this.emit("transcript", { role: "assistant", item_id: itemId, text, delta, final: false });
  }

  /** @param {string} itemId @param {string|undefined} full */
  onAssistantDone(itemId, full) {
    const text = typeof full === "string" ? full : this.assistantText.get(itemId) || "";
    this.assistantText.delete(itemId);
    this.emit("transcript", { role: "assistant", item_id: itemId, text, final: true });
  }

  /**
   * Lines still streaming will get no more words (their response ended early, or the upstream went
   * away): end them as they are, so that nothing stays "busy" for assistive technology.
   * @param {{user?: boolean}} [options] also the user's lines
   */
  finishPartialLines({ user = false } = {}) {
    for (const [itemId, text] of this.assistantText) {
      this.emit("transcript", { role: "assistant", item_id: itemId, text, final: true, interrupted: true });
    }
    this.assistantText.clear();
    if (!user) return;
    for (const [itemId, text] of this.userText) {
      this.emit("transcript", { role: "user", item_id: itemId, text, final: true, interrupted: true });
    }
    this.userText.clear();
  }

  /**
   * The running response is over though no `response.done` said so (the upstream forgot it, lost
   * it, or went away): ask for the response a typed message is waiting for, if any.
   */
  onResponseGone() {
    this.activeResponseId = null;
    if (this.responseCreatePending) this.requestResponse();
  }

  /** @param {object} event an `error` event */
  onServerError(event) {
    const error = event.error || {};
    const code = error.code || error.type || "error";
    // Nothing to cancel: the response the client waited on is gone (the upstream that ran it went
    // away, or its response.done was lost). Without this, a typed message would wait forever.
    if (code === "response_cancel_not_active") this.onResponseGone();
    // voxgate dropped an event it could not read; it may have been the response.done.
    if (code === "voxgate_upstream_event_unreadable" && this.activeResponseId) this.onResponseGone();
    if (QUIET_ERROR_CODES.has(code)) return;
    if (code === "conversation_already_has_active_response" && this.ourResponseCreates.has(error.event_id)) {
      // Ours collided with a response the server (or voxgate) started: ask again after it.
      this.ourResponseCreates.delete(error.event_id);
      this.responseCreatePending = true;
      return;
    }
    this.emit("error", {
      source: "server",
      type: error.type,
      code,
      message: error.message || "the server reported an error",
      event_id: error.event_id || null,
    });
  }

  /**
   * @param {CloseEvent} event
   * @param {boolean} opened
   */
  onClosed(event, opened) {
    this.stopMicrophone();
    this.stopPlayback({ truncate: false });
    for (const [callId, pending] of this.pendingConfirmations) {
      this.emit("tool", { phase: "declined", call_id: callId, name: pending.name, reason: "session_closed", local: true });
      this.openCalls.delete(callId);
    }
    this.pendingConfirmations.clear();
    // Calls running (or approved and not yet started) may still finish on the server, but this
    // socket will never hear how: their outcome is unknown here.
    for (const [callId, name] of this.openCalls) {
      this.emit("tool", { phase: "interrupted", call_id: callId, name, local: true });
    }
    this.openCalls.clear();
    this.finishPartialLines({ user: true });
    this.activeResponseId = null;
    const byClient = this.closedByClient;
    if (!byClient && !opened) {
      this.emitError("connection", "connect_failed", `could not connect: ${describeCloseCode(event.code)}`);
    } else if (!byClient && event.code !== 1000) {
      this.emitError("connection", "connection_closed", `the session closed: ${describeCloseCode(event.code)}`);
    }
    this.setStatus({
      state: "closed",
      code: event.code,
      reason: event.reason,
      wasClean: event.wasClean,
      byClient,
      description: describeCloseCode(event.code),
    });
  }

  // ---------------------------------------------------------------- helpers

  requestResponse() {
    const eventId = this.nextEventId();
    this.ourResponseCreates.add(eventId);
    this.responseCreatePending = false;
    this.send({ type: "response.create", event_id: eventId });
  }

  resetSession() {
    this.stats = emptyStats();
    this.sessionId = null;
    this.tools = [];
    this.pendingConfirmations.clear();
    this.openCalls.clear();
    this.activeResponseId = null;
    this.responseCreatePending = false;
    this.ourResponseCreates.clear();
    this.assistantText.clear();
    this.userText.clear();
    this.truncatedItems = new Set();
  }

  /** @returns {string} */
  nextEventId() {
    this.eventCounter += 1;
    return `vgc_${Date.now().toString(36)}_${this.eventCounter}`;
  }

  /** @param {object} detail */
  setStatus(detail) {
    this.state = detail.state;
    this.emit("status", detail);
  }

  /**
   * @param {string} source
   * @param {string} code
   * @param {string} message
   */
  emitError(source, code, message) {
    this.emit("error", { source, code, message });
  }

  /**
   * @param {string} type
   * @param {object} detail
   */
  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}

/** Server event handlers, keyed by event type; `this` is the client. */
VoxgateClient.prototype.handlers = {
  "session.created"() {
    if (this.options.sessionConfig) this.send({ type: "session.update", session: this.options.sessionConfig });
  },
  "voxgate.session.ready"(event) {
    this.sessionId = event.session_id || null;
    this.tools = Array.isArray(event.tools) ? event.tools : [];
    this.emit("session", { session_id: this.sessionId, tools: this.tools });
  },
  "voxgate.session.closing"(event) {
    this.emit("closing", { reason: event.reason || "", reconnect: event.reconnect === true });
  },
  "voxgate.session.resuming"(event) {
    // The response in flight died with the old upstream: its response.done will never come.
    this.stopPlayback({ truncate: false });
    this.finishPartialLines({ user: true });
    this.onResponseGone();
    this.emit("resume", { state: "resuming", reason: identifier(event.reason) });
  },
  "voxgate.session.resumed"(event) {
    this.emit("resume", {
      state: "resumed",
      reason: identifier(event.reason),
      items_restored: Number(event.items_restored) || 0,
      audio_dropped_ms: Number(event.audio_dropped_ms) || 0,
    });
  },
  "error"(event) {
    this.onServerError(event);
  },
  "response.created"(event) {
    this.activeResponseId = (event.response && event.response.id) || "unknown";
    this.emit("response", { state: "created", response_id: this.activeResponseId });
  },
  "response.done"(event) {
    const response = event.response || {};
    this.activeResponseId = null;
    // A response that did not complete sends no transcript .done for what it had begun.
    if (response.status && response.status !== "completed") this.finishPartialLines();
    this.emit("response", { state: "done", response_id: response.id, status: response.status });
    if (BAD_RESPONSE_STATUSES.has(response.status)) {
      this.emitError("server", `response_${response.status}`, describeBadResponse(response));
    }
    if (this.responseCreatePending) this.requestResponse();
  },
  "response.output_audio.delta"(event) {
    if (this.truncatedItems.has(event.item_id)) return;
    if (this.player) this.player.play(event.item_id, event.content_index, event.delta);
    else {
      // Not playing, but still counted: the stats say what arrived.
      this.stats.audioChunksReceived += 1;
      this.stats.audioMsReceived += (decodePcm16(event.delta || "").length / WIRE_SAMPLE_RATE) * 1000;
    }
  },
  "response.audio.delta"(event) {
    this.handlers["response.output_audio.delta"].call(this, event);
  },
  "response.output_audio_transcript.delta"(event) {
    this.onAssistantDelta(event.item_id, event.delta);
  },
  "response.output_audio_transcript.done"(event) {
    this.onAssistantDone(event.item_id, event.transcript);
  },
  "response.audio_transcript.delta"(event) {
    this.onAssistantDelta(event.item_id, event.delta);
  },
  "response.audio_transcript.done"(event) {
    this.onAssistantDone(event.item_id, event.transcript);
  },
  "response.output_text.delta"(event) {
    this.onAssistantDelta(event.item_id, event.delta);
  },
  "response.output_text.done"(event) {
    this.onAssistantDone(event.item_id, event.text);
  },
  "response.text.delta"(event) {
    this.onAssistantDelta(event.item_id, event.delta);
  },
  "response.text.done"(event) {
    this.onAssistantDone(event.item_id, event.text);
  },
  "conversation.item.input_audio_transcription.delta"(event) {
    const text = (this.userText.get(event.item_id) || "") + (event.delta || "");
    this.userText.set(event.item_id, text);
    this.emit("transcript", { role: "user", item_id: event.item_id, text, delta: event.delta, final: false });
  },
  "conversation.item.input_audio_transcription.completed"(event) {
    this.userText.delete(event.item_id);
    this.emit("transcript", { role: "user", item_id: event.item_id, text: event.transcript || "", final: true });
  },
  "conversation.item.input_audio_transcription.failed"(event) {
    // The model still heard the audio; only its words for the transcript are missing.
    this.userText.delete(event.item_id);
    this.emit("transcript", { role: "user", item_id: event.item_id, text: "", final: true, failed: true });
  },
  "input_audio_buffer.speech_started"(event) {
    // Barge-in: the user talks over the assistant; stop at once and report what was heard.
    this.stopPlayback({ truncate: true });
    this.emit("speech", { state: "started", audio_start_ms: event.audio_start_ms, item_id: event.item_id });
  },
  "input_audio_buffer.speech_stopped"(event) {
    this.emit("speech", { state: "stopped", audio_end_ms: event.audio_end_ms, item_id: event.item_id });
  },
};
