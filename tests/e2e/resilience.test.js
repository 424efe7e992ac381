/**
 * Responses that never end the normal way, as the page must survive them: the upstream goes away in
 * the middle of an answer and voxgate resumes the session on a new one (`voxgate.session.resuming`
 * / `resumed`, docs/protocol.md "Sessions that outlive their upstream"); a running response the
 * upstream forgot (`response_cancel_not_active`); a `response.done` voxgate could not read
 * (`voxgate_upstream_event_unreadable`); a response that ends `failed` or `incomplete`; a user turn
 * whose transcription failed. In each case the next typed question must still be answered.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { screenshot, typeRequest, waitUntil } from "./support/harness.js";
import { connectedSession } from "./support/session.js";
import { tone } from "./support/fake-upstream.js";

/** A question the fake model starts to answer and never finishes. */
const RULES = [{ match: /never finishes/i, hang: "Let me think about that" }];

/**
 * A fake model with [`RULES`], voxgate and a connected page.
 * @param {import("node:test").TestContext} t
 */
const session = (t) => connectedSession(t, { rules: RULES });

/**
 * Ask the question that is never answered; wait until its partial answer is on the page.
 * @param {import("playwright-core").Page} page
 */
async function askHangingQuestion(page) {
  await typeRequest(page, "A question that never finishes");
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=false]", { hasText: "Let me think" }).waitFor();
}

/**
 * Type a question; the fake model's usual answer must arrive.
 * @param {import("playwright-core").Page} page
 */
async function answered(page) {
  await typeRequest(page, "Hello again");
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]", { hasText: "Hello from the fake model." })
    .waitFor({ timeout: 10_000 });
}

/** @param {import("playwright-core").Page} page */
const messages = (page) => page.evaluate(() => [...document.querySelectorAll("[data-testid=error-message]")]
  .map((m) => ({ code: m.dataset.code, text: m.textContent })));

test("the upstream goes away mid-answer: the page says so, finalises the answer, and the next question is answered", { timeout: 90_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  await askHangingQuestion(page);
  await page.evaluate(() => {
    // Every message shown, also those replaced since ("Reconnecting…" gives way to "Reconnected").
    // @ts-ignore
    window.__notices = [];
    new MutationObserver((records) => {
      for (const r of records) {
        // @ts-ignore
        for (const n of r.addedNodes) if (n.nodeType === 1) window.__notices.push({ code: n.dataset.code, text: n.textContent });
      }
    }).observe(document.querySelector("[data-testid=errors]"), { childList: true });
  });
  fake.dropConnection(1011, "internal error");
  await page.locator("[data-testid=error-message][data-code=resumed]").waitFor({ timeout: 20_000 });
  assert.equal(fake.connections, 2, "voxgate resumed on a new upstream connection");
  const notices = await page.evaluate(() => window.__notices);
  assert.deepEqual(notices.map((n) => n.code), ["resuming", "resumed"], JSON.stringify(notices));
  assert.match(notices[0].text, /Reconnecting to the model…/);
  const shown = await messages(page);
  assert.deepEqual(shown.map((m) => m.code), ["resumed"], "the reconnecting message gives way");
  assert.match(shown[0].text, /Reconnected to the model\./);
  const partial = page.locator("[data-testid=transcript-entry][data-role=assistant]", { hasText: "Let me think" });
  assert.equal(await partial.getAttribute("aria-busy"), "false", "the cut-off answer is no longer busy");
  assert.equal(await partial.getAttribute("data-final"), "true");
  assert.equal(await page.getByTestId("connection-status").getAttribute("data-state"), "open", "the session goes on");

  await answered(page);
  assert.equal(fake.eventsOf("response.cancel").length, 0, "nothing to cancel after a resume");
  await screenshot(page, "resilience-resumed");
  assert.deepEqual(browser.problems, []);
});

