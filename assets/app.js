/**
 * The voxgate page: wires the DOM of index.html to a {@link VoxgateClient}.
 * No framework; every string from the server goes into the DOM as text, never as HTML.
 *
 * For diagnostics and tests the client is reachable as `window.voxgate`.
 *
 * @module app
 */

import { VoxgateClient } from "./voxgate-client.js";
import {
  DECLINE_REASONS, FAILURE_REASONS, STATE_LABELS, argumentRows, formatCountdown, toolActionLabel,
  toolActivityLabel,
} from "./labels.js";

/** Errors shown at once; older ones are dropped. */
const MAX_ERRORS = 5;
/**
 * Entries each list (transcript, activity, sources) keeps; older ones leave the page and the maps
 * behind it, so a long session neither slows the page nor keeps more patient details than needed.
 */
const MAX_LIST_ENTRIES = 200;
/** Single-use session tickets (`POST /v1/sessions`) start with this; a spent one never works again. */
const TICKET_PREFIX = "vgt.";
/** voxgate's reason when the JWT that admitted the session expires: the same token cannot reconnect. */
const AUTH_EXPIRED = /authori[sz]ation expired/i;
/** Seconds before expiry at which the dialog announces the time left. */
const WARN_AT_S = 10;
/**
 * Milliseconds Approve (and its Enter shortcut) stays disabled after a request is shown: a key
 * press, a double click or a click meant for the request before cannot approve this one.
 */
const ARM_DELAY_MS = 700;

/** @param {string} id @returns {any} */
const $ = (id) => document.getElementById(id);

const els = {
  status: $("connection-status"),
  statusText: document.querySelector("[data-testid=connection-status-text]"),
  connectForm: $("connect-form"),
  token: $("token-input"),
  model: $("model-input"),
  echo: $("echo-cancellation"),
  noise: $("noise-suppression"),
  gain: $("auto-gain"),
  connect: $("connect-button"),
  disconnect: $("disconnect-button"),
  reconnect: $("reconnect-button"),
  mic: $("mic-button"),
  micText: document.querySelector("[data-testid=mic-button-text]"),
  meter: $("mic-level"),
  meterFill: $("mic-level-fill"),
  playback: $("playback-indicator"),
  playbackText: $("playback-text"),
  transcript: $("transcript"),
  transcriptEmpty: $("transcript-empty"),
  textForm: $("text-form"),
  textInput: $("text-input"),
  send: $("send-button"),
  activity: $("activity-list"),
  activityEmpty: $("activity-empty"),
  citations: $("citations"),
  citationsEmpty: $("citations-empty"),
  errors: $("errors"),
  dialog: $("confirm-dialog"),
  dialogTitle: $("confirm-title"),
  dialogPrompt: $("confirm-prompt"),
  dialogArgs: $("confirm-args"),
  dialogRaw: $("confirm-raw"),
  countdown: $("confirm-countdown"),
  countdownFill: $("confirm-countdown-fill"),
  announce: $("confirm-announce"),
  queue: $("confirm-queue"),
  approve: $("confirm-approve"),
  decline: $("confirm-decline"),
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

// ------------------------------------------------------------------ small DOM helpers

/**
 * @param {string} tag
 * @param {Record<string, string>} [attrs]
 * @param {string} [text]
 * @returns {HTMLElement}
 */
function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** @param {HTMLElement} list @param {HTMLElement} empty */
function syncEmpty(list, empty) {
  empty.hidden = list.children.length > 0;
}

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
  // patient details leave the screen. (Automatic reconnects and Reconnect keep them.)
  clearConversation();
  micWanted = false;
  connect({ token: els.token.value.trim(), model: els.model.value.trim() });
});
els.disconnect.addEventListener("click", () => client.disconnect());
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
  els.disconnect.disabled = !busy;
  els.mic.disabled = !open;
  els.textInput.disabled = !open;
  els.send.disabled = !open;
  els.reconnect.hidden = !(state === "closed" && !byClient && reconnectUsable());
  if (state === "closed" && !byClient && ticketSpent() && !closingAnnounced) showTicketSpent("The session ended.");
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

