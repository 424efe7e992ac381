/**
 * Tools that run without confirmation, as the page shows them: the activity indicator (running →
 * done, failed with a reason in words) with the tool's name in plain words, and citations as links.
 *
 * The model's calls come from a fake realtime upstream (so which tool is called with which
 * arguments is fixed); the tools themselves are voxgate's real ones with their embedded backends.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeEutils } from "./support/fake-eutils.js";
import { FakeUpstream } from "./support/fake-upstream.js";
import { activityOf, connectPage, openPage, recordActivityStates, screenshot, startVoxgate, typeRequest } from "./support/harness.js";

/** Articles the fake PubMed knows; `search_pubmed` turns them into citations. */
const ARTICLES = [
  { pmid: "31111111", title: "Beta-blockers in heart failure with reduced ejection fraction", journal: "Test Journal of Cardiology", year: "2021", abstract: "A trial." },
  { pmid: "32222222", title: "SGLT2 inhibitors & heart failure <a review>", journal: "Test Reviews", year: "2023", abstract: "A review." },
];
const PUBMED_ARGS = { query: "heart failure beta blockers", max_results: 2 };

const RULES = [
  {
    match: /body-mass index/i,
    name: "calculate_medical_score",
    arguments: { calculator_name: "bmi", parameters: { weight_kg: 70, height_cm: 175 } },
  },
  {
    match: /broken/i,
    name: "calculate_medical_score",
    arguments: { calculator_name: "bmi", parameters: { weight_kg: "seventy", height_cm: 175 } },
  },
  { match: /pubmed/i, name: "search_pubmed", arguments: PUBMED_ARGS },
];

/**
 * Wait for the newest call of `tool` to reach a terminal state in the page.
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

/**
 * The links in the Sources list.
 * @param {import("playwright-core").Page} page
 */
function citationLinks(page) {
  return page.evaluate(() => [...document.querySelectorAll("[data-testid=citation]")].map((li) => {
    const a = li.querySelector("a");
    return {
      link: !!a,
      href: a ? a.getAttribute("href") : null,
      target: a ? a.getAttribute("target") : null,
      rel: a ? a.getAttribute("rel") : null,
      text: (a || li).textContent,
      meta: (li.querySelector(".citation-meta") || { textContent: "" }).textContent,
    };
  }));
}

/**
 * Start the fake model, voxgate and a connected page that records tool events and states.
 * @param {import("node:test").TestContext} t
 * @param {{toml?: string}} [options]
 */
async function session(t, { toml } = {}) {
  const fake = new FakeUpstream({ rules: RULES });
  const upstreamUrl = await fake.start();
  t.after(() => fake.stop());
  const voxgate = await startVoxgate({ upstreamUrl, toml });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  await page.waitForFunction(() => window.voxgate.sessionId !== null);
  await page.evaluate(() => {
    // @ts-ignore
    window.__toolEvents = [];
    // @ts-ignore
    window.voxgate.addEventListener("tool", (e) => window.__toolEvents.push(e.detail));
  });
  await recordActivityStates(page);
  return { fake, voxgate, browser, page };
}

test("inline tool: the activity indicator shows it running and done; a failure has a reason in words", { timeout: 120_000 }, async (t) => {
  const { fake, browser, page } = await session(t);

  // --- the calculator: no confirmation, shown while it runs and when done
  await typeRequest(page, "What is the body-mass index for 70 kg and 175 cm?");
  const calc = await settled(page, "calculate_medical_score");
  assert.equal(calc.label, "Calculating a medical score", "the tool's name in words");
  assert.equal(calc.state, "done", JSON.stringify(calc));
  assert.equal(calc.stateText, "done");
  const phases = await page.evaluate(() => window.__toolEvents.filter((e) => e.name === "calculate_medical_score").map((e) => e.phase));
  assert.ok(!phases.includes("confirmation_requested"), "the calculator needs no confirmation");
  assert.equal(phases[phases.length - 1], "completed");
  const states = await page.evaluate(() => window.__states.filter((s) => s.tool === "calculate_medical_score").map((s) => s.state));
  if (phases.includes("started")) assert.equal(states[0], "running", `the indicator showed running first (${states})`);
  assert.equal(states[states.length - 1], "done", `indicator states: ${states}`);
  assert.equal(await page.getByTestId("confirm-dialog").isVisible(), false, "no dialog for an inline tool");
  // The model got the result, and the page the model's answer.
  const call = fake.calls.find((c) => c.name === "calculate_medical_score");
  const output = await fake.waitFor(() => fake.outputFor(call.call_id));
  assert.ok(Math.abs(Number(output.output.score) - 22.9) < 0.051, `BMI 70 kg / 1.75 m = 22.9 (got ${JSON.stringify(output.output)})`);
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").first().waitFor();
  await screenshot(page, "tools-calculator-done");

  // --- a failure is shown with a reason in words
  await typeRequest(page, "Try the broken calculation");
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=activity-item][data-tool=calculate_medical_score]").length === 2);
  const failed = await settled(page, "calculate_medical_score"); // newest first
  assert.equal(failed.state, "failed", JSON.stringify(failed));
  assert.equal(failed.code, "invalid_arguments");
  assert.equal(failed.stateText, "failed — the request was incomplete or not valid");
  assert.equal(await page.locator("[data-testid=activity-item]").count(), 2, "one row per call");
  await screenshot(page, "tools-failed");
  assert.deepEqual(browser.problems, []);
});