test("a running response the upstream forgot (response_cancel_not_active): the next question is still answered", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  await askHangingQuestion(page);
  fake.forgetResponse();
  await answered(page);
  assert.equal(fake.eventsOf("response.cancel").length, 1, "the page cancelled what it thought was running");
  assert.equal(await page.locator("[data-testid=error-message][data-code=response_cancel_not_active]").count(), 0, "handled quietly");
  assert.deepEqual(browser.problems, []);
});

test("an unreadable response.done (voxgate_upstream_event_unreadable) does not leave the page waiting", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  await askHangingQuestion(page);
  fake.forgetResponse();
  fake.sendRaw('{"type":"response.done","response":{"id":"resp_cut","output":[]');
  await page.locator("[data-testid=error-message][data-code=voxgate_upstream_event_unreadable]").waitFor();
  await answered(page);
  assert.deepEqual(browser.problems, []);
});

test("a response that fails or is cut short is reported with its status; no free text from the model", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  fake.respondAndEndWith("failed", {
    type: "failed", error: { type: "server_error", code: "model_overloaded", message: "Patient Jane Doe, DOB 1970-01-01" },
  });
  const failed = page.locator("[data-testid=error-message][data-code=response_failed]");
  await failed.waitFor();
  const failedText = await failed.textContent();
  assert.match(failedText, /failed/);
  assert.match(failedText, /model_overloaded|server_error/);
  assert.doesNotMatch(failedText, /Jane Doe/, "the error's free text is not shown");

  fake.respondAndEndWith("incomplete", { type: "incomplete", reason: "max_output_tokens" });
  const incomplete = page.locator("[data-testid=error-message][data-code=response_incomplete]");
  await incomplete.waitFor();
  assert.match(await incomplete.textContent(), /incomplete.*max_output_tokens/);
  const partials = await page.locator("[data-testid=transcript-entry][data-role=assistant][aria-busy=true]").count();
  assert.equal(partials, 0, "no answer stays busy after its response is done");
  await answered(page);
  assert.deepEqual(browser.problems, []);
});

test("a failed transcription finalises the user's line as not transcribed", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  const itemId = fake.nextId("item");
  fake.send({ type: "conversation.item.input_audio_transcription.delta", item_id: itemId, content_index: 0, delta: "Book a" });
  const line = page.locator("[data-testid=transcript-entry][data-role=user]", { hasText: "Book a" });
  await line.waitFor();
  assert.equal(await line.getAttribute("aria-busy"), "true");
  fake.send({
    type: "conversation.item.input_audio_transcription.failed", item_id: itemId, content_index: 0,
    error: { type: "transcription_error", code: "audio_unintelligible", message: "Audio could not be transcribed." },
  });
  const done = page.locator("[data-testid=transcript-entry][data-role=user][data-final=true]", { hasText: "(not transcribed)" });
  await done.waitFor();
  assert.equal(await done.getAttribute("aria-busy"), "false");
  assert.deepEqual(browser.problems, []);
});

/**
 * Record the page client's `playback` states from now on (`window.__playback`).
 * @param {import("playwright-core").Page} page
 */
const recordPlayback = (page) => page.evaluate(() => {
  // @ts-ignore
  window.__playback = [];
  // @ts-ignore
  window.voxgate.addEventListener("playback", (e) => window.__playback.push(e.detail.state));
});

/**
 * A complete 4 s answer whose upstream goes away once the page has its `response.done`, while the
 * page still plays it; resolves once voxgate has resumed.
 * @param {import("./support/fake-upstream.js").FakeUpstream} fake
 * @param {import("playwright-core").Page} page
 */
async function completeAnswerThenDrop(fake, page) {
  await page.evaluate(() => {
    // @ts-ignore
    window.__responsesDone = 0;
    window.voxgate.addEventListener("response", (e) => {
      // @ts-ignore
      if (e.detail.state === "done") window.__responsesDone += 1;
    });
  });
  const answer = fake.respondWithAudio("A complete answer.", 4000);
  await waitUntil(() => fake.activeResponse === null, { message: "the response done" });
  // The answer is complete for the page only once its response.done has reached it.
  await page.waitForFunction(() => window.__responsesDone >= 1, null, { timeout: 5_000 });
  assert.equal(await page.evaluate(() => window.voxgate.playing), true, "the answer still plays when the upstream goes");
  fake.dropConnection(1011, "internal error");
  await page.locator("[data-testid=error-message][data-code=resumed]").waitFor({ timeout: 20_000 });
  return answer;
}