// ------------------------------------------------------------------ assistant audio

/** Set while a click anywhere is waiting to resume the assistant's audio. */
let resumeOnClick = false;

client.addEventListener("audio", (event) => {
  if (event.detail.state === "running") {
    removeMessages("audio_suspended");
    return;
  }
  if (resumeOnClick) return;
  resumeOnClick = true;
  // Browsers resume audio only from a user gesture: the next click or key press does it.
  const resume = () => {
    document.removeEventListener("pointerdown", resume, true);
    document.removeEventListener("keydown", resume, true);
    resumeOnClick = false;
    client.resumeAudio().catch(() => {
      showError({ source: "audio", code: "audio_resume_failed", message: "the assistant's audio could not be resumed" });
    });
  };
  document.addEventListener("pointerdown", resume, true);
  document.addEventListener("keydown", resume, true);
});

// ------------------------------------------------------------------ microphone

/** Whether the user has the microphone on: it is turned on again after an automatic reconnect. */
let micWanted = false;

els.mic.addEventListener("click", () => {
  if (client.microphoneActive) {
    micWanted = false;
    client.stopMicrophone();
    return;
  }
  startMicrophone();
});

async function startMicrophone() {
  els.mic.disabled = true;
  try {
    await client.startMicrophone({
      echoCancellation: els.echo.checked,
      noiseSuppression: els.noise.checked,
      autoGainControl: els.gain.checked,
    });
    micWanted = true;
  } catch {
    // Reported through the `error` event.
    micWanted = false;
  } finally {
    els.mic.disabled = !client.connected;
  }
}

client.addEventListener("status", (event) => {
  const { state, byClient } = event.detail;
  if (state === "closed" && byClient) micWanted = false;
  if (state === "open" && micWanted && !client.microphoneActive) startMicrophone();
});

client.addEventListener("error", (event) => {
  // The device went away: it is not turned on again by itself.
  if (event.detail.code === "microphone_ended") micWanted = false;
});

client.addEventListener("microphone", (event) => {
  const active = event.detail.active;
  els.mic.setAttribute("aria-pressed", String(active));
  els.mic.dataset.active = String(active);
  els.micText.textContent = active ? "Stop microphone" : "Start microphone";
});

let pendingLevel = 0;
let levelFrame = 0;
client.addEventListener("level", (event) => {
  pendingLevel = event.detail.level;
  if (!levelFrame) levelFrame = requestAnimationFrame(drawLevel);
});

function drawLevel() {
  levelFrame = 0;
  const percent = Math.round(pendingLevel * 100);
  els.meterFill.style.width = `${percent}%`;
  els.meter.setAttribute("aria-valuenow", String(percent));
  els.meter.dataset.level = String(pendingLevel.toFixed(3));
  if (percent > 0) els.meter.dataset.peak = String(Math.max(Number(els.meter.dataset.peak || 0), percent));
}

client.addEventListener("playback", (event) => {
  const { state } = event.detail;
  els.playback.dataset.state = state === "started" ? "speaking" : state;
  els.playbackText.textContent = state === "started" ? "Assistant is speaking"
    : state === "interrupted" ? "Assistant stopped — you interrupted" : "Assistant is quiet";
});

// ------------------------------------------------------------------ transcript

/** @type {Map<string, HTMLElement>} */
const transcriptEntries = new Map();

client.addEventListener("transcript", (event) => {
  const { role, item_id: itemId, text, final, typed } = event.detail;
  const key = `${role}:${itemId}`;
  let entry = transcriptEntries.get(key);
  if (!entry) {
    entry = el("li", { class: `turn turn-${role}`, "data-testid": "transcript-entry", "data-role": role });
    entry.append(el("span", { class: "speaker" }, role === "user" ? (typed ? "You (typed)" : "You") : "Assistant"));
    entry.append(el("span", { class: "words", "data-testid": "transcript-text" }));
    els.transcript.append(entry);
    transcriptEntries.set(key, entry);
    trimTranscript();
  }
  entry.querySelector(".words").textContent = event.detail.failed ? "(not transcribed)" : text;
  entry.dataset.final = String(!!final);
  entry.setAttribute("aria-busy", String(!final));
  if (event.detail.interrupted) entry.dataset.interrupted = "true";
  if (final) transcriptEntries.delete(key);
  els.transcriptEmpty.hidden = true;
  els.transcript.scrollTop = els.transcript.scrollHeight;
});

