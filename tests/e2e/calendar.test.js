/**
 * In-band confirmation in the page, against voxgate's built-in simulated model (no API key, the
 * out-of-the-box set-up): a typed request makes the model call `create_calendar_event`; the dialog
 * shows the prompt, the arguments as readable rows and a countdown; Approve → the event is in the
 * calendar file and the page shows done; Decline → declined, no event; no answer → expired.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { activityOf, connectPage, openPage, screenshot, startVoxgate, typeRequest, waitUntil } from "./support/harness.js";

/** A request the simulated model answers with `create_calendar_event`. */
const BOOKING = "Book a meeting with Dr. Smith at 2pm tomorrow";

/**
 * The calendar's events as {summary} (lines unfolded, text unescaped).
 * @param {string} ics
 */
function calendarEvents(ics) {
  const unfolded = ics.replace(/\r?\n[ \t]/g, "");
  const events = [];
  for (const block of unfolded.split("BEGIN:VEVENT").slice(1)) {
    const summary = (block.match(/^SUMMARY[^:\n]*:(.*)$/m) || [])[1] || "";
    events.push({ summary: summary.trim().replace(/\\([,;\\])/g, "$1").replace(/\\n/gi, "\n") });
  }
  return events;
}

/**
 * Start voxgate and a page, connect, type the booking request and wait for the dialog.
 * @param {import("node:test").TestContext} t
 * @param {{confirmationTimeoutMs?: number}} [options]
 */
async function bookingDialog(t, options = {}) {
  const voxgate = await startVoxgate(options);
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  await typeRequest(page, BOOKING);
  const dialog = page.getByRole("dialog", { name: /Create a calendar event/ });
  await dialog.waitFor({ state: "visible", timeout: 15_000 });
  return { voxgate, browser, page, dialog };
}

/**
 * What the dialog shows, read from the DOM.
 * @param {import("playwright-core").Page} page
 */
function readDialog(page) {
  return page.evaluate(() => {
    const dialog = document.querySelector("[data-testid=confirm-dialog]");
    const rows = [...dialog.querySelectorAll("[data-testid=confirm-arg]")].map((row) => ({
      key: row.dataset.key,
      label: row.querySelector("dt").textContent,
      value: row.querySelector("dd").textContent,
    }));
    return {
      open: dialog.open,
      modal: dialog.matches(":modal"),
      ariaModal: dialog.getAttribute("aria-modal"),
      callId: dialog.dataset.callId,
      title: dialog.querySelector("[data-testid=confirm-title]").textContent,
      prompt: dialog.querySelector("[data-testid=confirm-prompt]").textContent,
      countdown: dialog.querySelector("[data-testid=confirm-countdown]").textContent,
      focusInside: dialog.contains(document.activeElement),
      focused: document.activeElement && document.activeElement.dataset.testid,
      rows,
    };
  });
}

/**
 * The checks every booking dialog must pass; returns the title argument shown.
 * @param {Awaited<ReturnType<typeof readDialog>>} shown
 */