test("a resume after an answer is complete does not cut the rest of its audio", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  await recordPlayback(page);
  await completeAnswerThenDrop(fake, page);
  await page.waitForFunction(() => !window.voxgate.playing, null, { timeout: 10_000 });
  const msPlayed = await page.evaluate(() => window.voxgate.stats.msPlayed);
  const states = await page.evaluate(() => window.__playback);
  assert.ok(!states.includes("interrupted"), `no interruption (${states})`);
  assert.ok(Math.abs(msPlayed - 4000) < 20, `the whole answer played (${msPlayed} ms)`);
  assert.deepEqual(browser.problems, []);
});

test("after a resume, a barge-in sends no truncate for an item from before it", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  await completeAnswerThenDrop(fake, page);
  assert.equal(await page.evaluate(() => window.voxgate.playing), true, "the answer still plays after the resume");
  fake.userTurn("stop please");
  await page.waitForFunction(() => !window.voxgate.playing, null, { timeout: 2_000 });
  // The barge-in, not the audio's end, stopped it; the page would have sent any truncate in the
  // same step.
  assert.equal(await page.getByTestId("playback-indicator").getAttribute("data-state"), "interrupted");
  assert.equal(await page.evaluate(() => window.voxgate.stats.truncatesSent), 0, "the page sent no truncate");
  // Absence on the wire, without a fixed wait: a frame the page sends now reaches the upstream
  // after anything it sent before (one ordered socket each way, forwarded in order).
  await page.evaluate(() => window.voxgate.send({ type: "input_audio_buffer.clear" }));
  await fake.waitFor(() => fake.events.some((e) => e.type === "input_audio_buffer.clear"), 5_000);
  // The new upstream holds the old conversation as text: the old item's id means nothing to it.
  assert.deepEqual(fake.eventsOf("conversation.item.truncate"), []);
  assert.deepEqual(browser.problems, []);
});

test("a resume while an earlier answer still plays: the indicator keeps saying the assistant speaks", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  await recordPlayback(page);
  fake.respondWithAudio("A complete answer.", 4000);
  await waitUntil(() => fake.activeResponse === null, { message: "the response done" });
  // A second answer, queued behind the first one's tail, is running when the upstream goes.
  const { base } = fake.beginAudioMessage();
  const pcm = tone(1000);
  for (let offset = 0; offset < pcm.length; offset += 4800) {
    fake.send({ type: "response.output_audio.delta", ...base, delta: pcm.subarray(offset, offset + 4800).toString("base64") });
  }
  await page.waitForFunction(() => window.voxgate.stats.audioChunksScheduled === 50, null, { timeout: 5_000 });
  fake.dropConnection(1011, "internal error");
  await page.locator("[data-testid=error-message][data-code=resumed]").waitFor({ timeout: 20_000 });
  assert.equal(await page.evaluate(() => window.voxgate.playing), true, "the first answer still plays");
  const indicator = page.getByTestId("playback-indicator");
  assert.equal(await indicator.getAttribute("data-state"), "speaking");
  assert.match(await indicator.textContent(), /Assistant is speaking/);
  await page.waitForFunction(() => !window.voxgate.playing, null, { timeout: 10_000 });
  const states = await page.evaluate(() => window.__playback);
  assert.ok(!states.includes("interrupted"), `never "stopped" while audible (${states})`);
  assert.equal(states[states.length - 1], "ended");
  const msPlayed = await page.evaluate(() => window.voxgate.stats.msPlayed);
  assert.ok(Math.abs(msPlayed - 4000) < 20, `the first answer played whole, none of the second (${msPlayed} ms)`);
  assert.deepEqual(browser.problems, []);
});
