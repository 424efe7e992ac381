/**
 * Small DOM helpers shared by the page's views (app.js and the *-view.js modules): find an element,
 * build one with text (never HTML: every string from the server goes into the DOM as text), keep a
 * list's "nothing yet" note in step with it, and forget an entry of a capped list.
 *
 * @module dom
 */

/**
 * Entries each list (transcript, activity, sources) keeps; older ones leave the page and the maps
 * behind it, so a long session neither slows the page nor keeps more patient details than needed.
 */
export const MAX_LIST_ENTRIES = 200;

/** @param {string} id @returns {any} */
export const $ = (id) => document.getElementById(id);

/**
 * @param {string} tag
 * @param {Record<string, string>} [attrs]
 * @param {string} [text]
 * @returns {HTMLElement}
 */
export function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** @param {HTMLElement} list @param {HTMLElement} empty */
export function syncEmpty(list, empty) {
  empty.hidden = list.children.length > 0;
}

/**
 * Remove a list entry from the page and from its map (whatever its key).
 * @param {Map<string, HTMLElement>} map
 * @param {Element} node
 */
export function forgetEntry(map, node) {
  for (const [key, value] of map) if (value === node) map.delete(key);
  node.remove();
}
