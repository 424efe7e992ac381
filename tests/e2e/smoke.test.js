/**
 * Out of the box: no API key, so the upstream is voxgate's built-in simulated model. Typed requests
 * trigger the calculator (activity indicator, done) and the calendar confirmation (dialog, Approve,
 * the event in the calendar file). The only browser test that depends on the simulated model; it
 * asserts on what the page shows, not on the model's wording.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { activityOf, calendarEvents, connectPage, openPage, screenshot, startVoxgate, typeRequest, waitUntil } from "./support/harness.js";

/**
 * Wait for the newest call of `tool` to be in one of `states`.
 * @param {import("playwright-core").Page} page
 * @param {string} tool
 * @param {string[]} states
 */
async function reaches(page, tool, states) {
  await page.waitForFunction(([name, wanted]) => {
    const item = document.querySelector(`[data-testid=activity-item][data-tool="${name}"]`);
    return item && wanted.includes(item.dataset.state);
  }, [tool, states], { timeout: 20_000 });
  return activityOf(page, tool);
}

test("simulated model: a typed calculation and a confirmed booking", { timeout: 120_000 }, async (t) => {
  const voxgate = await startVoxgate();
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  await page.waitForFunction(() => /tools? available/.test(document.querySelector("[data-testid=connection-status]").textContent));

  await typeRequest(page, "Calculate the BMI for a patient who weighs 70 kg and is 175 cm tall");
  await page.locator("[data-testid=transcript-entry][data-role=user]", { hasText: "weighs 70 kg" }).waitFor();
  const calc = await reaches(page, "calculate_medical_score", ["done", "failed"]);
  assert.equal(calc.label, "Calculating a medical score");
  assert.equal(calc.state, "done", JSON.stringify(calc));
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").first().waitFor({ timeout: 20_000 });
  await screenshot(page, "simulated-calculator");

  await typeRequest(page, "Book a meeting with Dr. Smith at 2pm tomorrow");
  const dialog = page.getByRole("dialog", { name: /Create a calendar event/ });
  await dialog.waitFor({ state: "visible", timeout: 20_000 });
  assert.match(await page.getByTestId("confirm-prompt").textContent(), /^I'd like to create a calendar event/);
  const title = await page.locator("[data-testid=confirm-arg][data-key=title] dd").textContent();
  assert.ok(title.trim().length > 0, "the title is shown");
  await screenshot(page, "simulated-confirmation");
  await dialog.getByRole("button", { name: "Approve", exact: true }).click();
  const booked = await reaches(page, "create_calendar_event", ["done", "failed", "declined"]);
  assert.equal(booked.state, "done", JSON.stringify(booked));
  const events = await waitUntil(() => {
    const found = calendarEvents(voxgate.calendar());
    return found.length > 0 && found;
  }, { message: "the event in the calendar file" });
  assert.equal(events.length, 1);
  assert.equal(events[0].summary, title.trim(), "the event is the one approved");
  await screenshot(page, "simulated-booked");
  assert.deepEqual(browser.problems, []);
});
