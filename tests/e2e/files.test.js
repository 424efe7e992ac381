/**
 * The documents flow in the page, with the real binary and its built-in simulated model: "find the
 * diabetes protocol" searches the files folder (the sample documents shipped in data/files), "read
 * it" opens the first match and the answer reads its text, then a booking is confirmed in the
 * dialog and lands in the calendar file. Asserts on the page's activity items, the transcript and
 * the audit log, not on the model's exact wording.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { cpSync } from "node:fs";
import path from "node:path";
import { ROOT, activityOf, calendarEvents, connectPage, openPage, screenshot, startVoxgate, typeRequest, waitUntil } from "./support/harness.js";

/**
 * Wait for the newest activity item of `tool` to be in one of `states`.
 * @param {import("playwright-core").Page} page
 * @param {string} tool
 * @param {string[]} states
 */
async function reaches(page, tool, states) {
  await page.waitForFunction(([name, wanted]) => {
    const items = document.querySelectorAll(`[data-testid=activity-item][data-tool="${name}"]`);
    const item = items[items.length - 1];
    return item && wanted.includes(item.dataset.state);
  }, [tool, states], { timeout: 20_000 });
  return activityOf(page, tool);
}

/**
 * The text of the newest final assistant transcript entry once there are more than `before`.
 * @param {import("playwright-core").Page} page
 * @param {number} before
 */
async function nextAnswer(page, before) {
  const answers = page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]");
  await waitUntil(async () => (await answers.count()) > before, { timeout: 20_000, message: "an answer" });
  return (await answers.last().textContent()).trim();
}

test("simulated model: find a document, read it, book a follow-up", { timeout: 120_000 }, async (t) => {
  const voxgate = await startVoxgate();
  t.after(() => voxgate.stop());
  // The harness gives each voxgate an empty files folder; fill it with the shipped samples.
  cpSync(path.join(ROOT, "data", "files"), path.join(voxgate.dir, "files"), { recursive: true });
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  await page.waitForFunction(() => /tools? available/.test(document.querySelector("[data-testid=connection-status]").textContent));
  const answers = () => page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").count();

  let before = await answers();
  await typeRequest(page, "Find the diabetes protocol");
  const searched = await reaches(page, "search_nextcloud_files", ["done", "failed"]);
  assert.equal(searched.state, "done", JSON.stringify(searched));
  assert.equal(searched.label, "Searching your files");
  const found = await nextAnswer(page, before);
  assert.match(found, /diabetes-management-protocol/, `the answer names the file: ${found}`);
  await screenshot(page, "files-found");

  before = await answers();
  await typeRequest(page, "Read it");
  const opened = await reaches(page, "retrieve_nextcloud_file", ["done", "failed"]);
  assert.equal(opened.state, "done", JSON.stringify(opened));
  const read = await nextAnswer(page, before);
  assert.match(read, /Diabetes Management Protocol/i, `the answer reads the document: ${read}`);
  await screenshot(page, "files-read");

  await typeRequest(page, "Book a meeting called Diabetes protocol review at 2pm tomorrow");
  const dialog = page.getByRole("dialog", { name: /Create a calendar event/ });
  await dialog.waitFor({ state: "visible", timeout: 20_000 });
  await dialog.getByRole("button", { name: "Approve", exact: true }).click();
  const booked = await reaches(page, "create_calendar_event", ["done", "failed", "declined"]);
  assert.equal(booked.state, "done", JSON.stringify(booked));
  const events = await waitUntil(() => {
    const all = calendarEvents(voxgate.calendar());
    return all.length > 0 && all;
  }, { message: "the event in the calendar file" });
  assert.equal(events[0].summary, "Diabetes protocol review");
  await screenshot(page, "files-booked");

  // Every call audited; the file tools' arguments (PHI) are not in the log.
  const finished = voxgate.audit().filter((r) => r.event === "call_finished");
  assert.deepEqual(finished.map((r) => [r.tool, r.status]), [
    ["search_nextcloud_files", "completed"],
    ["retrieve_nextcloud_file", "completed"],
    ["create_calendar_event", "completed"],
  ]);
  for (const record of finished.filter((r) => r.tool !== "create_calendar_event")) {
    assert.equal(record.arguments, undefined, "no arguments for a PHI tool");
    assert.equal(record.phi, true);
  }
  assert.deepEqual(browser.problems, []);
});
