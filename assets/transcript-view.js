/**
 * The conversation transcript (`#transcript`, a `role="log"` list): one entry per turn, user or
 * assistant, filled in as its words stream (`aria-busy` until final, so screen readers read whole
 * sentences). A typed request is marked "You (typed)", speech that could not be transcribed
 * "(not transcribed)". The newest MAX_LIST_ENTRIES entries are kept.
 *
 * @module transcript-view
 */

import { $, MAX_LIST_ENTRIES, el, forgetEntry } from "./dom.js";

const els = {
  transcript: $("transcript"),
  transcriptEmpty: $("transcript-empty"),
};

/** Entries still streaming, by `role:item_id`. @type {Map<string, HTMLElement>} */
const transcriptEntries = new Map();

/**
 * Show the client's `transcript` events.
 * @param {import("./voxgate-client.js").VoxgateClient} client
 * @returns {{clear: () => void}} `clear()` empties the transcript, in the page and in the map
 */
export function mountTranscript(client) {
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
  return { clear: clearTranscript };
}

/** Drop the oldest transcript entries past MAX_LIST_ENTRIES, and their map entries. */
function trimTranscript() {
  const entries = els.transcript.querySelectorAll("[data-testid=transcript-entry]");
  for (let i = 0; i < entries.length - MAX_LIST_ENTRIES; i += 1) forgetEntry(transcriptEntries, entries[i]);
}

function clearTranscript() {
  for (const entry of els.transcript.querySelectorAll("[data-testid=transcript-entry]")) entry.remove();
  transcriptEntries.clear();
  els.transcriptEmpty.hidden = false;
}
