/**
 * The wire vocabulary of voxgate's `/v1/realtime` for the browser client: the subprotocols it
 * offers, the session configuration it sends, the tool phases that end a call, and close codes
 * and failed responses in words for the page.
 *
 * Pure constants and functions, no state. `voxgate-client.js` re-exports the public ones (the
 * contract is docs/client-module.md); import them from there.
 *
 * @module voxgate-protocol
 */

import { WIRE_SAMPLE_RATE } from "./voxgate-audio.js";

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

/** `response.done` statuses that mean the answer did not arrive whole. */
export const BAD_RESPONSE_STATUSES = new Set(["failed", "incomplete"]);

/**
 * A wire identifier (a status, a reason, an error type or code) fit to show: only short
 * identifier characters pass, so no free text from the model or the service reaches the page.
 * @param {unknown} value
 * @returns {string}
 */
export function identifier(value) {
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
