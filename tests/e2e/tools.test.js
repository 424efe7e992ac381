/**
 * Tools that run without confirmation, as the page shows them: the activity indicator (running →
 * done, failed with a reason in words) with the tool's name in plain words, and citations as links.
 *
 * The model's calls come from a fake realtime upstream (so which tool is called with which
 * arguments is fixed); the tools themselves are voxgate's real ones with their embedded backends
 * (the calculator, the guideline corpus shipped in the repo). One test drives the simulated model.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeUpstream } from "./support/fake-upstream.js";
import { activityOf, connectPage, openPage, recordActivityStates, screenshot, startVoxgate, typeRequest } from "./support/harness.js";

const RULES = [
  {
    match: /body-mass index/i,
    name: "calculate_medical_score",
    arguments: { calculator_name: "bmi", parameters: { weight_kg: 70, height_cm: 175 } },
  },
  {
    match: /guideline/i,
    name: "search_medical_guidelines",
    arguments: { query: "heart failure", max_results: 3 },
  },
  {
    match: /broken/i,
    name: "calculate_medical_score",
    arguments: { calculator_name: "bmi", parameters: { weight_kg: "seventy", height_cm: 175 } },
  },
];

/**
 * Wait for the first call of `tool` to reach a terminal state in the page.
 * @param {import("playwright-core").Page} page
 * @param {string} tool
 */
async function settled(page, tool) {
  await page.waitForFunction((name) => {
    const item = document.querySelector(`[data-testid=activity-item][data-tool="${name}"]`);
    return item && ["done", "failed", "declined"].includes(item.dataset.state);
  }, tool, { timeout: 15_000 });
  return activityOf(page, tool);
}

test("inline tools: activity indicator, failure in words, citations as links", { timeout: 120_000 }, async (t) => {
  const fake = new FakeUpstream({ rules: RULES });
  const upstreamUrl = await fake.start();
  t.after(() => fake.stop());
  const voxgate = await startVoxgate({ upstreamUrl });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  await page.evaluate(() => {
    // @ts-ignore
    window.__toolEvents = [];
    // @ts-ignore
    window.voxgate.addEventListener("tool", (e) => window.__toolEvents.push(e.detail));
  });
  await recordActivityStates(page);

  // --- the calculator: no confirmation, shown while it runs and when done
  await typeRequest(page, "What is the body-mass index for 70 kg and 175 cm?");
  const calc = await settled(page, "calculate_medical_score");
  assert.equal(calc.label, "Calculating a medical score");
  assert.equal(calc.state, "done", JSON.stringify(calc));
  const phases = await page.evaluate(() => window.__toolEvents.filter((e) => e.name === "calculate_medical_score").map((e) => e.phase));
  assert.ok(!phases.includes("confirmation_requested"), "the calculator needs no confirmation");
  assert.equal(phases[phases.length - 1], "completed");
  const states = await page.evaluate(() => window.__states.filter((s) => s.tool === "calculate_medical_score").map((s) => s.state));
  if (phases.includes("started")) assert.ok(states.includes("running"), `the indicator showed running (${states})`);
  assert.ok(states.length > 0 && states[states.length - 1] === "done", `indicator states: ${states}`);
  assert.equal(await page.getByTestId("confirm-dialog").isVisible(), false, "no dialog for an inline tool");
  // The model got the result (the fake answers once it arrives).
  const output = await fake.waitFor(() => fake.events.find((e) => e.type === "conversation.item.create" && e.item && e.item.type === "function_call_output"));
  const result = JSON.parse(output.item.output);
  assert.ok(Math.abs(Number(result.score) - 22.9) < 0.1, `BMI 70 kg / 1.75 m ≈ 22.9 (got ${output.item.output})`);
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").first().waitFor();
  await screenshot(page, "tools-calculator-done");

  // --- a failure is shown with a reason in words
  await typeRequest(page, "Try the broken calculation");
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=activity-item][data-tool=calculate_medical_score]").length === 2);
  await page.waitForFunction(() => {
    const item = document.querySelector("[data-testid=activity-item][data-tool=calculate_medical_score]"); // newest first
    return item && item.dataset.state === "failed";
  }, null, { timeout: 15_000 });
  const failed = await activityOf(page, "calculate_medical_score");
  assert.equal(failed.code, "invalid_arguments");
  assert.match(failed.stateText, /failed — the request was incomplete or not valid/);
  await screenshot(page, "tools-failed");

  // --- citations render as links
  await typeRequest(page, "Search the guidelines on heart failure");
  const guide = await settled(page, "search_medical_guidelines");
  assert.equal(guide.label, "Searching clinical guidelines");
  assert.equal(guide.state, "done", JSON.stringify(guide));
  const completed = await page.evaluate(() => window.__toolEvents.find((e) => e.name === "search_medical_guidelines" && e.phase === "completed"));
  assert.ok(Array.isArray(completed.citations) && completed.citations.length > 0, "the guideline search returned citations");
  await page.getByTestId("citation-link").first().waitFor();
  const links = await page.evaluate(() => [...document.querySelectorAll("[data-testid=citation-link]")].map((a) => ({
    href: a.getAttribute("href"), target: a.getAttribute("target"), rel: a.getAttribute("rel"), text: a.textContent,
  })));
  const linkable = completed.citations.filter((c) => /^https?:\/\//.test(c.url || ""));
  assert.equal(links.length, linkable.length, "one link per citation with a web address");
  for (const [i, link] of links.entries()) {
    assert.equal(link.href, new URL(linkable[i].url).href);
    assert.equal(link.target, "_blank");
    assert.match(link.rel, /\bnoopener\b/);
    assert.ok(link.text.trim().length > 0, "the link has a title");
  }
  await screenshot(page, "tools-citations");
  assert.deepEqual(browser.problems, []);
});

test("simulated model: a typed calculator request shows the activity indicator", { timeout: 90_000 }, async (t) => {
  const voxgate = await startVoxgate();
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  await recordActivityStates(page);
  await typeRequest(page, "Calculate the BMI for a patient who weighs 70 kg and is 175 cm tall");
  const calc = await settled(page, "calculate_medical_score");
  assert.equal(calc.label, "Calculating a medical score");
  assert.equal(calc.state, "done", JSON.stringify(calc));
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").first().waitFor({ timeout: 15_000 });
  await screenshot(page, "simulated-calculator");
  assert.deepEqual(browser.problems, []);
});
