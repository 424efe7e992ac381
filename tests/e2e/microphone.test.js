/**
 * The microphone and the speaker, end to end: Chromium's fake microphone plays a WAV made by
 * espeak-ng → the page's AudioWorklet → PCM16 24 kHz `input_audio_buffer.append` → voxgate → a fake
 * realtime upstream that records the audio; the upstream answers with `response.output_audio.delta`
 * and the page plays it; a barge-in (`input_audio_buffer.speech_started`) stops playback at once and
 * the page truncates the assistant item to what was actually played.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { FakeUpstream, pcmStats, toneFrequency } from "./support/fake-upstream.js";
import { connectPage, openPage, screenshot, sleep, speechWav, startVoxgate, toneWav, waitUntil } from "./support/harness.js";
import { connectedSession } from "./support/session.js";

/** Bytes of one 20 ms chunk of PCM16 mono at 24 kHz. */
const CHUNK_BYTES = 960;

test("microphone audio reaches the upstream as PCM16 24 kHz; output audio plays; barge-in truncates", { timeout: 120_000 }, async (t) => {
  const wavDir = mkdtempSync(path.join(tmpdir(), "voxgate-wav-"));
  t.after(() => rmSync(wavDir, { recursive: true, force: true }));
  const wav = speechWav("Hello. This is a test of the microphone. Please book a meeting with doctor Smith tomorrow at two in the afternoon.", wavDir);

  const fake = new FakeUpstream();
  const upstreamUrl = await fake.start();
  t.after(() => fake.stop());
  const voxgate = await startVoxgate({ upstreamUrl });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl, wav });
  t.after(() => browser.close());
  const { page } = browser;

  await connectPage(page, { processingOff: true });
  await fake.waitFor(() => fake.eventsOf("session.update").length > 0);
  await screenshot(page, "microphone-connected");

  // --- capture
  await page.getByTestId("mic-button").click();
  await page.waitForFunction(() => document.querySelector("[data-testid=mic-button]").getAttribute("aria-pressed") === "true");
  const settings = await page.evaluate(() => window.voxgate.mic.stream.getAudioTracks()[0].getSettings());
  assert.equal(settings.echoCancellation, false, "echo cancellation off");
  assert.equal(settings.noiseSuppression, false, "noise suppression off");
  assert.equal(settings.autoGainControl, false, "auto gain off");

  await fake.waitFor(() => fake.audioBuffer.length >= 3 * 48_000, 20_000); // 3 s of 24 kHz PCM16
  const appends = [...fake.appends];
  const audio = fake.audioBuffer;
  const stats = pcmStats(audio);
  const wallMs = appends[appends.length - 1].at - appends[0].at + 20;
  const sizes = new Set(appends.map((a) => a.bytes));
  t.diagnostic(`appends=${appends.length} bytes=${audio.length} audio_ms=${stats.ms.toFixed(0)} wall_ms=${wallMs} rms=${stats.rms.toFixed(0)} peak=${stats.peak}`);
  assert.deepEqual([...sizes], [CHUNK_BYTES], "every append carries 20 ms of 24 kHz PCM16 (960 bytes)");
  // At 24 kHz, the audio's length matches the time it took to arrive (at 48 kHz it would be double).
  const ratio = stats.ms / wallMs;
  assert.ok(ratio > 0.8 && ratio < 1.25, `audio ms / elapsed ms = ${ratio.toFixed(2)} (expected ~1 at 24 kHz)`);
  assert.ok(stats.rms > 300, `the microphone audio is not silent (rms ${stats.rms.toFixed(0)})`);
  assert.ok(stats.peak > 3000, `speech peaks are present (peak ${stats.peak})`);
  const level = await page.getByTestId("mic-level").getAttribute("data-peak");
  assert.ok(Number(level) > 10, `the level meter moved (peak ${level}%)`);
  await screenshot(page, "microphone-capturing");

  // --- a user turn, then an answer with 1.5 s of audio
  fake.userTurn("please say hello");
  await page.locator("[data-testid=transcript-entry][data-role=user]", { hasText: "please say hello" }).waitFor();
  const answer = fake.respondWithAudio("Hello from the fake model.", 1500);
  await page.waitForFunction(() => document.querySelector("[data-testid=playback-indicator]").dataset.state === "speaking");
  await screenshot(page, "microphone-playing");
  await page.waitForFunction(() => window.voxgate.stats.audioChunksPlayed >= 15, null, { timeout: 10_000 });
  const played = await page.evaluate(() => ({ ...window.voxgate.stats }));
  assert.equal(played.audioChunksReceived, 15, "fifteen 100 ms deltas received");
  assert.ok(played.msPlayed >= 1490 && played.msPlayed <= 1510, `1.5 s of output audio played (${played.msPlayed} ms)`);
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]", { hasText: "Hello from the fake model." }).waitFor();
  assert.equal(fake.eventsOf("conversation.item.truncate").length, 0, "no truncate for audio that played to its end");
  void answer;

  // --- barge-in: 6 s of audio, the user speaks after ~1.2 s
  const before = played.msPlayed;
  const long = fake.respondWithAudio("This is a long answer that the user will interrupt.", 6000);
  await page.waitForFunction(() => document.querySelector("[data-testid=playback-indicator]").dataset.state === "speaking");
  // The user speaks once 1.2 s of it has actually played (on the audio clock, not the wall clock,
  // which a loaded machine stretches).
  await page.waitForFunction((ms) => window.voxgate.stats.msPlayed >= ms, before + 1200, { timeout: 10_000 });
  fake.userTurn("stop, thank you");
  const truncate = await fake.waitFor(() => fake.eventsOf("conversation.item.truncate")[0], 5000);
  const stoppedAt = Date.now();
  await page.waitForFunction(() => !window.voxgate.playing, null, { timeout: 1000 });
  t.diagnostic(`truncate audio_end_ms=${truncate.audio_end_ms}; stopped within ${Date.now() - stoppedAt} ms of the truncate`);
  assert.equal(truncate.item_id, long.itemId, "the playing assistant item is truncated");
  assert.equal(truncate.content_index, 0);
  assert.ok(Number.isInteger(truncate.audio_end_ms), "audio_end_ms is whole ms");
  assert.ok(truncate.audio_end_ms >= 700 && truncate.audio_end_ms <= 2500,
    `audio_end_ms ${truncate.audio_end_ms} ≈ the ~1200 ms actually played`);
  const afterCut = await page.evaluate(() => ({ ...window.voxgate.stats }));
  assert.ok(Math.abs(afterCut.msPlayed - before - truncate.audio_end_ms) < 60,
    `ms played (${(afterCut.msPlayed - before).toFixed(0)}) matches audio_end_ms`);
  // Absence check: the cut audio's end was 4.8 s ahead on the playback clock. First the user's
  // transcript, which comes after the barge-in, must be on the page; then 500 ms must pass on the
  // playback context's own clock (five 100 ms chunks would have ended and been counted had the cut
  // let them play): a span of media time that has to elapse, so a wait remains, but on the audio
  // clock and bounded.
  const clockAtCut = await page.evaluate(() => window.voxgate.player.context.currentTime);
  await page.locator("[data-testid=transcript-entry][data-role=user]", { hasText: "stop, thank you" }).waitFor();
  await page.waitForFunction((t) => window.voxgate.player.context.currentTime >= t + 0.5, clockAtCut, { timeout: 10_000 });
  const later = await page.evaluate(() => window.voxgate.stats.msPlayed);
  assert.equal(later, afterCut.msPlayed, "nothing plays after the barge-in");
  assert.equal(await page.getByTestId("playback-indicator").getAttribute("data-state"), "interrupted");
  await screenshot(page, "microphone-barge-in");

  await page.getByTestId("mic-button").click();
  await page.waitForFunction(() => document.querySelector("[data-testid=mic-button]").getAttribute("aria-pressed") === "false");
  assert.deepEqual(browser.problems, [], "no page errors or CSP violations");
});

