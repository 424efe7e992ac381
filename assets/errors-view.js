/**
 * The page's messages (the `role="alert"` region, `#errors`): errors and notices in words, each
 * dismissable, the newest few kept. A server error's code is shown small after its words; a
 * message can be taken back by its code (a notice that no longer holds, such as "Reconnecting to
 * the model…").
 *
 * @module errors-view
 */

import { $, el } from "./dom.js";

/** Errors shown at once; older ones are dropped. */
const MAX_ERRORS = 5;

const errors = $("errors");

/** @param {{source: string, code: string, message: string}} detail */
export function showError(detail) {
  const box = el("div", { class: "error-message", "data-testid": "error-message", "data-code": detail.code || "" });
  const text = detail.message ? detail.message.charAt(0).toUpperCase() + detail.message.slice(1) : "Something went wrong";
  box.append(el("span", { class: "error-text" }, text));
  if (detail.code && detail.source === "server") box.append(el("span", { class: "error-code" }, ` (${detail.code})`));
  const dismiss = el("button", { type: "button", class: "dismiss", "aria-label": "Dismiss this message", "data-testid": "error-dismiss" }, "×");
  dismiss.addEventListener("click", () => box.remove());
  box.append(dismiss);
  errors.append(box);
  while (errors.children.length > MAX_ERRORS) errors.firstElementChild.remove();
}

/** @param {string} code remove the messages shown with this code */
export function removeMessages(code) {
  for (const box of errors.querySelectorAll(`[data-code="${code}"]`)) box.remove();
}