/** Drop the oldest transcript entries past MAX_LIST_ENTRIES, and their map entries. */
function trimTranscript() {
  const entries = els.transcript.querySelectorAll("[data-testid=transcript-entry]");
  for (let i = 0; i < entries.length - MAX_LIST_ENTRIES; i += 1) forgetEntry(transcriptEntries, entries[i]);
}

/**
 * Remove a list entry from the page and from its map (whatever its key).
 * @param {Map<string, HTMLElement>} map
 * @param {Element} node
 */
function forgetEntry(map, node) {
  for (const [key, value] of map) if (value === node) map.delete(key);
  node.remove();
}

/** Empty the transcript, the activity list and the sources, in the page and in the maps. */
function clearConversation() {
  for (const entry of els.transcript.querySelectorAll("[data-testid=transcript-entry]")) entry.remove();
  transcriptEntries.clear();
  els.transcriptEmpty.hidden = false;
  els.activity.replaceChildren();
  activityItems.clear();
  syncEmpty(els.activity, els.activityEmpty);
  els.citations.replaceChildren();
  syncEmpty(els.citations, els.citationsEmpty);
}

els.textForm.addEventListener("submit", (event) => {
  event.preventDefault();
  if (client.sendText(els.textInput.value)) els.textInput.value = "";
});

// ------------------------------------------------------------------ tool activity

/** @type {Map<string, HTMLElement>} */
const activityItems = new Map();

/**
 * @param {string} callId
 * @param {string} name
 * @returns {HTMLElement}
 */
function activityItem(callId, name) {
  let item = activityItems.get(callId);
  if (!item) {
    item = el("li", { class: "activity-item", "data-testid": "activity-item", "data-call-id": callId, "data-tool": name });
    item.append(el("span", { class: "activity-icon", "aria-hidden": "true" }));
    item.append(el("span", { class: "activity-label", "data-testid": "activity-label" }, toolActivityLabel(name)));
    // Read aloud as "Creating a calendar event: done", not as one run-on word.
    item.append(el("span", { class: "visually-hidden" }, ": "));
    item.append(el("span", { class: "activity-state", "data-testid": "activity-state" }));
    els.activity.prepend(item);
    activityItems.set(callId, item);
    while (els.activity.children.length > MAX_LIST_ENTRIES) forgetEntry(activityItems, els.activity.lastElementChild);
    syncEmpty(els.activity, els.activityEmpty);
  }
  return item;
}

/**
 * @param {HTMLElement} item
 * @param {string} state one of STATE_LABELS' keys
 * @param {string} [detail] reason words
 */
function setActivityState(item, state, detail) {
  item.dataset.state = state;
  const words = STATE_LABELS[state] || state;
  item.querySelector(".activity-state").textContent = detail ? `${words} — ${detail}` : words;
  if (detail) item.dataset.reason = detail;
}

client.addEventListener("tool", (event) => {
  const detail = event.detail;
  const item = activityItem(detail.call_id, detail.name);
  switch (detail.phase) {
    case "confirmation_requested":
      setActivityState(item, "awaiting_confirmation");
      break;
    case "started":
      setActivityState(item, "running");
      break;
    case "progress":
      // Advisory, and only while the call runs: a late one never reopens a finished row.
      if (item.dataset.state === "running") item.querySelector(".activity-state").textContent = `${STATE_LABELS.running} — ${progressText(detail)}`;
      break;
    case "interrupted":
      setActivityState(item, "interrupted");
      break;
    case "completed":
      setActivityState(item, "done");
      if (typeof detail.duration_ms === "number") item.title = `took ${detail.duration_ms} ms`;
      break;
    case "failed": {
      const code = detail.error && detail.error.code;
      item.dataset.code = code || "";
      setActivityState(item, "failed", FAILURE_REASONS[code] || (detail.error && detail.error.message) || "");
      break;
    }
    case "declined":
      item.dataset.code = detail.reason || "";
      setActivityState(item, "declined", DECLINE_REASONS[detail.reason] || detail.reason || "");
      break;
    default:
      break;
  }
  if (detail.phase !== "confirmation_requested") dropConfirmation(detail.call_id);
});