test("citations from a tool render as links (search_pubmed against a fake E-utilities)", { timeout: 120_000 }, async (t) => {
  const pubmed = new FakeEutils(ARTICLES);
  const baseUrl = await pubmed.start();
  t.after(() => pubmed.stop());
  const { fake, voxgate, browser, page } = await session(t, { toml: `[backends.pubmed]\nbase_url = ${JSON.stringify(baseUrl)}\n` });
  const offered = await page.evaluate(() => window.voxgate.tools.map((tool) => tool.name));
  if (!offered.includes("search_pubmed")) {
    t.skip(`search_pubmed is not offered by this build (tools: ${offered.join(", ")})`);
    return;
  }
  await typeRequest(page, "Search PubMed for beta blockers in heart failure");
  const item = await settled(page, "search_pubmed");
  assert.equal(item.label, "Searching PubMed");
  assert.equal(item.state, "done", `${JSON.stringify(item)}; fake PubMed saw: ${pubmed.requests.map((u) => u.pathname).join(", ")}; voxgate log:\n${voxgate.log().split("\n").filter((l) => /pubmed|search_pubmed|WARN|ERROR/i.test(l)).join("\n")}`);
  assert.ok(pubmed.requests.some((u) => u.pathname.endsWith("/esearch.fcgi")), "the tool asked the (fake) PubMed");
  await page.getByTestId("citation").nth(ARTICLES.length - 1).waitFor();
  const shown = await citationLinks(page);
  assert.deepEqual(shown.map((c) => ({ link: c.link, href: c.href, target: c.target, rel: c.rel, text: c.text })),
    ARTICLES.map((a) => ({
      link: true, href: `https://pubmed.ncbi.nlm.nih.gov/${a.pmid}/`, target: "_blank", rel: "noopener noreferrer", text: a.title,
    })), "one link per article, titled, opening safely in a new tab");
  for (const [i, entry] of shown.entries()) {
    assert.match(entry.meta, new RegExp(`PubMed · ${ARTICLES[i].year} · PMID ${ARTICLES[i].pmid}`));
  }
  assert.equal(await page.locator("[data-testid=citations-list] a[href]").count(), ARTICLES.length);
  const call = fake.calls.find((c) => c.name === "search_pubmed");
  const output = await fake.waitFor(() => fake.outputFor(call.call_id));
  assert.ok(JSON.stringify(output.output).includes(ARTICLES[0].pmid), "the model got the articles");
  await screenshot(page, "tools-citations");
  assert.deepEqual(browser.problems, []);
});

test("the page renders citations as safe links, and tool states for every phase", { timeout: 60_000 }, async (t) => {
  // The wire events of a finished call go through the client module exactly as if voxgate had sent
  // them: this covers every state and citation shape the page must render, whatever tools this
  // build offers.
  const { browser, page } = await session(t);
  await page.evaluate(() => {
    const frame = (event) => window.voxgate.onFrame(JSON.stringify(event));
    frame({ type: "voxgate.tool_call.started", call_id: "call_a", name: "search_pubmed" });
    frame({
      type: "voxgate.tool_call.completed", call_id: "call_a", name: "search_pubmed", duration_ms: 42,
      citations: [
        { title: "Beta-blockers in heart failure", url: "https://pubmed.ncbi.nlm.nih.gov/12345678/", source: "PubMed", pmid: "12345678", date: "2021" },
        { title: "<img src=x onerror=alert(1)>", url: "javascript:alert(1)", source: "PubMed" },
        { title: "ESC guideline 2023", url: "http://guidelines.example/hf", source: "ESC", evidence_level: "A" },
      ],
    });
    frame({ type: "voxgate.tool_call.started", call_id: "call_b", name: "search_nextcloud_files" });
    frame({ type: "voxgate.tool_call.failed", call_id: "call_b", name: "search_nextcloud_files", error: { code: "backend_error", message: "the file service could not be reached" } });
    frame({ type: "voxgate.tool_call.started", call_id: "call_c", name: "get_calendar_events" });
    frame({ type: "voxgate.tool_call.started", call_id: "call_d", name: "some_new_tool" });
  });
  const shown = await citationLinks(page);
  assert.equal(shown.length, 3);
  assert.deepEqual(shown[0], {
    link: true, href: "https://pubmed.ncbi.nlm.nih.gov/12345678/", target: "_blank", rel: "noopener noreferrer",
    text: "Beta-blockers in heart failure", meta: "PubMed · 2021 · PMID 12345678",
  });
  assert.equal(shown[1].link, false, "a javascript: URL never becomes a link");
  assert.match(shown[1].text, /^<img src=x onerror=alert\(1\)>/, "titles are text, never HTML");
  assert.equal(await page.locator("[data-testid=citations-list] img").count(), 0);
  assert.equal(shown[2].href, "http://guidelines.example/hf");
  assert.equal(shown[2].meta, "ESC · evidence: A");

  const rows = await page.evaluate(() => [...document.querySelectorAll("[data-testid=activity-item]")].map((item) => ({
    tool: item.dataset.tool, state: item.dataset.state, text: item.textContent,
  })));
  assert.deepEqual(rows, [
    { tool: "some_new_tool", state: "running", text: "Running some new tool: running" },
    { tool: "get_calendar_events", state: "running", text: "Checking your calendar: running" },
    { tool: "search_nextcloud_files", state: "failed", text: "Searching your files: failed — the service could not be reached" },
    { tool: "search_pubmed", state: "done", text: "Searching PubMed: done" },
  ]);
  await screenshot(page, "tools-states-and-citations");
  assert.deepEqual(browser.problems, []);
});
