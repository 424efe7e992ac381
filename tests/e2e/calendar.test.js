/**
 * In-band confirmation in the page: a typed request makes the model call `create_calendar_event`
 * (the model is a fake realtime upstream, so the call and its arguments are fixed; the tool, its
 * policy, the confirmation and the calendar file are voxgate's real ones). The dialog shows the
 * seed's prompt, the arguments as readable rows and a countdown; Approve → the event is in the
 * calendar file and the page shows done; Decline → declined, no event; no answer → expired. Queued
 * requests: input that began before a request was shown (a second Enter, a held Enter, a double
 * click, a click aimed at the request before) never approves it.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeUpstream } from "./support/fake-upstream.js";
import {
  activityOf, approveArmed, calendarEvents, connectPage, openPage, screenshot, sleep, startVoxgate, typeRequest, waitUntil,
} from "./support/harness.js";

/** Tomorrow (UTC, voxgate's default calendar time zone) at hh:mm, as ISO 8601 local time. */
function tomorrowAt(hours, minutes = 0) {
  const day = new Date(Date.now() + 24 * 3600 * 1000).toISOString().slice(0, 10);
  return `${day}T${String(hours).padStart(2, "0")}:${String(minutes).padStart(2, "0")}:00`;
}

const BOOKING_ARGS = {
  title: "Meeting with Dr. Smith",
  start_datetime: tomorrowAt(14),
  end_datetime: tomorrowAt(14, 30),
  location: "Ward 7 office",
};

/** The fake model books the meeting when asked to. */
const RULES = [{ match: /book a meeting/i, name: "create_calendar_event", arguments: BOOKING_ARGS }];

/**
 * Start the fake model, voxgate and a page; connect, type the booking request, wait for the dialog.
 * @param {import("node:test").TestContext} t
 * @param {{confirmationTimeoutMs?: number}} [options]
 */
async function bookingDialog(t, options = {}) {
  const fake = new FakeUpstream({ rules: RULES });
  const upstreamUrl = await fake.start();
  t.after(() => fake.stop());
  const { clockOffsetMs: _, ...voxgateOptions } = options;
  const voxgate = await startVoxgate({ upstreamUrl, ...voxgateOptions });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  if (options.clockOffsetMs) {
    // This device's wall clock is off by that much from the server's.
    await page.evaluate((offset) => {
      const real = Date.now;
      Date.now = () => real() + offset;
    }, options.clockOffsetMs);
  }
  await typeRequest(page, "Please book a meeting with Dr. Smith at 2pm tomorrow");
  const dialog = page.getByRole("dialog", { name: /Create a calendar event/ });
  await dialog.waitFor({ state: "visible", timeout: 15_000 });
  const call = fake.calls.find((c) => c.name === "create_calendar_event");
  assert.ok(call, "the fake model made the call");
  return { fake, voxgate, browser, page, dialog, call };
}

/**
 * voxgate on `fake` (started here) and the page on it.
 * @param {import("node:test").TestContext} t
 * @param {FakeUpstream} fake
 */
async function pageOn(t, fake) {
  const upstreamUrl = await fake.start();
  t.after(() => fake.stop());
  const voxgate = await startVoxgate({ upstreamUrl });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  return { voxgate, browser, page: browser.page };
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
    const approve = dialog.querySelector("[data-testid=confirm-approve]");
    const decline = dialog.querySelector("[data-testid=confirm-decline]");
    return {
      open: dialog.open,
      modal: dialog.matches(":modal"),
      ariaModal: dialog.getAttribute("aria-modal"),
      describedBy: dialog.getAttribute("aria-describedby"),
      callId: dialog.dataset.callId,
      title: dialog.querySelector("[data-testid=confirm-title]").textContent,
      prompt: dialog.querySelector("[data-testid=confirm-prompt]").textContent,
      raw: dialog.querySelector("[data-testid=confirm-raw]").textContent,
      countdown: dialog.querySelector("[data-testid=confirm-countdown]").textContent,
      focusInside: dialog.contains(document.activeElement),
      focused: document.activeElement && document.activeElement.dataset.testid,
      buttons: [approve.textContent, decline.textContent],
      rows,
    };
  });
}

