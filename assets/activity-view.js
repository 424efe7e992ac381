/**
 * The assistant's activity (`#activity-list`, a polite live region): one row per tool call, newest
 * first, with the tool's name in words ("Creating a calendar event") and its state — waiting for
 * your confirmation, running (with an MCP tool's progress), approved — starting…, declining…,
 * done, interrupted, failed or declined with the reason in words (labels.js). The newest
 * MAX_LIST_ENTRIES rows are kept.
 *
 * @module activity-view
 */

import { $, MAX_LIST_ENTRIES, el, forgetEntry, syncEmpty } from "./dom.js";
import { DECLINE_REASONS, FAILURE_REASONS, STATE_LABELS, toolActivityLabel } from "./labels.js";

const els = {
  activity: $("activity-list"),
  activityEmpty: $("activity-empty"),
};

/** Rows by call id. @type {Map<string, HTMLElement>} */
const activityItems = new Map();

/**
 * Show the client's `tool` events.
 * @param {import("./voxgate-client.js").VoxgateClient} client
 * @returns {{clear: () => void, markDecided: (callId: string, approved: boolean) => void}}
 *   `clear()` empties the list, in the page and in the map; `markDecided()` shows the user's
 *   decision on a call at once (before the server's event for it)
 */
export function mountActivity(client) {
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
  });
  return { clear: clearActivity, markDecided };
}

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

/** @param {string} callId @param {boolean} approved */
function markDecided(callId, approved) {
  const item = activityItems.get(callId);
  if (item) setActivityState(item, approved ? "approved" : "declining");
}

/**
 * MCP progress as "2/5 — step 2 of 5" (`total` and `message` may be null).
 * @param {{progress?: number, total?: number|null, message?: string|null}} detail
 * @returns {string}
 */
function progressText({ progress, total, message }) {
  const count = typeof total === "number" ? `${progress}/${total}` : String(progress ?? "");
  return [count, typeof message === "string" ? message.slice(0, 200) : ""].filter(Boolean).join(" — ");
}

function clearActivity() {
  els.activity.replaceChildren();
  activityItems.clear();
  syncEmpty(els.activity, els.activityEmpty);
}
