/**
 * Browser-test harness: the real voxgate binary on a free loopback port with a temp config, Debian's
 * headless Chromium driven by playwright-core with a fake microphone, a WAV made by espeak-ng, and
 * screenshots under tests/e2e/screenshots/ (git-ignored).
 *
 * Environment:
 *   VOXGATE_BIN   the voxgate binary (default: target/debug/voxgate)
 *   CHROMIUM_BIN  the browser (default: /usr/bin/chromium)
 *   E2E_HEADFUL=1 show the browser (for debugging on a desktop)
 */

import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, existsSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(HERE, "../../..");
/** Screenshots of each state the tests reach; git-ignored, looked at by people, never asserted on. */
export const SCREENSHOTS = path.join(HERE, "..", "screenshots");

/** How long to wait for the server to say `listening on`. */
const START_TIMEOUT_MS = 20_000;

/** @param {number} ms */
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Poll until `fn` returns a truthy value.
 * @template T
 * @param {() => T | Promise<T>} fn
 * @param {{timeout?: number, interval?: number, message?: string}} [options]
 * @returns {Promise<T>}
 */
export async function waitUntil(fn, { timeout = 10_000, interval = 50, message = "condition" } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${message}`);
    await sleep(interval);
  }
}

/** TOML string literal. @param {string} s */
const tomlString = (s) => JSON.stringify(s);

/**
 * A running voxgate.
 * @typedef {object} Voxgate
 * @property {string} baseUrl   e.g. http://127.0.0.1:41234
 * @property {string} addr
 * @property {string} dir       temp dir with config, audit log, calendar
 * @property {string} calendarPath
 * @property {string} auditPath
 * @property {() => string} log everything the process printed
 * @property {() => string} calendar the calendar file's text ("" if none)
 * @property {() => Array<object>} audit the audit records
 * @property {() => Promise<number|null>} stop SIGTERM, then the exit code
 */

/**
 * Start the real voxgate binary with a temp config (its own audit log, calendar file and files
 * folder, in a temp dir that is also its working directory).
 *
 * `upstreamUrl` points voxgate at a fake realtime server (`kind = "openai"`, key `test`); without
 * it the upstream is the built-in simulated model. `confirmationTimeoutMs` is passed the way an
 * operator would, as `VOXGATE_TOOLS__CONFIRMATION_TIMEOUT_MS`.
 * @param {{toml?: string, upstreamUrl?: string, confirmationTimeoutMs?: number, listen?: string, env?: Record<string,string>}} [options]
 * @returns {Promise<Voxgate>}
 */
export async function startVoxgate({ toml = "", upstreamUrl, confirmationTimeoutMs, listen = "127.0.0.1:0", env = {} } = {}) {
  const bin = process.env.VOXGATE_BIN || path.join(ROOT, "target", "debug", "voxgate");
  if (!existsSync(bin)) throw new Error(`voxgate binary not found at ${bin} (run cargo build, or set VOXGATE_BIN)`);
  const dir = mkdtempSync(path.join(tmpdir(), "voxgate-e2e-"));
  const calendarPath = path.join(dir, "calendar.ics");
  const auditPath = path.join(dir, "audit.jsonl");
  mkdirSync(path.join(dir, "files"), { recursive: true });
  const sections = [
    `[server]\nlisten = ${tomlString(listen)}\n`,
    `[audit]\npath = ${tomlString(auditPath)}\n`,
    `[backends.calendar]\npath = ${tomlString(calendarPath)}\n`,
    `[backends.files]\nroot = ${tomlString(path.join(dir, "files"))}\n`,
  ];
  if (upstreamUrl) {
    sections.push(`[upstream]\nkind = "openai"\nurl = ${tomlString(upstreamUrl)}\napi_key = "test"\n`);
  }
  if (toml) sections.push(toml);
  const configPath = path.join(dir, "voxgate.toml");
  writeFileSync(configPath, sections.join("\n"));

  const ownEnv = { ...env };
  if (confirmationTimeoutMs) ownEnv.VOXGATE_TOOLS__CONFIRMATION_TIMEOUT_MS = String(confirmationTimeoutMs);
  const childEnv = { ...process.env, NO_COLOR: "1", ...ownEnv };
  for (const key of Object.keys(childEnv)) {
    // The developer's own VOXGATE_* settings must not leak into a test's configuration.
    if (key.startsWith("VOXGATE_") && !(key in ownEnv)) delete childEnv[key];
  }
  delete childEnv.OPENAI_API_KEY; // without a key the upstream is the simulated model
  const child = spawn(bin, ["--config", configPath], { cwd: dir, env: childEnv, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)));
  const addr = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`voxgate did not log "listening on" within ${START_TIMEOUT_MS} ms:\n${output}`)), START_TIMEOUT_MS);
    const onData = (chunk) => {
      output += chunk.toString();
      // eslint-disable-next-line no-control-regex
      const plain = output.replace(/\u001b\[[0-9;]*m/g, "");
      const match = plain.match(/listening on[\s"=:]*((?:\d{1,3}\.){3}\d{1,3}:\d+|\[[0-9a-f:]+\]:\d+)/i);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`voxgate exited (${code}) before listening:\n${output}`));
    });
  });
  return {
    baseUrl: `http://${addr}`,
    addr,
    dir,
    calendarPath,
    auditPath,
    log: () => output,
    calendar: () => (existsSync(calendarPath) ? readFileSync(calendarPath, "utf8") : ""),
    audit: () => (existsSync(auditPath)
      ? readFileSync(auditPath, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l))
      : []),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const code = await Promise.race([exited, sleep(10_000).then(() => "timeout")]);
      if (code === "timeout") {
        child.kill("SIGKILL");
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
      return typeof code === "number" ? code : null;
    },
  };
}

