/**
 * The voxgate page: wires the DOM of index.html to a {@link VoxgateClient}.
 * No framework; every string from the server goes into the DOM as text, never as HTML.
 *
 * This file is the wiring: Connect / Disconnect / Reconnect, the connection status, what the page
 * says when the server closes or restarts (and the automatic reconnect after a drain), typed
 * requests, and the error region. The views are their own modules: audio-controls.js (microphone,
 * level meter, playback), transcript-view.js, activity-view.js (tool calls), sources-view.js
 * (citations), confirm-dialog.js, errors-view.js; dom.js holds the helpers they share.
 *
 * For diagnostics and tests the client is reachable as `window.voxgate`.
 *
 * @module app
 */

import { mountActivity } from "./activity-view.js";
import { mountAudioControls } from "./audio-controls.js";
import { mountConfirmDialog } from "./confirm-dialog.js";
import { $ } from "./dom.js";
import { removeMessages, showError } from "./errors-view.js";
import { mountSources } from "./sources-view.js";
import { mountTranscript } from "./transcript-view.js";
import { VoxgateClient } from "./voxgate-client.js";

/** Single-use session tickets (`POST /v1/sessions`) start with this; a spent one never works again. */
const TICKET_PREFIX = "vgt.";
/** voxgate's reason when the JWT that admitted the session expires: the same token cannot reconnect. */
const AUTH_EXPIRED = /authori[sz]ation expired/i;

const els = {
  status: $("connection-status"),
  statusText: document.querySelector("[data-testid=connection-status-text]"),
  connectForm: $("connect-form"),
  token: $("token-input"),
  model: $("model-input"),
  connect: $("connect-button"),
  disconnect: $("disconnect-button"),
  reconnect: $("reconnect-button"),
  mic: $("mic-button"),
  textForm: $("text-form"),
  textInput: $("text-input"),
  send: $("send-button"),
};

const client = new VoxgateClient();
// @ts-ignore — a handle for diagnostics and the browser tests.
window.voxgate = client;

/** The last connect parameters, for Reconnect. */
let lastConnect = null;
/** Whether the last session opened (a ticket it carried is spent). */
let sessionOpened = false;
/** Set when the server said the sign-in that admitted the session expired. */
let authExpired = false;

// ------------------------------------------------------------------ connection

/** @param {{token: string, model: string}} params */
async function connect(params) {
  lastConnect = params;
  closingAnnounced = false;
  sessionOpened = false;
  authExpired = false;
  els.reconnect.hidden = true;
  try {
    await client.connect({ token: params.token || undefined, model: params.model || undefined });
  } catch {
    // Reported through the client's `error` and `status` events.
  }
}

els.connectForm.addEventListener("submit", (event) => {
  event.preventDefault();
  // A manual Connect may be the next user at a shared workstation: the previous conversation's
  // patient details leave the screen, with a request typed and not sent. (Automatic reconnects
  // and Reconnect keep them.)
  clearConversation();
  els.textInput.value = "";
  audio.forgetMicrophone();
  connect({ token: els.token.value.trim(), model: els.model.value.trim() });
});
els.disconnect.addEventListener("click", () => {
  // The user is leaving, perhaps a shared workstation: the next person to press Connect must not
  // get a session with this one's token, nor see this conversation or a request typed and not
  // sent. (A close the user did not ask for keeps them: the automatic reconnect after a drain and
  // Reconnect need the token. So Disconnect stays usable after such a close, to forget them.)
  els.token.value = "";
  els.textInput.value = "";
  lastConnect = null;
  autoReconnects = 0;
  if (client.state === "connecting" || client.state === "open") {
    // The conversation is cleared by the `closed` status this close brings.
    client.disconnect();
    return;
  }
  // Already closed: no status will come.
  clearConversation();
  audio.forgetMicrophone();
  els.statusText.textContent = "Disconnected";
  els.reconnect.hidden = true;
  els.disconnect.disabled = true;
});
els.reconnect.addEventListener("click", () => {
  if (lastConnect) connect(lastConnect);
});

/** @returns {boolean} whether the last session's token was a single-use ticket it has spent */
function ticketSpent() {
  return sessionOpened && !!lastConnect && lastConnect.token.startsWith(TICKET_PREFIX);
}

/** @returns {boolean} whether Reconnect with the same token can work */
function reconnectUsable() {
  return !!lastConnect && !authExpired && !ticketSpent();
}

/**
 * The close in words, with the server's reason when it gave one.
 * @param {{description?: string, reason?: string}} detail
 */
function closedText({ description, reason }) {
  const words = `Disconnected — ${description || "the connection closed"}`;
  return reason ? `${words}: ${reason}` : words;
}

const STATUS_TEXT = { idle: "Not connected", connecting: "Connecting…", open: "Connected" };

