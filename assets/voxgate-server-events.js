/**
 * How the browser client reads the server: each frame is parsed, announced as an `event`, and
 * dispatched by type to a handler here. The handlers assemble the transcript from its streamed
 * deltas (the assistant's words, the user's transcribed speech), keep track of the response in
 * flight (so a typed message's `response.create` is sent once the running response is over, even
 * when no `response.done` says so), report server errors that are the user's business, and pass
 * session, resume, speech and audio events on.
 *
 * A mixin, not a class: `voxgate-client.js` installs {@link serverEventMethods} and
 * {@link SERVER_EVENT_HANDLERS} on `VoxgateClient.prototype`, and `this` is the client throughout
 * (its state: `assistantText`, `userText`, `activeResponseId`, `responseCreatePending`,
 * `ourResponseCreates`, `truncatedItems`, `responseItems`, `restoredItems`). The events it emits
 * are documented in docs/client-module.md.
 *
 * @module voxgate-server-events
 */

import { WIRE_SAMPLE_RATE, decodePcm16 } from "./voxgate-audio.js";
import { BAD_RESPONSE_STATUSES, describeBadResponse, identifier } from "./voxgate-protocol.js";
import { ToolCallTracker } from "./voxgate-tool-calls.js";

/** Upstream error codes the client handles itself (they never reach the `error` event). */
const QUIET_ERROR_CODES = new Set(["response_cancel_not_active"]);

/**
 * The client's methods for incoming frames, the transcript and the response in flight; `this` is
 * the client.
 */
export const serverEventMethods = {
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
    else if (ToolCallTracker.handles(event.type)) this.onToolEvent(event);
  },

  /** @param {string} itemId @param {string} delta */
  onAssistantDelta(itemId, delta) {
    const text = (this.assistantText.get(itemId) || "") + (delta || "");
    this.assistantText.set(itemId, text);
    this.emit("transcript", { role: "assistant", item_id: itemId, text, delta, final: false });
  },

  /** @param {string} itemId @param {string|undefined} full */
  onAssistantDone(itemId, full) {
    const text = typeof full === "string" ? full : this.assistantText.get(itemId) || "";
    this.assistantText.delete(itemId);
    this.emit("transcript", { role: "assistant", item_id: itemId, text, final: true });
  },

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
  },

  /**
   * The running response is over though no `response.done` said so (the upstream forgot it, lost
   * it, or went away): ask for the response a typed message is waiting for, if any.
   */
  onResponseGone() {
    this.activeResponseId = null;
    this.responseItems = new Set();
    if (this.responseCreatePending) this.requestResponse();
  },

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
  },
};

/**
 * Server event handlers, keyed by event type; `this` is the client. Installed as
 * `VoxgateClient.prototype.handlers`; `voxgate.tool_call.*` events go to `onToolEvent` instead.
 */
export const SERVER_EVENT_HANDLERS = {
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
    // The response in flight, if any, died with the old upstream (its response.done will never
    // come): its audio stops. (A `max_age` resume waits until no response runs; one after
    // `upstream_closed` or `upstream_error` may come mid-response.) The audio of responses already
    // complete plays on: often the last answer's tail, sent faster than real time, still plays.
    // The new upstream holds those items under the same ids but as text, and a text item has no
    // audio to truncate: they are never truncated.
    if (this.player) {
      if (this.responseItems.size > 0) this.player.stop(this.responseItems);
      for (const itemId of this.player.queuedItems()) this.restoredItems.add(itemId);
    }
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
    this.responseItems = new Set();
    this.emit("response", { state: "created", response_id: this.activeResponseId });
  },
  "response.done"(event) {
    const response = event.response || {};
    this.activeResponseId = null;
    this.responseItems = new Set();
    // A response that did not complete sends no transcript .done for what it had begun.
    if (response.status && response.status !== "completed") this.finishPartialLines();
    this.emit("response", { state: "done", response_id: response.id, status: response.status });
    if (BAD_RESPONSE_STATUSES.has(response.status)) {
      this.emitError("server", `response_${response.status}`, describeBadResponse(response));
    }
    if (this.responseCreatePending) this.requestResponse();
  },
  "response.output_audio.delta"(event) {
    if (this.activeResponseId) this.responseItems.add(event.item_id);
    if (this.player && !this.truncatedItems.has(event.item_id)) {
      if (!this.player.play(event.item_id, event.content_index, event.delta)) {
        // Dropped unheard (the browser paused the audio), as a barge-in would: the response stops
        // (it would go on adding what the user will not hear), and the model keeps only what was
        // heard of the item (what played before its audio ran dry; 0 if none). Cancelled first, so
        // nothing is added to the item after its truncate. Once: later audio is dropped as truncated.
        if (this.activeResponseId) this.cancelResponse();
        this.truncateItem(event.item_id, event.content_index || 0, this.player.heardMs(event.item_id));
      }
    } else {
      // Not played (no playback, or the item was truncated), but still counted: the stats say
      // what arrived.
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
