/**
 * The page on a shared workstation and with real audio hardware: a manual Connect starts from an
 * empty transcript, activity list and sources (the previous user's patient details do not stay on
 * screen); each list is capped; playback that the browser suspends, and a microphone that goes away
 * (unplugged, permission revoked), are reported instead of failing silently.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { connectPage, openPage, screenshot, sleep, startVoxgate, typeRequest } from "./support/harness.js";
import { connectedSession, fakeModel } from "./support/session.js";
import { tone } from "./support/fake-upstream.js";

/** The most entries each list keeps. */
const LIST_CAP = 200;

/**
 * A fake model, voxgate and a connected page.
 * @param {import("node:test").TestContext} t
 */
const session = (t) => connectedSession(t);

/** @param {import("playwright-core").Page} page */
const counts = (page) => page.evaluate(() => ({
  transcript: document.querySelectorAll("[data-testid=transcript-entry]").length,
  activity: document.querySelectorAll("[data-testid=activity-item]").length,
  citations: document.querySelectorAll("[data-testid=citation]").length,
}));

/**
 * Feed `n` finished tool calls with a citation each, and `n` user lines, through the client module
 * as if voxgate had sent them.
 * @param {import("playwright-core").Page} page
 * @param {number} n
 * @param {string} prefix
 */
function feed(page, n, prefix) {
  return page.evaluate(([count, tag]) => {
    const frame = (event) => window.voxgate.onFrame(JSON.stringify(event));
    for (let i = 0; i < count; i += 1) {
      frame({ type: "conversation.item.input_audio_transcription.completed", item_id: `${tag}_item_${i}`, content_index: 0, transcript: `${tag} line ${i}` });
      frame({ type: "voxgate.tool_call.started", call_id: `${tag}_call_${i}`, name: "search_pubmed" });
      frame({
        type: "voxgate.tool_call.completed", call_id: `${tag}_call_${i}`, name: "search_pubmed", duration_ms: 1,
        citations: [{ title: `${tag} source ${i}`, url: `https://example.org/${i}`, source: "PubMed" }],
      });
    }
  }, [n, prefix]);
}

test("a manual Connect clears the previous session's transcript, activity and sources", { timeout: 60_000 }, async (t) => {
  const { browser, page } = await session(t);
  await typeRequest(page, "Patient Jane Doe has a cough");
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").first().waitFor({ timeout: 10_000 });
  await feed(page, 3, "first");
  // A partial line left over: a later delta for it must not bring the old line back.
  await page.evaluate(() => window.voxgate.onFrame(JSON.stringify({
    type: "conversation.item.input_audio_transcription.delta", item_id: "left_over", content_index: 0, delta: "Jane",
  })));
  const before = await counts(page);
  assert.ok(before.transcript >= 5 && before.activity === 3 && before.citations === 3, JSON.stringify(before));
  await page.getByTestId("disconnect-button").click();
  await page.waitForFunction(() => document.querySelector("[data-testid=connection-status]").dataset.state === "closed");
  await connectPage(page);
  assert.deepEqual(await counts(page), { transcript: 0, activity: 0, citations: 0 }, "nothing of the previous session is shown");
  assert.equal(await page.locator("#transcript-empty").isVisible(), true, "the empty-list hint is back");
  assert.equal(await page.getByTestId("activity-empty").isVisible(), true);
  await page.evaluate(() => window.voxgate.onFrame(JSON.stringify({
    type: "conversation.item.input_audio_transcription.delta", item_id: "left_over", content_index: 0, delta: " Doe",
  })));
  const lines = await page.evaluate(() => [...document.querySelectorAll("[data-testid=transcript-text]")].map((e) => e.textContent));
  assert.deepEqual(lines, [" Doe"], "the old line is gone from the maps as well as the page");
  assert.doesNotMatch(await page.locator("main").textContent(), /Jane/);
  assert.deepEqual(browser.problems, []);
});

test("each list keeps only its newest entries", { timeout: 60_000 }, async (t) => {
  const { browser, page } = await session(t);
  await feed(page, LIST_CAP + 15, "many");
  const shown = await counts(page);
  assert.deepEqual(shown, { transcript: LIST_CAP, activity: LIST_CAP, citations: LIST_CAP });
  const ends = await page.evaluate(() => ({
    firstLine: document.querySelector("[data-testid=transcript-entry] [data-testid=transcript-text]").textContent,
    newestCall: document.querySelector("[data-testid=activity-item]").dataset.callId,
    oldestCall: [...document.querySelectorAll("[data-testid=activity-item]")].pop().dataset.callId,
    firstSource: document.querySelector("[data-testid=citation]").textContent,
  }));
  assert.equal(ends.firstLine, "many line 15", "the oldest lines were dropped");
  assert.equal(ends.newestCall, `many_call_${LIST_CAP + 14}`);
  assert.equal(ends.oldestCall, "many_call_15");
  assert.match(ends.firstSource, /^many source 15/);
  // A dropped call's late event makes a new row rather than touching a detached one.
  await page.evaluate(() => window.voxgate.onFrame(JSON.stringify({ type: "voxgate.tool_call.failed", call_id: "many_call_0", name: "search_pubmed", error: { code: "timeout", message: "x" } })));
  assert.equal((await counts(page)).activity, LIST_CAP);
  assert.deepEqual(browser.problems, []);
});