/**
 * MCP progress as "2/5 — step 2 of 5" (`total` and `message` may be null).
 * @param {{progress?: number, total?: number|null, message?: string|null}} detail
 * @returns {string}
 */
function progressText({ progress, total, message }) {
  const count = typeof total === "number" ? `${progress}/${total}` : String(progress ?? "");
  return [count, typeof message === "string" ? message.slice(0, 200) : ""].filter(Boolean).join(" — ");
}

// ------------------------------------------------------------------ citations

/** @param {unknown} url @returns {string|null} an http(s) URL, or null */
function safeUrl(url) {
  try {
    const parsed = new URL(String(url));
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : null;
  } catch {
    return null;
  }
}

client.addEventListener("citations", (event) => {
  for (const citation of event.detail.citations) {
    const href = safeUrl(citation.url);
    const li = el("li", { class: "citation", "data-testid": "citation", "data-call-id": event.detail.call_id });
    const title = citation.title || citation.url || "Source";
    if (href) {
      li.append(el("a", { href, target: "_blank", rel: "noopener noreferrer", "data-testid": "citation-link" }, title));
    } else {
      li.append(el("span", { class: "citation-title" }, title));
    }
    const meta = [citation.source, citation.date, citation.pmid && `PMID ${citation.pmid}`, citation.evidence_level && `evidence: ${citation.evidence_level}`]
      .filter(Boolean).join(" · ");
    if (meta) li.append(el("span", { class: "citation-meta" }, meta));
    els.citations.append(li);
  }
  while (els.citations.children.length > MAX_LIST_ENTRIES) els.citations.firstElementChild.remove();
  syncEmpty(els.citations, els.citationsEmpty);
});

// ------------------------------------------------------------------ errors

/** @param {{source: string, code: string, message: string}} detail */
function showError(detail) {
  const box = el("div", { class: "error-message", "data-testid": "error-message", "data-code": detail.code || "" });
  const text = detail.message ? detail.message.charAt(0).toUpperCase() + detail.message.slice(1) : "Something went wrong";
  box.append(el("span", { class: "error-text" }, text));
  if (detail.code && detail.source === "server") box.append(el("span", { class: "error-code" }, ` (${detail.code})`));
  const dismiss = el("button", { type: "button", class: "dismiss", "aria-label": "Dismiss this message", "data-testid": "error-dismiss" }, "×");
  dismiss.addEventListener("click", () => box.remove());
  box.append(dismiss);
  els.errors.append(box);
  while (els.errors.children.length > MAX_ERRORS) els.errors.firstElementChild.remove();
}

client.addEventListener("error", (event) => {
  if (event.detail.code === "connection_closed" && closingAnnounced) return;
  // One message for a paused audio output, however often the browser pauses it.
  if (event.detail.code === "audio_suspended") removeMessages("audio_suspended");
  showError(event.detail);
});

/** @param {string} code remove the messages shown with this code */
function removeMessages(code) {
  for (const box of els.errors.querySelectorAll(`[data-code="${code}"]`)) box.remove();
}

// ------------------------------------------------------------------ confirmation dialog

/** @type {Array<{call_id: string, name: string, arguments: object, prompt: string, expires_at_ms: number, receivedAt: number, skewed: boolean}>} */
const confirmations = [];
/** The request shown in the dialog, if any. */
let current = null;
let countdownTimer = 0;
let armTimer = 0;
/** Counts the requests shown, so that a press can be matched to the very showing it began on. */
let shownCount = 0;
/** What the last pointer press on a dialog button began on, until its click: `{callId, shown, enabled}`. */
let pressedOn = null;
let warned = false;
let returnFocusTo = null;