function assertDialog(shown) {
  assert.ok(shown.open && shown.modal, "a modal dialog");
  assert.equal(shown.ariaModal, "true");
  assert.ok(shown.focusInside, "focus moved into the dialog");
  assert.equal(shown.focused, "confirm-approve", "Approve has focus (Enter approves)");
  assert.match(shown.prompt, /^I'd like to create a calendar event/, "the seed's prompt is shown");
  const byLabel = Object.fromEntries(shown.rows.map((r) => [r.label, r.value]));
  for (const label of ["Title", "Start", "End"]) {
    assert.ok(byLabel[label] && byLabel[label] !== "—", `argument row "${label}" is shown (${JSON.stringify(shown.rows)})`);
  }
  // Dates are in words, not raw ISO 8601.
  assert.doesNotMatch(byLabel.Start, /^\d{4}-\d{2}-\d{2}T/, "the start is readable");
  assert.match(shown.countdown, /^Expires in \d+:\d{2}$/, "a countdown to expiry");
  return byLabel.Title;
}

test("approve: the event is created and the page shows done", { timeout: 90_000 }, async (t) => {
  const { voxgate, browser, page } = await bookingDialog(t);
  const shown = await readDialog(page);
  const title = assertDialog(shown);
  const pending = await activityOf(page, "create_calendar_event");
  assert.equal(pending.state, "awaiting_confirmation");
  assert.equal(pending.label, "Creating a calendar event");
  assert.match(pending.stateText, /waiting for your confirmation/);
  await screenshot(page, "calendar-confirmation");

  await page.keyboard.press("Enter");
  await page.getByTestId("confirm-dialog").waitFor({ state: "hidden" });
  await page.waitForFunction(() => {
    const item = document.querySelector("[data-testid=activity-item][data-tool=create_calendar_event]");
    return item && item.dataset.state === "done";
  }, null, { timeout: 15_000 });
  const events = await waitUntil(() => {
    const found = calendarEvents(voxgate.calendar());
    return found.length > 0 && found;
  }, { message: "the event in the calendar file" });
  assert.equal(events.length, 1, "exactly one event");
  assert.ok(events[0].summary.includes(title) || title.includes(events[0].summary), `calendar has "${title}" (got "${events[0].summary}")`);
  assert.equal((await activityOf(page, "create_calendar_event")).stateText, "done");
  await screenshot(page, "calendar-approved");
  assert.deepEqual(browser.problems, []);
});

test("decline (Escape): declined in the page, no event", { timeout: 90_000 }, async (t) => {
  const { voxgate, browser, page } = await bookingDialog(t);
  assertDialog(await readDialog(page));
  await page.keyboard.press("Escape");
  await page.getByTestId("confirm-dialog").waitFor({ state: "hidden" });
  await page.waitForFunction(() => {
    const item = document.querySelector("[data-testid=activity-item][data-tool=create_calendar_event]");
    return item && item.dataset.state === "declined";
  }, null, { timeout: 15_000 });
  const item = await activityOf(page, "create_calendar_event");
  assert.equal(item.code, "user_declined");
  assert.match(item.stateText, /you declined/);
  assert.equal(calendarEvents(voxgate.calendar()).length, 0, "no event was created");
  await screenshot(page, "calendar-declined");
  assert.deepEqual(browser.problems, []);
});

test("decline (button): declined, no event", { timeout: 90_000 }, async (t) => {
  const { voxgate, page } = await bookingDialog(t);
  await page.getByTestId("confirm-decline").click();
  await page.waitForFunction(() => {
    const item = document.querySelector("[data-testid=activity-item][data-tool=create_calendar_event]");
    return item && item.dataset.state === "declined";
  }, null, { timeout: 15_000 });
  assert.equal((await activityOf(page, "create_calendar_event")).code, "user_declined");
  assert.equal(calendarEvents(voxgate.calendar()).length, 0, "no event was created");
});

test("no answer: the request expires in the page, no event", { timeout: 90_000 }, async (t) => {
  const { voxgate, browser, page } = await bookingDialog(t, { confirmationTimeoutMs: 4000 });
  const shown = await readDialog(page);
  assertDialog(shown);
  const secondsLeft = Number(await page.getByTestId("confirm-countdown").getAttribute("data-seconds-left"));
  assert.ok(secondsLeft >= 1 && secondsLeft <= 4, `the countdown follows expires_at_ms (${secondsLeft} s left)`);
  await screenshot(page, "calendar-countdown");
  await page.waitForFunction(() => {
    const item = document.querySelector("[data-testid=activity-item][data-tool=create_calendar_event]");
    return item && item.dataset.state === "declined";
  }, null, { timeout: 15_000 });
  const item = await activityOf(page, "create_calendar_event");
  assert.equal(item.code, "expired");
  assert.match(item.stateText, /expired/);
  assert.equal(await page.getByTestId("confirm-dialog").isVisible(), false, "the dialog closed");
  assert.equal(calendarEvents(voxgate.calendar()).length, 0, "no event was created");
  await screenshot(page, "calendar-expired");
  assert.deepEqual(browser.problems, []);
});