/**
 * A WAV of speech for the fake microphone: espeak-ng, then sox to 48 kHz mono 16-bit (the rate
 * Chromium's fake capture device runs at).
 * @param {string} text
 * @param {string} dir
 * @returns {string} the WAV's path
 */
export function speechWav(text, dir) {
  const raw = path.join(dir, "speech-raw.wav");
  const wav = path.join(dir, "speech-48k.wav");
  execFileSync("espeak-ng", ["-s", "150", "-w", raw, text]);
  execFileSync("sox", [raw, "-r", "48000", "-c", "1", "-b", "16", wav, "gain", "-n", "-3", "pad", "0", "0.3"]);
  return wav;
}

/**
 * A WAV of a steady sine tone for the fake microphone (sox, 48 kHz mono 16-bit, -6 dBFS): lets a
 * test check the frequency that arrives upstream, i.e. that the page resampled to 24 kHz correctly.
 * @param {number} freq Hz
 * @param {string} dir
 * @returns {string} the WAV's path
 */
export function toneWav(freq, dir) {
  const wav = path.join(dir, `tone-${freq}.wav`);
  execFileSync("sox", ["-n", "-r", "48000", "-c", "1", "-b", "16", wav, "synth", "10", "sine", String(freq), "gain", "-6"]);
  return wav;
}

/**
 * A browser with a page on voxgate. The page's console errors, uncaught exceptions and CSP
 * violations are collected in `problems`.
 * @param {{baseUrl: string, wav?: string, args?: string[]}} options  `args`: more Chromium switches
 */