client.addEventListener("status", (event) => {
  const { state, byClient } = event.detail;
  els.status.dataset.state = state;
  if (state === "open") sessionOpened = true;
  // Also without a `voxgate.session.closing` first (the close reason is the same words).
  if (state === "closed" && AUTH_EXPIRED.test(event.detail.reason || "")) authExpired = true;
  if (state === "closed") {
    els.statusText.textContent = byClient ? "Disconnected" : closedText(event.detail);
  } else {
    els.statusText.textContent = STATUS_TEXT[state] || state;
  }
  const open = state === "open";
  const busy = state === "connecting" || open;
  els.connect.disabled = busy;
  els.token.disabled = busy;
  els.model.disabled = busy;
  // After a close the user did not ask for, Disconnect forgets the user (the token, Reconnect's).
  els.disconnect.disabled = !(busy || (state === "closed" && !byClient));
  els.mic.disabled = !open;
  els.textInput.disabled = !open;
  els.send.disabled = !open;
  els.reconnect.hidden = !(state === "closed" && !byClient && reconnectUsable());
  if (state === "closed" && !byClient && ticketSpent() && !closingAnnounced) showTicketSpent("The session ended.");
  // After the client's own close: it ends the lines still streaming just before this event.
  if (state === "closed" && byClient) clearConversation();
  if (open) els.textInput.focus();
});

/** @param {string} what the first sentence: what happened */
function showTicketSpent(what) {
  showError({ source: "connection", code: "ticket_spent", message: `${what} Your single-use ticket has been used: get a new ticket, then connect.` });
}

client.addEventListener("session", (event) => {
  const count = event.detail.tools.length;
  els.statusText.textContent = `Connected · ${count} ${count === 1 ? "tool" : "tools"} available`;
});

/** Set when the server announced it is closing, so the close that follows is not reported twice. */
let closingAnnounced = false;

/** Pauses before the automatic reconnects that follow a rolling restart (`voxgate.session.closing`
 * with `reconnect: true`): the load balancer sends the new session to another instance, so the
 * first attempt normally succeeds; the later ones cover a single server coming back. */
const AUTO_RECONNECT_DELAYS_MS = [250, 1000, 2000, 4000, 8000];
/** Automatic reconnects left; 0 when none is wanted. */
let autoReconnects = 0;

client.addEventListener("closing", (event) => {
  closingAnnounced = true;
  const { reason } = event.detail;
  authExpired = AUTH_EXPIRED.test(reason);
  // A spent ticket is refused on every instance: retrying with it only fails again.
  const reconnect = event.detail.reconnect === true && lastConnect !== null && !ticketSpent();
  autoReconnects = reconnect ? AUTO_RECONNECT_DELAYS_MS.length : 0;
  if (ticketSpent()) {
    showTicketSpent(event.detail.reconnect === true ? "The server is restarting." : endedText(reason));
    return;
  }
  const message = reconnect ? "The server is restarting; reconnecting to another one…"
    : authExpired ? `${endedText(reason)} Sign in again to get a new token, then connect.` : endedText(reason);
  showError({ source: "server", code: "closing", message });
});

/** @param {string} reason the server's, from `voxgate.session.closing` (may be empty) */
function endedText(reason) {
  return reason ? `The server ended this session (${reason}).` : "The server ended this session.";
}

client.addEventListener("status", (event) => {
  const { state, byClient } = event.detail;
  if (state === "open" || byClient) autoReconnects = 0;
  if (state !== "closed" || autoReconnects === 0) return;
  const delay = AUTO_RECONNECT_DELAYS_MS[AUTO_RECONNECT_DELAYS_MS.length - autoReconnects];
  autoReconnects -= 1;
  // Jitter, so the sessions of a drained instance do not all reconnect in the same instant.
  setTimeout(() => { if (lastConnect) connect(lastConnect); }, delay + Math.random() * delay);
});

client.addEventListener("resume", (event) => {
  const { state, audio_dropped_ms: droppedMs } = event.detail;
  removeMessages("resuming");
  removeMessages("resumed");
  if (state === "resuming") {
    showError({ source: "connection", code: "resuming", message: "Reconnecting to the model…" });
    return;
  }
  const lost = droppedMs > 0 ? ` ${(droppedMs / 1000).toFixed(1)} s of your speech was lost: please repeat it.` : "";
  showError({ source: "connection", code: "resumed", message: `Reconnected to the model.${lost}` });
});

// ------------------------------------------------------------------ the views

// Mounted after the connection's listeners above: listeners of one event run in the order they were
// added, and the microphone is turned on again (audio-controls.js) only after the `status` listener
// above has enabled its button.
const audio = mountAudioControls(client);
const transcript = mountTranscript(client);
const activity = mountActivity(client);
const sources = mountSources(client);
mountConfirmDialog(client, { onDecided: activity.markDecided });

/** Empty the transcript, the activity list and the sources, in the page and in the maps. */
function clearConversation() {
  transcript.clear();
  activity.clear();
  sources.clear();
}

// ------------------------------------------------------------------ typed requests and errors

els.textForm.addEventListener("submit", (event) => {
  event.preventDefault();
  if (client.sendText(els.textInput.value)) els.textInput.value = "";
});

client.addEventListener("error", (event) => {
  if (event.detail.code === "connection_closed" && closingAnnounced) return;
  // One message for a paused audio output, however often the browser pauses it.
  if (event.detail.code === "audio_suspended") removeMessages("audio_suspended");
  showError(event.detail);
});