test("playback suspended by the browser: chunks are not queued and the user is asked to click", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  await page.evaluate(() => window.voxgate.player.context.suspend());
  const notice = page.locator("[data-testid=error-message][data-code=audio_suspended]");
  await notice.waitFor();
  assert.match(await notice.textContent(), /click/i);
  const scheduledBefore = await page.evaluate(() => window.voxgate.stats.audioChunksScheduled);
  fake.respondWithAudio("You will not hear this.", 500);
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").waitFor();
  const stats = await page.evaluate(() => ({ ...window.voxgate.stats }));
  assert.equal(stats.audioChunksScheduled, scheduledBefore, "nothing is scheduled on a suspended context");
  assert.ok(stats.audioChunksReceived >= 5);
  await screenshot(page, "audio-suspended");
  await page.locator("h1").click();
  await page.waitForFunction(() => window.voxgate.player.context.state === "running");
  await notice.waitFor({ state: "detached" });
  assert.deepEqual(browser.problems, []);
});

test("a microphone that goes away stops the microphone in the page with an error", { timeout: 60_000 }, async (t) => {
  const { browser, page } = await session(t);
  await page.getByTestId("mic-button").click();
  await page.waitForFunction(() => document.querySelector("[data-testid=mic-button]").getAttribute("aria-pressed") === "true");
  // What the browser does when the device is unplugged or permission is revoked.
  await page.evaluate(() => {
    const track = window.voxgate.mic.stream.getAudioTracks()[0];
    track.stop();
    track.dispatchEvent(new Event("ended"));
  });
  await page.locator("[data-testid=error-message][data-code=microphone_ended]").waitFor();
  await page.waitForFunction(() => document.querySelector("[data-testid=mic-button]").getAttribute("aria-pressed") === "false");
  assert.equal(await page.evaluate(() => window.voxgate.microphoneActive), false);
  await sleep(100);
  assert.deepEqual(browser.problems, []);
});

test("over plain http (not localhost) the microphone error says the page needs https", { timeout: 60_000 }, async (t) => {
  const { fake, upstreamUrl } = await fakeModel(t);
  const voxgate = await startVoxgate({ upstreamUrl });
  t.after(() => voxgate.stop());
  // A host name that is not localhost: an insecure context, where browsers hide navigator.mediaDevices.
  const port = new URL(voxgate.baseUrl).port;
  const browser = await openPage({
    baseUrl: `http://voxgate.test:${port}`,
    args: ["--host-resolver-rules=MAP voxgate.test 127.0.0.1"],
  });
  t.after(() => browser.close());
  const { page } = browser;
  assert.equal(await page.evaluate(() => window.isSecureContext), false);
  await connectPage(page);
  await page.getByTestId("mic-button").click();
  const error = page.locator("[data-testid=error-message][data-code=microphone_insecure]");
  await error.waitFor();
  assert.match(await error.textContent(), /https/);
  assert.equal(await page.getByTestId("mic-button").getAttribute("aria-pressed"), "false");
});

test("a microphone that was on is turned on again after an automatic reconnect", { timeout: 90_000 }, async (t) => {
  const { fake, upstreamUrl } = await fakeModel(t);
  let voxgate = await startVoxgate({ upstreamUrl });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  await page.getByTestId("mic-button").click();
  await page.waitForFunction(() => window.voxgate.microphoneActive);
  const addr = voxgate.addr;
  assert.equal(await voxgate.stop(), 0);
  await page.waitForFunction(() => document.querySelector("[data-testid=connection-status]").dataset.state === "closed");
  assert.equal(await page.evaluate(() => window.voxgate.microphoneActive), false, "the microphone stops with the session");
  voxgate = await startVoxgate({ upstreamUrl, listen: addr });
  await page.waitForFunction(() => document.querySelector("[data-testid=connection-status]").dataset.state === "open", null, { timeout: 40_000 });
  await page.waitForFunction(() => window.voxgate.microphoneActive, null, { timeout: 10_000 });
  assert.equal(await page.getByTestId("mic-button").getAttribute("aria-pressed"), "true");
  assert.deepEqual(browser.problems, []);
});