export async function openPage({ baseUrl, wav, args: extraArgs = [] }) {
  const userDataDir = mkdtempSync(path.join(tmpdir(), "voxgate-chromium-"));
  const args = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
  ];
  if (wav) args.push(`--use-file-for-fake-audio-capture=${wav}`);
  args.push(...extraArgs);
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM_BIN || "/usr/bin/chromium",
    headless: process.env.E2E_HEADFUL !== "1",
    args,
    viewport: { width: 1280, height: 900 },
    permissions: ["microphone"],
    locale: "en-GB",
    timezoneId: "UTC",
  });
  const page = context.pages()[0] || (await context.newPage());
  const problems = [];
  page.on("pageerror", (err) => problems.push(`pageerror: ${err.message}`));
  page.on("console", (msg) => {
    const text = msg.text();
    if (msg.type() === "error" && !/favicon/i.test(text)) problems.push(`console: ${text}`);
    if (/Content Security Policy|Refused to/i.test(text)) problems.push(`csp: ${text}`);
  });
  await page.goto(`${baseUrl}/`);
  return {
    context,
    page,
    problems,
    async close() {
      await context.close().catch(() => {});
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Save a screenshot of the page (not committed; the tests assert on the DOM, not on pixels).
 * @param {import("playwright-core").Page} page
 * @param {string} name
 */
export async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/**
 * Connect the page (optionally with microphone processing off) and wait until it is open.
 * @param {import("playwright-core").Page} page
 * @param {{token?: string, processingOff?: boolean}} [options]
 */
export async function connectPage(page, { token, processingOff = false } = {}) {
  if (token) await page.getByTestId("token-input").fill(token);
  if (processingOff) {
    await page.locator("details.advanced summary").click();
    for (const id of ["opt-echo-cancellation", "opt-noise-suppression", "opt-auto-gain"]) {
      await page.getByTestId(id).uncheck();
    }
  }
  // The first open or closed status after the click: a session that opens and is closed at once
  // (the upstream unreachable) is reported as such, not as a timeout.
  await page.waitForFunction(() => typeof window.voxgate === "object");
  await page.evaluate(() => {
    // @ts-ignore
    window.__connectOutcome = new Promise((resolve) => {
      const onStatus = (event) => {
        if (event.detail.state !== "open" && event.detail.state !== "closed") return;
        window.voxgate.removeEventListener("status", onStatus);
        resolve(event.detail.state);
      };
      window.voxgate.addEventListener("status", onStatus);
    });
  });
  await page.getByTestId("connect-button").click();
  const outcome = await page.evaluate(() => window.__connectOutcome);
  const shown = await page.evaluate(() => ({
    state: document.querySelector("[data-testid=connection-status]").dataset.state,
    status: document.querySelector("[data-testid=connection-status]").textContent.trim(),
    errors: [...document.querySelectorAll("[data-testid=error-message]")].map((e) => e.textContent.trim()),
  }));
  if (outcome !== "open" || shown.state !== "open") {
    throw new Error(`the page did not connect: ${shown.status}; errors: ${shown.errors.join(" | ")}`);
  }
}

/**
 * Type a request and send it.
 * @param {import("playwright-core").Page} page
 * @param {string} text
 */
export async function typeRequest(page, text) {
  await page.getByTestId("text-input").fill(text);
  await page.getByTestId("text-input").press("Enter");
}

/**
 * Wait until the confirmation dialog's Approve is enabled: after each request is shown it stays
 * disabled for a short arming delay (and it is disabled for good once the request expires).
 * @param {import("playwright-core").Page} page
 * @param {{timeout?: number}} [options]
 */
export async function approveArmed(page, { timeout = 5_000 } = {}) {
  await page.waitForFunction(() => {
    const approve = document.querySelector("[data-testid=confirm-approve]");
    return approve && !approve.disabled && document.querySelector("[data-testid=confirm-dialog]").open;
  }, null, { timeout });
}

/**
 * The activity item of the first call to `tool`, as {state, label, stateText, code}.
 * @param {import("playwright-core").Page} page
 * @param {string} tool
 */
export function activityOf(page, tool) {
  return page.evaluate((name) => {
    const item = document.querySelector(`[data-testid=activity-item][data-tool="${name}"]`);
    if (!item) return null;
    return {
      callId: item.dataset.callId,
      state: item.dataset.state,
      code: item.dataset.code || "",
      label: item.querySelector("[data-testid=activity-label]").textContent,
      stateText: item.querySelector("[data-testid=activity-state]").textContent,
    };
  }, tool);
}

/**
 * Record every `data-state` an activity item of `tool` goes through (from now on).
 * Read them back with `page.evaluate(() => window.__states)`.
 * @param {import("playwright-core").Page} page
 */
export async function recordActivityStates(page) {
  await page.evaluate(() => {
    // @ts-ignore
    window.__states = [];
    const list = document.querySelector("[data-testid=activity-list]");
    const note = (el) => {
      if (el.dataset && el.dataset.state) {
        // @ts-ignore
        window.__states.push({ tool: el.dataset.tool, state: el.dataset.state, label: el.querySelector("[data-testid=activity-label]").textContent });
      }
    };
    new MutationObserver((records) => {
      for (const r of records) {
        if (r.type === "attributes") note(r.target);
        for (const n of r.addedNodes) if (n.nodeType === 1) note(n);
      }
    }).observe(list, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-state"] });
  });
}

/**
 * The calendar's events as {summary, location} (lines unfolded, text unescaped).
 * @param {string} ics
 */
export function calendarEvents(ics) {
  const unfolded = ics.replace(/\r?\n[ \t]/g, "");
  const unescape = (v) => (v || "").trim().replace(/\\n/gi, "\n").replace(/\\([,;\\])/g, "$1");
  const events = [];
  for (const block of unfolded.split("BEGIN:VEVENT").slice(1)) {
    const field = (name) => unescape((block.match(new RegExp(`^${name}[^:\\n]*:(.*)$`, "m")) || [])[1]);
    events.push({ summary: field("SUMMARY"), location: field("LOCATION") });
  }
  return events;
}
