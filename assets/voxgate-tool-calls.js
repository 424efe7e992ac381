/**
 * The server-tool calls of one session, as the browser client sees them: which calls wait for the
 * user's decision, which are open (announced and not yet ended), and the events they become.
 *
 * Each `voxgate.tool_call.<phase>` event becomes a `tool` event (`{phase, call_id, name, …}`), a
 * `confirmation_requested` also a `confirmation` event, and a `completed` with sources a
 * `citations` event. When the socket closes, the calls whose outcome it will never hear end
 * locally: a call still awaiting a decision is `declined` (`session_closed`), one running (or
 * approved and not yet started) is `interrupted`. Used by `VoxgateClient` (voxgate-client.js);
 * the events are documented in docs/client-module.md.
 *
 * @module voxgate-tool-calls
 */

import { TERMINAL_PHASES } from "./voxgate-protocol.js";

/** The wire prefix of every tool-call event. */
const TOOL_EVENT_PREFIX = "voxgate.tool_call.";

export class ToolCallTracker {
  /** @param {(type: string, detail: object) => void} emit sends one client event */
  constructor(emit) {
    this.emit = emit;
    /** @type {Map<string, object>} calls awaiting the user's decision, by call_id */
    this.pending = new Map();
    /** @type {Map<string, string>} server calls announced and not yet ended: call_id → name */
    this.open = new Map();
  }

  /** @param {string} type a server event's type @returns {boolean} whether it is a tool-call event */
  static handles(type) {
    return type.startsWith(TOOL_EVENT_PREFIX);
  }

  /** @param {object} event a `voxgate.tool_call.*` server event */
  onEvent(event) {
    const phase = event.type.slice(TOOL_EVENT_PREFIX.length);
    const { type: _type, ...fields } = event;
    if (phase === "confirmation_requested") {
      this.pending.set(event.call_id, fields);
    } else if (TERMINAL_PHASES.includes(phase) || phase === "started") {
      this.pending.delete(event.call_id);
    }
    if (TERMINAL_PHASES.includes(phase)) this.open.delete(event.call_id);
    else if (phase === "confirmation_requested" || phase === "started") this.open.set(event.call_id, event.name);
    this.emit("tool", { phase, ...fields });
    if (phase === "confirmation_requested") this.emit("confirmation", fields);
    if (phase === "completed" && Array.isArray(event.citations) && event.citations.length > 0) {
      this.emit("citations", { call_id: event.call_id, name: event.name, citations: event.citations });
    }
  }

  /** @param {string} callId the user's decision on this call was sent */
  decided(callId) {
    this.pending.delete(callId);
  }

  /** The socket closed: end every call locally, since this socket will never hear how they end. */
  closeAll() {
    for (const [callId, pending] of this.pending) {
      this.emit("tool", { phase: "declined", call_id: callId, name: pending.name, reason: "session_closed", local: true });
      this.open.delete(callId);
    }
    this.pending.clear();
    // Calls running (or approved and not yet started) may still finish on the server, but this
    // socket will never hear how: their outcome is unknown here.
    for (const [callId, name] of this.open) {
      this.emit("tool", { phase: "interrupted", call_id: callId, name, local: true });
    }
    this.open.clear();
  }

  /** Forget every call (a new session starts). */
  clear() {
    this.pending.clear();
    this.open.clear();
  }
}