/**
 * A session whose fake microphone plays a `hz` tone (processing off), on a fake model.
 * @param {import("node:test").TestContext} t
 * @param {number} hz
 */
async function toneSession(t, hz) {
  const wavDir = mkdtempSync(path.join(tmpdir(), "voxgate-wav-"));
  t.after(() => rmSync(wavDir, { recursive: true, force: true }));
  const fake = new FakeUpstream();
  const upstreamUrl = await fake.start();
  t.after(() => fake.stop());
  const voxgate = await startVoxgate({ upstreamUrl });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl, wav: toneWav(hz, wavDir) });
  t.after(() => browser.close());
  await connectPage(browser.page, { processingOff: true });
  return { fake, browser, page: browser.page };
}

test("a 1 kHz tone from the microphone arrives upstream at 1 kHz: the page resamples to 24 kHz correctly", { timeout: 90_000 }, async (t) => {
  const { fake, browser, page } = await toneSession(t, 1000);
  await page.getByTestId("mic-button").click();
  await fake.waitFor(() => fake.audioBuffer.length >= 2 * 48_000, 20_000);
  const rate = await page.evaluate(() => window.voxgate.mic.context.sampleRate);
  // Skip the first half second (the capture starting up); then the tone is steady.
  const steady = fake.audioBuffer.subarray(24_000);
  const hz = toneFrequency(steady);
  t.diagnostic(`capture context at ${rate} Hz; tone arrived at ${hz.toFixed(1)} Hz`);
  // Had the page sent ${rate} Hz samples labelled 24 kHz, the tone would arrive at 1000 * 24000 / rate Hz.
  assert.ok(Math.abs(hz - 1000) < 10, `the tone arrives at 1000 Hz (got ${hz.toFixed(1)} Hz)`);
  const stats = pcmStats(steady);
  assert.ok(stats.rms > 4000, `the tone keeps its level through the anti-alias filter (rms ${stats.rms.toFixed(0)})`);
  // The page's own count at the very moment it stops, not the upstream's (on a loaded machine
  // several appends sent before the stop can still be on their way through voxgate).
  await page.evaluate(() => {
    // @ts-ignore
    window.__capture = window.voxgate.mic;
    window.voxgate.addEventListener("microphone", (e) => {
      // @ts-ignore
      if (!e.detail.active) window.__appendsAtStop = window.voxgate.stats.appendsSent;
    }, { once: true });
  });
  await page.getByTestId("mic-button").click();
  await page.waitForFunction(() => !window.voxgate.microphoneActive);
  // The stop is over once the worklet has answered the flush (or its timeout passed) and the
  // capture's context is closed; its tracks end at once.
  await waitUntil(() => page.evaluate(() => window.__capture.context.state === "closed"),
    { timeout: 5_000, message: "the capture's audio context to close after the stop" });
  assert.ok(await page.evaluate(() => window.__capture.stream.getAudioTracks().every((tr) => tr.readyState === "ended")),
    "the microphone's tracks are stopped");
  const closedAt = await page.evaluate(() => ({ atStop: window.__appendsAtStop, sent: window.voxgate.stats.appendsSent }));
  // After the button: the chunk already on its way and the partial one the stop flushes, no more.
  assert.ok(closedAt.sent - closedAt.atStop <= 2, `at most two appends after the stop (${closedAt.sent - closedAt.atStop})`);
  // Absence check: a running capture sends an append every 20 ms; 300 ms more (15 chunks' worth)
  // must pass for a capture that failed to stop to show itself, so a fixed wait remains. Then
  // everything the page sent must have reached the upstream, and nothing more.
  await sleep(300);
  const sent = await page.evaluate(() => window.voxgate.stats.appendsSent);
  assert.equal(sent, closedAt.sent, "capture stops with the button");
  await fake.waitFor(() => fake.appends.length >= sent, 5_000);
  assert.equal(fake.appends.length, sent, "the upstream got every append the page sent, and no more");
  assert.deepEqual(browser.problems, []);
});