test("an answer that arrives while playback is suspended is truncated to nothing, once", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  await page.evaluate(() => window.voxgate.player.context.suspend());
  await page.locator("[data-testid=error-message][data-code=audio_suspended]").waitFor();
  const unheard = fake.respondWithAudio("You will not hear this.", 500);
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").waitFor();
  await fake.waitFor(() => fake.eventsOf("conversation.item.truncate").length > 0, 5000);
  await sleep(200);
  const truncates = fake.eventsOf("conversation.item.truncate").map((e) => [e.item_id, e.content_index, e.audio_end_ms]);
  assert.deepEqual(truncates, [[unheard.itemId, 0, 0]], "the model is told none of it was heard");
  assert.equal(fake.eventsOf("response.cancel").length, 1, "the response the user will not hear is cancelled, once");
  assert.deepEqual(browser.problems, []);
});

/**
 * `ms` more of an assistant item's audio, in 100 ms deltas sent at once (faster than real time).
 * @param {import("./support/fake-upstream.js").FakeUpstream} fake
 * @param {object} base the item's `response_id`, `item_id`, `output_index`, `content_index`
 * @param {number} ms
 */
function sendAudio(fake, base, ms) {
  const pcm = tone(ms);
  for (let offset = 0; offset < pcm.length; offset += 4800) {
    fake.send({ type: "response.output_audio.delta", ...base, delta: pcm.subarray(offset, offset + 4800).toString("base64") });
  }
}

/** @param {import("./support/fake-upstream.js").FakeUpstream} fake */
const truncatesOf = (fake) => fake.eventsOf("conversation.item.truncate").map((e) => [e.item_id, e.content_index, e.audio_end_ms]);

test("audio dropped while suspended, after part of its item was heard: truncated at what was heard, the response cancelled", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  // 1 s of a running answer plays to its end; its next audio is late (network jitter).
  const { itemId, base } = fake.beginAudioMessage();
  sendAudio(fake, base, 1000);
  await page.waitForFunction(() => window.voxgate.stats.audioChunksPlayed === 10 && !window.voxgate.playing, null, { timeout: 5_000 });
  await page.evaluate(() => window.voxgate.player.context.suspend());
  await page.locator("[data-testid=error-message][data-code=audio_suspended]").waitFor();
  assert.deepEqual(truncatesOf(fake), [], "nothing was queued at the suspension: nothing to cut");
  sendAudio(fake, base, 500);
  await fake.waitFor(() => fake.eventsOf("conversation.item.truncate").length > 0, 5000);
  await sleep(300);
  const truncates = truncatesOf(fake);
  assert.equal(truncates.length, 1, JSON.stringify(truncates));
  const [[item, contentIndex, endMs]] = truncates;
  assert.deepEqual([item, contentIndex], [itemId, 0]);
  assert.ok(Math.abs(endMs - 1000) <= 2, `the model keeps the second the user heard (audio_end_ms ${endMs})`);
  assert.equal(fake.eventsOf("response.cancel").length, 1, "the response that would go on unheard is cancelled");
  const cancel = fake.events.findIndex((e) => e.type === "response.cancel");
  const truncate = fake.events.findIndex((e) => e.type === "conversation.item.truncate");
  assert.ok(cancel < truncate, "cancelled first: nothing is added to the item after its truncate");
  await page.waitForFunction(() => window.voxgate.activeResponseId === null, null, { timeout: 5_000 });
  assert.deepEqual(browser.problems, []);
});

test("playback suspended while a running answer plays: truncated at what was heard and cancelled, once", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await session(t);
  const { itemId, base } = fake.beginAudioMessage();
  sendAudio(fake, base, 3000);
  await page.waitForFunction(() => window.voxgate.stats.msPlayed >= 500, null, { timeout: 5_000 });
  await page.evaluate(() => window.voxgate.player.context.suspend());
  await fake.waitFor(() => fake.eventsOf("conversation.item.truncate").length > 0, 5000);
  // The rest of the item, still coming: dropped, and nothing more is sent for it.
  sendAudio(fake, base, 500);
  await sleep(300);
  const truncates = truncatesOf(fake);
  assert.equal(truncates.length, 1, JSON.stringify(truncates));
  const [[item, , endMs]] = truncates;
  assert.equal(item, itemId);
  const heard = await page.evaluate(() => window.voxgate.stats.msPlayed);
  assert.ok(endMs >= 500 && endMs < 3000 && Math.abs(endMs - heard) <= 2, `truncated at what was heard (${endMs} ms, ${heard} ms played)`);
  assert.equal(fake.eventsOf("response.cancel").length, 1, "the running response is cancelled, once");
  await page.waitForFunction(() => window.voxgate.activeResponseId === null, null, { timeout: 5_000 });
  assert.deepEqual(browser.problems, []);
});