client.addEventListener("confirmation", (event) => {
  // A deadline already past on arrival means the clocks disagree: show no countdown then, and let
  // the server's own expiry decide.
  const skewed = !(event.detail.expires_at_ms > Date.now() + 500);
  const request = { ...event.detail, receivedAt: Date.now(), skewed };
  // Keyed by call id: the dialog always shows the prompt of the very call a decision goes to. A
  // second request for a call already queued or shown replaces it rather than queueing a twin.
  if (current && current.call_id === request.call_id) {
    confirmations.unshift(request);
    showNextConfirmation();
    return;
  }
  const queued = confirmations.findIndex((c) => c.call_id === request.call_id);
  if (queued >= 0) confirmations[queued] = request;
  else confirmations.push(request);
  if (!current) showNextConfirmation();
  else updateQueueNote();
});

function showNextConfirmation() {
  current = confirmations.shift() || null;
  if (!current) {
    closeDialog();
    return;
  }
  warned = false;
  shownCount += 1;
  els.dialog.dataset.callId = current.call_id;
  els.dialog.dataset.tool = current.name;
  els.dialog.dataset.expired = "false";
  els.dialogTitle.textContent = `Confirm: ${toolActionLabel(current.name)}`;
  els.dialogPrompt.textContent = current.prompt || `The assistant wants to ${toolActionLabel(current.name).toLowerCase()}.`;
  renderArguments(current.arguments);
  els.dialogRaw.textContent = JSON.stringify(current.arguments, null, 2);
  // Approve waits ARM_DELAY_MS: input that began before this request was shown cannot approve it.
  // Decline is never delayed.
  els.approve.disabled = true;
  els.dialog.dataset.armed = "false";
  clearTimeout(armTimer);
  armTimer = setTimeout(armApprove, ARM_DELAY_MS, current);
  els.decline.disabled = false;
  els.announce.textContent = "";
  updateQueueNote();
  tickCountdown();
  clearInterval(countdownTimer);
  countdownTimer = setInterval(tickCountdown, 250);
  if (!els.dialog.open) {
    returnFocusTo = document.activeElement;
    els.dialog.showModal();
  }
  // Focus goes to the dialog itself (a screen reader reads its title and prompt), never to a
  // button: the next Enter or Space the user meant for something else must not decide.
  els.dialog.focus();
}

/** @param {object} request the request shown when the delay began */
function armApprove(request) {
  if (current !== request) return;
  els.approve.disabled = false;
  els.dialog.dataset.armed = "true";
}

/** @param {object} args */
function renderArguments(args) {
  els.dialogArgs.replaceChildren();
  for (const row of argumentRows(/** @type {Record<string, unknown>} */ (args))) {
    const wrap = el("div", { class: `arg depth-${Math.min(row.depth, 3)}`, "data-testid": "confirm-arg", "data-key": row.key });
    wrap.append(el("dt", { "data-testid": "confirm-arg-label" }, row.label));
    const dd = el("dd", { "data-testid": "confirm-arg-value" }, row.value);
    if (typeof row.raw === "string" && row.value !== row.raw) dd.title = row.raw;
    wrap.append(dd);
    els.dialogArgs.append(wrap);
  }
}

function updateQueueNote() {
  const waiting = confirmations.length;
  els.queue.hidden = waiting === 0;
  els.queue.textContent = waiting === 1 ? "1 more request is waiting." : `${waiting} more requests are waiting.`;
}

