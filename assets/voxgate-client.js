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
 * This file is the public entry point: every export and the whole `VoxgateClient` API come from
 * here. It holds the connection, typed messages, confirmations and playback control; the rest
 * lives in sibling modules it imports: voxgate-protocol.js (subprotocols, session config, close
 * codes in words), voxgate-server-events.js (dispatch of server events, transcript assembly, the
 * response in flight), voxgate-tool-calls.js (tool calls, and those awaiting a decision),
 * voxgate-microphone.js (`startMicrophone`/`stopMicrophone`) and voxgate-audio.js (PCM16, the
 * capture worklet, gapless playback).
 *
 * @module voxgate-client
 */

import { PcmPlayer, WIRE_SAMPLE_RATE, bytesToBase64, decodePcm16, levelFromRms, withTimeout } from "./voxgate-audio.js";
import { microphoneMethods } from "./voxgate-microphone.js";
import {
  DEFAULT_SESSION_CONFIG, EVENTS_PROTOCOL, TOKEN_PROTOCOL_PREFIX, defaultRealtimeUrl, describeCloseCode,
} from "./voxgate-protocol.js";
import { SERVER_EVENT_HANDLERS, serverEventMethods } from "./voxgate-server-events.js";
import { ToolCallTracker } from "./voxgate-tool-calls.js";

export { WIRE_SAMPLE_RATE, bytesToBase64, decodePcm16, levelFromRms };
export {
  DEFAULT_SESSION_CONFIG, EVENTS_PROTOCOL, TERMINAL_PHASES, TOKEN_PROTOCOL_PREFIX, defaultRealtimeUrl,
  describeBadResponse, describeCloseCode,
} from "./voxgate-protocol.js";

/** How long `resumeAudio()` waits for the browser before giving up, in ms. */
const RESUME_TIMEOUT_MS = 3000;
/** The most UTF-8 bytes a WebSocket close reason may carry (`close()` throws past it). */
const CLOSE_REASON_MAX_BYTES = 123;

/**
 * `reason` cut to what a close frame can carry: at most 123 UTF-8 bytes, never inside a character.
 * @param {string} reason
 * @returns {string}
 */
function closeReason(reason) {
  const text = String(reason);
  const encoder = new TextEncoder();
  if (encoder.encode(text).length <= CLOSE_REASON_MAX_BYTES) return text;
  let out = "";
  let bytes = 0;
  for (const char of text) {
    bytes += encoder.encode(char).length;
    if (bytes > CLOSE_REASON_MAX_BYTES) break;
    out += char;
  }
  return out;
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
    /** The session's tool calls: those awaiting a decision and those open. */
    this.toolCalls = new ToolCallTracker((type, detail) => this.emit(type, detail));
    /** @type {Map<string, object>} calls awaiting the user's decision, by call_id */
    this.pendingConfirmations = this.toolCalls.pending;
    /** @type {Map<string, string>} server calls announced and not yet ended: call_id → name */
    this.openCalls = this.toolCalls.open;
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
    /** @type {Set<string>} items with audio in the response running now (a resume stops them) */
    this.responseItems = new Set();
    /** @type {Set<string>} items still playing from before a resume: never truncated (the new
     *  upstream holds them under the same ids, but as text, which has no audio to truncate) */
    this.restoredItems = new Set();
    /** @type {string|null} the response this client cancelled last (it cancels each one once) */
    this.cancelledResponseId = null;
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
        this.ws.close(1000, closeReason(reason));
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
    if (sent) this.toolCalls.decided(callId);
    return sent;
  }

  // ---------------------------------------------------------------- microphone

  // `startMicrophone`, `stopMicrophone` and their helpers: voxgate-microphone.js, installed below.

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
   * Stop all assistant audio at once. With `truncate`, tell the server how much of each item cut
   * was heard (`conversation.item.truncate` with `audio_end_ms` = ms actually played; 0 for an item
   * queued behind the one heard) so the unheard rest is dropped from the conversation.
   * @param {{truncate?: boolean}} [options]
   * @returns {number|null} ms of the item heard at the stop that were played, or null if nothing
   *   was playing
   */
  stopPlayback({ truncate = true } = {}) {
    const cuts = this.player ? this.player.stop() : null;
    if (!cuts) return null;
    if (truncate) for (const cut of cuts) this.truncateItem(cut.itemId, cut.contentIndex, cut.audioEndMs);
    return cuts[0].audioEndMs;
  }

  /**
   * Tell the server the user heard only `audioEndMs` of an assistant item; later audio for it is
   * dropped. Once per item; never for an item from before a resume (the new upstream holds it as
   * text, which has no audio to truncate).
   * @param {string} itemId
   * @param {number} contentIndex
   * @param {number} audioEndMs
   */
  truncateItem(itemId, contentIndex, audioEndMs) {
    if (!itemId || this.truncatedItems.has(itemId)) return;
    this.truncatedItems.add(itemId);
    if (this.restoredItems.has(itemId)) return;
    const event = { type: "conversation.item.truncate", item_id: itemId, content_index: contentIndex, audio_end_ms: audioEndMs };
    if (this.send(event)) this.stats.truncatesSent += 1;
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

  /**
   * Cancel the running response (`response.cancel`), once: the user will not hear the rest of it.
   */
  cancelResponse() {
    if (!this.activeResponseId || this.cancelledResponseId === this.activeResponseId) return;
    this.cancelledResponseId = this.activeResponseId;
    this.send({ type: "response.cancel" });
  }

  /** @param {string} state the playback AudioContext's new state */
  onAudioState(state) {
    if (state !== "running") {
      // What was queued would play late, all at once, when the context resumes: cut it now and
      // tell the model how much was heard, as a barge-in does. The running response, if its audio
      // is cut, is cancelled first: its later audio would be dropped, and nothing is added to an
      // item after its truncate.
      const player = this.player;
      if (player && player.queuedItems().some((itemId) => this.responseItems.has(itemId))) this.cancelResponse();
      this.stopPlayback({ truncate: true });
      this.emitError("audio", "audio_suspended", "the browser paused the assistant's audio: click anywhere on the page to resume it");
    }
    this.emit("audio", { state });
  }

  // ---------------------------------------------------------------- incoming events

  // Frames are read by `onFrame` and the handlers of voxgate-server-events.js, installed below.

  /** @param {object} event a `voxgate.tool_call.*` server event */
  onToolEvent(event) {
    this.toolCalls.onEvent(event);
  }

  /**
   * @param {CloseEvent} event
   * @param {boolean} opened
   */
  onClosed(event, opened) {
    this.stopMicrophone();
    this.stopPlayback({ truncate: false });
    this.toolCalls.closeAll();
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
    this.toolCalls.clear();
    this.activeResponseId = null;
    this.responseCreatePending = false;
    this.ourResponseCreates.clear();
    this.assistantText.clear();
    this.userText.clear();
    this.truncatedItems = new Set();
    this.responseItems = new Set();
    this.restoredItems = new Set();
    this.cancelledResponseId = null;
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

// The methods that live in sibling modules: the microphone; incoming frames (`onFrame`), the
// transcript and the response in flight. Installed as a class's own methods are: not enumerable.
for (const [name, method] of Object.entries({ ...microphoneMethods, ...serverEventMethods })) {
  Object.defineProperty(VoxgateClient.prototype, name, { value: method, writable: true, configurable: true });
}
/** Server event handlers, keyed by event type; `this` is the client. */
VoxgateClient.prototype.handlers = SERVER_EVENT_HANDLERS;