/**
 * The checks every booking dialog must pass.
 * @param {Awaited<ReturnType<typeof readDialog>>} shown
 * @param {{call_id: string}} call
 */
function assertDialog(shown, call) {
  assert.ok(shown.open && shown.modal, "a modal dialog");
  assert.equal(shown.ariaModal, "true");
  assert.equal(shown.describedBy, "confirm-prompt", "screen readers hear the prompt");
  assert.equal(shown.callId, call.call_id, "the dialog is for the model's call");
  assert.ok(shown.focusInside, "focus moved into the dialog");
  assert.equal(shown.focused, "confirm-dialog", "the dialog has focus, not a button");
  assert.deepEqual(shown.buttons, ["Approve", "Decline"]);
  // The seed's prompt, filled in by voxgate.
  assert.match(shown.prompt, /^I'd like to create a calendar event/, "the seed's prompt is shown");
  assert.ok(shown.prompt.includes(BOOKING_ARGS.title), `the prompt names the event (${shown.prompt})`);
  // The arguments as readable rows, not raw JSON only.
  const byLabel = Object.fromEntries(shown.rows.map((r) => [r.label, r.value]));
  assert.equal(byLabel.Title, BOOKING_ARGS.title);
  assert.equal(byLabel.Location, BOOKING_ARGS.location);
  for (const label of ["Start", "End"]) {
    assert.ok(byLabel[label], `argument row "${label}" is shown (${JSON.stringify(shown.rows)})`);
    assert.doesNotMatch(byLabel[label], /^\d{4}-\d{2}-\d{2}T/, `${label} is in words, not ISO 8601`);
    assert.match(byLabel[label], /14:(00|30)/, `${label} shows the time`);
  }
  assert.deepEqual(JSON.parse(shown.raw), BOOKING_ARGS, "the exact request is available too");
  assert.match(shown.countdown, /^Expires in \d+:\d{2}$/, "a countdown to expiry");
}

/**
 * Wait until the page shows the booking call in `state`, and return its activity item.
 * @param {import("playwright-core").Page} page
 * @param {string} state
 */
async function activityReaches(page, state) {
  await page.waitForFunction((wanted) => {
    const item = document.querySelector("[data-testid=activity-item][data-tool=create_calendar_event]");
    return item && item.dataset.state === wanted;
  }, state, { timeout: 15_000 });
  return activityOf(page, "create_calendar_event");
}

test("approve (Enter): the event is in the calendar file and the page shows done", { timeout: 90_000 }, async (t) => {
  const { fake, voxgate, browser, page, call } = await bookingDialog(t);
  assertDialog(await readDialog(page), call);
  const pending = await activityOf(page, "create_calendar_event");
  assert.equal(pending.state, "awaiting_confirmation");
  assert.equal(pending.label, "Creating a calendar event");
  assert.match(pending.stateText, /waiting for your confirmation/);
  assert.equal(calendarEvents(voxgate.calendar()).length, 0, "nothing is written before the decision");
  await screenshot(page, "calendar-confirmation");

  await approveArmed(page);
  await page.keyboard.press("Enter");
  await page.getByTestId("confirm-dialog").waitFor({ state: "hidden" });
  const done = await activityReaches(page, "done");
  assert.equal(done.stateText, "done");
  const events = await waitUntil(() => {
    const found = calendarEvents(voxgate.calendar());
    return found.length > 0 && found;
  }, { message: "the event in the calendar file" });
  assert.deepEqual(events, [{ summary: BOOKING_ARGS.title, location: BOOKING_ARGS.location }], "exactly this event");
  const output = await fake.waitFor(() => fake.outputFor(call.call_id));
  assert.equal(output.output.created, true, `the model got the result (${JSON.stringify(output.output)})`);
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").first().waitFor();
  assert.equal(await page.evaluate(() => document.activeElement && document.activeElement.dataset.testid), "text-input",
    "focus returns where it was");
  await screenshot(page, "calendar-approved");
  assert.deepEqual(browser.problems, []);
});

test("decline (Escape): declined in the page, no event", { timeout: 90_000 }, async (t) => {
  const { fake, voxgate, browser, page, call } = await bookingDialog(t);
  assertDialog(await readDialog(page), call);
  await page.keyboard.press("Escape");
  await page.getByTestId("confirm-dialog").waitFor({ state: "hidden" });
  const item = await activityReaches(page, "declined");
  assert.equal(item.code, "user_declined");
  assert.equal(item.stateText, "declined — you declined");
  const output = await fake.waitFor(() => fake.outputFor(call.call_id));
  assert.equal(output.output.error.code, "user_declined", "the model is told");
  assert.equal(calendarEvents(voxgate.calendar()).length, 0, "no event was created");
  await screenshot(page, "calendar-declined");
  assert.deepEqual(browser.problems, []);
});

test("decline (button, found by its accessible name): declined, no event", { timeout: 90_000 }, async (t) => {
  const { voxgate, page, dialog } = await bookingDialog(t);
  await dialog.getByRole("button", { name: "Decline", exact: true }).click();
  const item = await activityReaches(page, "declined");
  assert.equal(item.code, "user_declined");
  assert.equal(calendarEvents(voxgate.calendar()).length, 0, "no event was created");
});

test("no answer: the request expires in the page, no event", { timeout: 90_000 }, async (t) => {
  const { fake, voxgate, browser, page, call } = await bookingDialog(t, { confirmationTimeoutMs: 4000 });
  assertDialog(await readDialog(page), call);
  const secondsLeft = Number(await page.getByTestId("confirm-countdown").getAttribute("data-seconds-left"));
  assert.ok(secondsLeft >= 1 && secondsLeft <= 4, `the countdown follows expires_at_ms (${secondsLeft} s left)`);
  await screenshot(page, "calendar-countdown");
  const item = await activityReaches(page, "declined");
  assert.equal(item.code, "expired");
  assert.equal(item.stateText, "declined — expired (no answer in time)");
  assert.equal(await page.getByTestId("confirm-dialog").isVisible(), false, "the dialog closed");
  const output = await fake.waitFor(() => fake.outputFor(call.call_id));
  assert.equal(output.output.error.code, "confirmation_expired", "the model is told");
  assert.equal(calendarEvents(voxgate.calendar()).length, 0, "no event was created");
  await screenshot(page, "calendar-expired");
  assert.deepEqual(browser.problems, []);
});

/** Four bookings the fake model asks for at once (parallel calls), each needing confirmation. */
const QUEUED = ["A", "B", "C", "D"].map((letter, i) => ({
  title: `Queued meeting ${letter}`,
  start_datetime: tomorrowAt(9 + i),
  end_datetime: tomorrowAt(9 + i, 30),
  location: `Room ${letter}`,
}));

test("queued requests: input begun before a request was shown never approves it", { timeout: 120_000 }, async (t) => {
  const fake = new FakeUpstream({
    rules: [{ match: /book four meetings/i, calls: QUEUED.map((args) => ({ name: "create_calendar_event", arguments: args })) }],
  });
  const { voxgate, browser, page } = await pageOn(t, fake);
  // Every decision the page sends, as it goes over the WebSocket.
  const decisions = [];
  page.on("websocket", (ws) => ws.on("framesent", ({ payload }) => {
    if (typeof payload !== "string" || !payload.includes("voxgate.tool_call.confirm")) return;
    const event = JSON.parse(payload);
    if (event.type === "voxgate.tool_call.confirm") decisions.push({ call_id: event.call_id, approved: event.approved });
  }));
  await connectPage(page);
  // Each showing of a request: when it was shown, where focus was then, and when Approve was enabled.
  await page.evaluate(() => {
    const dialog = document.querySelector("[data-testid=confirm-dialog]");
    const approve = document.querySelector("[data-testid=confirm-approve]");
    // @ts-ignore
    const log = (window.__showings = []);
    let last = null;
    new MutationObserver(() => {
      const now = performance.now();
      if (dialog.open && dialog.dataset.callId && dialog.dataset.callId !== (last && last.callId)) {
        last = { callId: dialog.dataset.callId, shownAt: now, armedAt: null, approveDisabled: approve.disabled,
          focused: document.activeElement && document.activeElement.dataset.testid };
        log.push(last);
      }
      if (last && last.armedAt === null && !approve.disabled && dialog.dataset.callId === last.callId) last.armedAt = now;
    }).observe(dialog, { subtree: true, attributes: true, attributeFilter: ["data-call-id", "disabled", "open"] });
  });
  const shownCallId = () => page.evaluate(() => document.querySelector("[data-testid=confirm-dialog]").dataset.callId);
  const waitShown = (callId) => page.waitForFunction(
    (id) => document.querySelector("[data-testid=confirm-dialog]").dataset.callId === id, callId, { timeout: 15_000 });

  await typeRequest(page, "Please book four meetings tomorrow morning");
  await fake.waitFor(() => fake.calls.length === 4, 15_000);
  const [a, b, c, d] = fake.calls.map((call) => call.call_id);
  await waitShown(a);
  await page.locator("[data-testid=confirm-queue]", { hasText: "3 more requests are waiting." }).waitFor();

  // A: Enter twice, quickly — the second press lands on B, just shown, and does nothing.
  await approveArmed(page);
  await page.keyboard.press("Enter");
  await page.keyboard.press("Enter");
  await sleep(300);
  assert.deepEqual(decisions, [{ call_id: a, approved: true }], "a double Enter approves only the request it was meant for");
  assert.equal(await shownCallId(), b);

  // B: Enter held down — pressed while B was arming, then auto-repeating once Approve is enabled.
  await page.keyboard.down("Enter");
  await approveArmed(page);
  await page.keyboard.down("Enter"); // repeat: true
  await page.keyboard.down("Enter");
  await page.keyboard.up("Enter");
  await sleep(300);
  assert.equal(await shownCallId(), b, "a held Enter does not approve");
  assert.equal(decisions.length, 1, `no decision from a held key (${JSON.stringify(decisions)})`);
  // After the arming delay B can be approved; a double click approves B only, never C after it.
  await page.getByTestId("confirm-approve").dblclick();
  await sleep(300);
  assert.deepEqual(decisions.slice(1), [{ call_id: b, approved: true }], "a double click approves only B");
  assert.equal(await shownCallId(), c);

  // C: a click whose press began on C, released after the server side of things swapped in D
  // (here Escape declines C while the button is held), does not approve D.
  await approveArmed(page);
  const box = await page.getByTestId("confirm-approve").boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.mouse.down();
  await page.keyboard.press("Escape");
  await waitShown(d);
  await approveArmed(page);
  await page.mouse.up();
  await sleep(300);
  assert.equal(await shownCallId(), d, "D is still asking");
  assert.deepEqual(decisions.slice(2), [{ call_id: c, approved: false }], "a click aimed at C does not land on D");

  // D: Decline acts at once.
  await page.getByTestId("confirm-decline").click();
  await page.getByTestId("confirm-dialog").waitFor({ state: "hidden" });

  for (const callId of [a, b, c, d]) await fake.waitFor(() => fake.outputFor(callId), 15_000);
  await sleep(300);
  assert.deepEqual(decisions, [
    { call_id: a, approved: true },
    { call_id: b, approved: true },
    { call_id: c, approved: false },
    { call_id: d, approved: false },
  ], "exactly one decision per request, each the one meant for it");
  assert.equal(fake.outputFor(a).output.created, true);
  assert.equal(fake.outputFor(b).output.created, true);
  assert.equal(fake.outputFor(c).output.error.code, "user_declined");
  assert.equal(fake.outputFor(d).output.error.code, "user_declined");
  const events = await waitUntil(() => {
    const found = calendarEvents(voxgate.calendar());
    return found.length >= 2 && found;
  }, { message: "the approved events in the calendar file" });
  assert.deepEqual(events.map((e) => e.summary).sort(), [QUEUED[0].title, QUEUED[1].title], "only A and B were booked");

  const showings = await page.evaluate(() => window.__showings);
  assert.deepEqual(showings.map((s) => s.callId), [a, b, c, d], `each request shown once (${JSON.stringify(showings)})`);
  for (const shown of showings) {
    assert.equal(shown.approveDisabled, true, `Approve is disabled when ${shown.callId} is shown`);
    assert.equal(shown.focused, "confirm-dialog", `focus is on the dialog, not on Approve, when ${shown.callId} is shown`);
    assert.ok(shown.armedAt - shown.shownAt >= 600, `Approve waits its arming delay (${Math.round(shown.armedAt - shown.shownAt)} ms)`);
  }
  await screenshot(page, "calendar-queued-done");
  assert.deepEqual(browser.problems, []);
});

for (const [clock, offsetMs] of [["five minutes fast", 300_000], ["two minutes slow", -120_000]]) {
  test(`a device clock ${clock}: the countdown still shows the time the request has left`, { timeout: 90_000 }, async (t) => {
    // 60 s to decide by the server's clock. Read by the device's wall clock, a fast one showed the
    // request as expired on arrival, a slow one as 3:00 before it vanished as expired.
    const { voxgate, browser, page } = await bookingDialog(t, { clockOffsetMs: offsetMs });
    const secondsLeft = Number(await page.getByTestId("confirm-countdown").getAttribute("data-seconds-left"));
    assert.ok(secondsLeft >= 50 && secondsLeft <= 60, `${secondsLeft} s left of 60`);
    assert.notEqual(await page.getByTestId("confirm-dialog").getAttribute("data-expired"), "true");
    await approveArmed(page);
    await page.getByTestId("confirm-approve").click();
    const item = await activityReaches(page, "done");
    assert.equal(item.state, "done");
    await waitUntil(() => calendarEvents(voxgate.calendar()).length === 1, { message: "the event in the calendar file" });
    assert.deepEqual(browser.problems, []);
  });
}

test("a start time with an offset reads the same in the dialog's rows as in its prompt", { timeout: 60_000 }, async (t) => {
  // A thin client in UTC (openPage's time zone), a calendar in Berlin, a time given with its offset.
  const year = new Date().getUTCFullYear() + 1;
  const args = { ...BOOKING_ARGS, start_datetime: `${year}-01-15T14:00:00+01:00`, end_datetime: `${year}-01-15T14:30:00+01:00` };
  const fake = new FakeUpstream({ rules: [{ match: /book a meeting/i, name: "create_calendar_event", arguments: args }] });
  const upstreamUrl = await fake.start();
  t.after(() => fake.stop());
  const voxgate = await startVoxgate({ upstreamUrl, env: { VOXGATE_BACKENDS__CALENDAR__TIMEZONE: "Europe/Berlin" } });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  await typeRequest(page, "Please book a meeting with Dr. Smith");
  await page.getByRole("dialog", { name: /Create a calendar event/ }).waitFor({ state: "visible", timeout: 15_000 });
  const shown = await readDialog(page);
  assert.match(shown.prompt, /Start: .* at 14:00 CET/, shown.prompt);
  const start = shown.rows.find((r) => r.key === "start_datetime");
  const end = shown.rows.find((r) => r.key === "end_datetime");
  t.diagnostic(`${start.value} / ${end.value}`);
  assert.match(start.value, /\b14:00\b/, `the Start row agrees with the prompt (${start.value})`);
  assert.match(start.value, /\+01:00|GMT\+1|CET/, `the Start row names its offset (${start.value})`);
  assert.match(end.value, /\b14:30\b/, end.value);
  assert.doesNotMatch(start.value, /13:00/);
  assert.deepEqual(browser.problems, []);
});

test("dates that do not exist (month 13 or 00, second 60, year 0025) are shown as written, never rolled over", { timeout: 60_000 }, async (t) => {
  const fake = new FakeUpstream();
  const { voxgate, browser, page } = await pageOn(t, fake);
  const unreal = [
    "2025-13-05T10:00", "2025-00-05T10:00", "2025-13-05", "2025-00-05", "2025-01-05T10:00:60",
    "2025-01-05T10:60", "0025-01-05T10:00", "0025-01-05", "2025-02-30T10:00",
  ];
  const shown = await page.evaluate(async (values) => {
    const { formatDateValue } = await import("/assets/labels.js");
    return values.map((v) => formatDateValue(v, "en-GB"));
  }, [...unreal, "2025-11-25T14:00", "2025-11-25", "2025-11-25T14:00:59+01:00"]);
  assert.deepEqual(shown.slice(0, unreal.length), unreal, "shown as written, as the server's prompt shows them");
  assert.match(shown[unreal.length], /Tue.*25 Nov 2025.*14:00/, "a real date-time still reads in words");
  assert.match(shown[unreal.length + 1], /Tue.*25 Nov 2025/, "a real date still reads in words");
  assert.match(shown[unreal.length + 2], /14:00 UTC\+01:00/);
  assert.deepEqual(browser.problems, []);
});
