/**
 * The sources (`#citations`): the citations a tool call returned, as links that open in a new tab
 * (`rel="noopener noreferrer"`; only http(s) URLs become links, any other is shown as text) with
 * their source, date, PMID and evidence level. The newest MAX_LIST_ENTRIES are kept.
 *
 * @module sources-view
 */

import { $, MAX_LIST_ENTRIES, el, syncEmpty } from "./dom.js";

const els = {
  citations: $("citations"),
  citationsEmpty: $("citations-empty"),
};

/**
 * Show the client's `citations` events.
 * @param {import("./voxgate-client.js").VoxgateClient} client
 * @returns {{clear: () => void}} `clear()` empties the sources
 */
export function mountSources(client) {
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
  return { clear: clearSources };
}

/** @param {unknown} url @returns {string|null} an http(s) URL, or null */
function safeUrl(url) {
  try {
    const parsed = new URL(String(url));
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : null;
  } catch {
    return null;
  }
}

function clearSources() {
  els.citations.replaceChildren();
  syncEmpty(els.citations, els.citationsEmpty);
}