function tickCountdown() {
  if (!current) return;
  if (current.skewed) {
    els.countdown.textContent = "Expires soon";
    els.countdownFill.style.width = "100%";
    return;
  }
  const total = Math.max(1, current.expires_at_ms - current.receivedAt);
  const left = current.expires_at_ms - Date.now();
  els.countdownFill.style.width = `${Math.max(0, Math.min(100, (left / total) * 100))}%`;
  if (left <= 0) {
    // This device's clock says time is up, but it may run fast: the server's expiry decides (it
    // refuses a late approval and sends `declined`/`expired`, which closes the dialog), so Approve
    // stays as it is.
    els.countdown.textContent = "Time is up — the server may refuse a late approval.";
    els.dialog.dataset.expired = "true";
    clearInterval(countdownTimer);
    return;
  }
  els.countdown.textContent = `Expires in ${formatCountdown(left)}`;
  els.countdown.dataset.secondsLeft = String(Math.ceil(left / 1000));
  if (!warned && left <= WARN_AT_S * 1000) {
    warned = true;
    els.announce.textContent = `${Math.ceil(left / 1000)} seconds left to approve or decline.`;
  }
}

/** @param {boolean} approved */
function decide(approved) {
  if (!current) return;
  const callId = current.call_id;
  client.confirm(callId, approved);
  const item = activityItems.get(callId);
  if (item) setActivityState(item, approved ? "approved" : "declining");
  showNextConfirmation();
}

/** A call ended or started without (or after) the dialog: take it out of the queue and the dialog. */
function dropConfirmation(callId) {
  const index = confirmations.findIndex((c) => c.call_id === callId);
  if (index >= 0) confirmations.splice(index, 1);
  if (current && current.call_id === callId) showNextConfirmation();
  else updateQueueNote();
}

function closeDialog() {
  clearInterval(countdownTimer);
  clearTimeout(armTimer);
  current = null;
  delete els.dialog.dataset.callId;
  if (els.dialog.open) els.dialog.close();
  if (returnFocusTo && typeof returnFocusTo.focus === "function" && document.contains(returnFocusTo)) returnFocusTo.focus();
  returnFocusTo = null;
}

/**
 * Note which showing of which request a pointer press on a dialog button began on.
 * @param {PointerEvent} event
 */
function notePress(event) {
  const button = /** @type {HTMLButtonElement} */ (event.currentTarget);
  pressedOn = { callId: current ? current.call_id : null, shown: shownCount, enabled: !button.disabled };
}

/**
 * Whether a click on a dialog button is for the request shown now. A pointer click counts only if
 * its press began on this very showing, on an enabled button: a click aimed at a request that
 * expired, was declined by the server or was decided meanwhile does not land on the next one. A
 * click without a pointer press (`detail` 0: Enter or Space on the focused button; or assistive
 * technology) acts on the button as it is now.
 * @param {MouseEvent} event
 */
function clickIsForCurrent(event) {
  const press = pressedOn;
  pressedOn = null;
  if (!current) return false;
  if (event.detail === 0 || !press) return true;
  return press.enabled && press.callId === current.call_id && press.shown === shownCount;
}

els.approve.addEventListener("pointerdown", notePress);
els.decline.addEventListener("pointerdown", notePress);
els.approve.addEventListener("click", (event) => {
  if (clickIsForCurrent(event) && !els.approve.disabled) decide(true);
});
els.decline.addEventListener("click", (event) => {
  if (clickIsForCurrent(event)) decide(false);
});
// Escape on a modal dialog fires `cancel`: that is a Decline, never a silent close.
els.dialog.addEventListener("cancel", (event) => {
  event.preventDefault();
  if (current) decide(false);
});
els.dialog.addEventListener("keydown", (event) => {
  if (event.key !== "Enter" || !current) return;
  // A held key's auto-repeat never decides: not on the dialog, not on a focused button.
  if (event.repeat) {
    event.preventDefault();
    return;
  }
  if (els.approve.disabled) return;
  const target = /** @type {HTMLElement} */ (event.target);
  if (target.closest("button, summary, a")) return; // those act on Enter themselves
  event.preventDefault();
  decide(true);
});
els.dialog.addEventListener("close", () => {
  // Closed by the browser (not by us) while a decision is pending: treat as Decline. Chromium closes
  // a modal dialog on Escape without a `cancel` event when there was no user activation since it
  // opened. `close` fires asynchronously: if the dialog is open again, it shows a newer request.
  if (current && !els.dialog.open) decide(false);
});