test("a barge-in truncates the item being heard, not the one queued after it", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await connectedSession(t);
  // The usual tool flow: "Let me check…" (A) is still playing when the next answer (B) arrives.
  const first = fake.respondWithAudio("Let me check that for you.", 3000);
  await page.waitForFunction(() => document.querySelector("[data-testid=playback-indicator]").dataset.state === "speaking");
  await waitUntil(() => fake.activeResponse === null, { message: "the response done" });
  const second = fake.respondWithAudio("Here is the answer.", 2000);
  await page.waitForFunction(() => window.voxgate.stats.audioChunksScheduled >= 50);
  // The user speaks once ~1 s of A has actually played (counted on the audio clock).
  await page.waitForFunction(() => window.voxgate.stats.msPlayed >= 1000, null, { timeout: 10_000 });
  fake.userTurn("wait a moment");
  await fake.waitFor(() => fake.eventsOf("conversation.item.truncate").length > 0, 5000);
  // The page sends all its truncates for one barge-in at once: wait until the upstream has them all.
  const truncatesSent = await page.evaluate(() => window.voxgate.stats.truncatesSent);
  await fake.waitFor(() => fake.eventsOf("conversation.item.truncate").length >= truncatesSent, 5000);
  const truncates = fake.eventsOf("conversation.item.truncate");
  t.diagnostic(JSON.stringify(truncates.map((e) => [e.item_id, e.audio_end_ms])));
  assert.equal(truncates[0].item_id, first.itemId, "the item being heard is truncated");
  assert.ok(truncates[0].audio_end_ms >= 700 && truncates[0].audio_end_ms <= 1800,
    `audio_end_ms ${truncates[0].audio_end_ms} ≈ the ~1000 ms of it played`);
  for (const later of truncates.slice(1)) {
    assert.deepEqual([later.item_id, later.audio_end_ms], [second.itemId, 0], "the item queued after it was not heard at all");
  }
  assert.deepEqual(browser.problems, []);
});

test("stopping the microphone sends the partial chunk it held", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await toneSession(t, 440);
  // Long chunks, so that what the capture holds at the stop is most of the audio.
  await page.evaluate(() => { window.voxgate.options.chunkMs = 2000; });
  await page.getByTestId("mic-button").click();
  await page.waitForFunction(() => window.voxgate.microphoneActive);
  // The capture must hold ~0.8 s of audio: wait for that much to pass on the capture context's own
  // clock (the audio the worklet has processed), not on the wall clock.
  const captureStart = await page.evaluate(() => window.voxgate.mic.context.currentTime);
  await page.waitForFunction((t) => window.voxgate.mic.context.currentTime >= t + 0.8, captureStart, { timeout: 10_000 });
  assert.equal(await page.evaluate(() => window.voxgate.stats.appendsSent), 0, "no whole chunk sent yet");
  assert.equal(fake.appends.length, 0, "no whole chunk yet");
  await page.getByTestId("mic-button").click();
  await page.waitForFunction(() => !window.voxgate.microphoneActive);
  await fake.waitFor(() => fake.appends.length > 0, 3000);
  const { ms } = pcmStats(fake.audioBuffer);
  t.diagnostic(`flushed ${ms.toFixed(0)} ms`);
  assert.ok(ms >= 500 && ms < 2000, `the partial chunk arrived (${ms.toFixed(0)} ms)`);
  assert.deepEqual(browser.problems, []);
});
