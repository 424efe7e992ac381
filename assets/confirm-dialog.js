/**
 * The confirmation dialog (`#confirm-dialog`, a native modal `<dialog>`): a tool call that needs
 * the user's approval (the client's `confirmation` event) is shown with the server's prompt, its
 * arguments as label/value rows (labels.js), the exact request as JSON and a countdown to its
 * expiry; Approve or Decline answers it with `client.confirm()`. Requests queue, one per call id;
 * a call that starts or ends meanwhile (its `tool` event) leaves the queue and the dialog.
 *
 * Guards against deciding by accident: focus goes to the dialog, never to a button; Approve (and
 * Enter) waits ARM_DELAY_MS after each request is shown; a held key's auto-repeat never decides;
 * a pointer click counts only if it was pressed on the request still shown. Escape, or the browser
 * closing the dialog, is a Decline, never a silent close. This device's clock does not disable
 * Approve at expiry: the server's expiry decides.
 *
 * @module confirm-dialog
 */

import { $, el } from "./dom.js";
import { argumentRows, formatCountdown, toolActionLabel } from "./labels.js";

/** Seconds before expiry at which the dialog announces the time left. */
const WARN_AT_S = 10;
/**
 * Milliseconds Approve (and its Enter shortcut) stays disabled after a request is shown: a key
 * press, a double click or a click meant for the request before cannot approve this one.
 */
const ARM_DELAY_MS = 700;

const els = {
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

/** The client the decisions go to (set by {@link mountConfirmDialog}). */
let client = null;
/** Told of each decision sent: `(callId, approved)`. */
let onDecided = (_callId, _approved) => {};

/** @type {Array<{call_id: string, name: string, arguments: object, prompt: string, expires_at_ms: number, expires_in_ms?: number, skewed: boolean, deadline: number | null, total: number}>} */
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

/**
 * Ask the user about the client's `confirmation` requests, and answer them.
 * @param {import("./voxgate-client.js").VoxgateClient} voxgateClient
 * @param {{onDecided?: (callId: string, approved: boolean) => void}} [options] `onDecided` is told
 *   of each decision as it is sent
 */
export function mountConfirmDialog(voxgateClient, options = {}) {
  client = voxgateClient;
  if (options.onDecided) onDecided = options.onDecided;
  client.addEventListener("confirmation", (event) => {
    // The time the request had left when the server sent it, counted from its arrival on this
    // page's monotonic clock: right whatever this device's wall clock says. A server that sends only
    // `expires_at_ms` is read by the wall clock; a deadline already past on arrival then means the
    // clocks disagree: show no countdown, and let the server's own expiry decide.
    const inMs = event.detail.expires_in_ms;
    const relative = Number.isFinite(inMs) && inMs > 0;
    const skewed = !relative && !(event.detail.expires_at_ms > Date.now() + 500);
    const request = {
      ...event.detail,
      skewed,
      deadline: relative ? performance.now() + inMs : null,
      total: relative ? inMs : Math.max(1, event.detail.expires_at_ms - Date.now()),
    };
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
  client.addEventListener("tool", (event) => {
    if (event.detail.phase !== "confirmation_requested") dropConfirmation(event.detail.call_id);
  });

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
}

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
  const total = current.total;
  const left = current.deadline !== null ? current.deadline - performance.now() : current.expires_at_ms - Date.now();
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
  onDecided(callId, approved);
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
