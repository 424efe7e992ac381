/**
 * How a session ends, as the page tells it: the server's reason (`voxgate.session.closing`, the
 * WebSocket close reason) in words; no Reconnect with a token that can no longer work (an expired
 * sign-in, a spent single-use ticket) and no automatic retry with a spent ticket after a drain; and
 * tool activity that was still going when the socket closed ends as "interrupted", never spinning.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import {
  activityOf, approveArmed, connectPage, openPage, recordActivityStates, screenshot, sleep, startVoxgate, typeRequest,
} from "./support/harness.js";
import { connectedSession, fakeModel, labConfig } from "./support/session.js";

const JWT_SECRET = "e2e-test-secret-that-is-long-enough-0123456789";
const ADMIN_TOKEN = "e2e-admin-token-0123456789abcdef";

/**
 * An HS256 JWT.
 * @param {object} claims
 */
function jwt(claims) {
  const part = (obj) => Buffer.from(JSON.stringify(obj)).toString("base64url");
  const body = `${part({ alg: "HS256", typ: "JWT" })}.${part(claims)}`;
  return `${body}.${createHmac("sha256", JWT_SECRET).update(body).digest("base64url")}`;
}

/**
 * Record every status the page's client reports from now on (`window.__statuses`).
 * @param {import("playwright-core").Page} page
 */
async function recordStatuses(page) {
  await page.evaluate(() => {
    // @ts-ignore
    window.__statuses = [];
    // @ts-ignore
    window.voxgate.addEventListener("status", (e) => window.__statuses.push(e.detail.state));
  });
}

/** @param {import("playwright-core").Page} page */
const closed = (page, timeout = 15_000) => page.waitForFunction(
  () => document.querySelector("[data-testid=connection-status]").dataset.state === "closed", null, { timeout },
);

test("an expired sign-in ends the session with its reason; no Reconnect with the same token", { timeout: 60_000 }, async (t) => {
  const { upstreamUrl } = await fakeModel(t);
  const voxgate = await startVoxgate({ upstreamUrl, toml: `[auth]\nmode = "jwt"\njwt_secret = "${JWT_SECRET}"\n` });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page, { token: jwt({ sub: "dr-who", roles: ["clinician"], exp: Math.floor(Date.now() / 1000) + 5 }) });
  await closed(page);
  const status = await page.getByTestId("connection-status").textContent();
  assert.match(status, /authorisation expired/, `the close reason is shown (${status})`);
  const notice = page.locator("[data-testid=error-message][data-code=closing]");
  await notice.waitFor();
  const text = await notice.textContent();
  assert.match(text, /authorisation expired/, "the server's reason is shown");
  assert.match(text, /sign in/i, "the user is told to sign in again");
  await sleep(300);
  assert.equal(await page.getByTestId("reconnect-button").isVisible(), false, "no Reconnect with an expired token");
  await screenshot(page, "closing-auth-expired");
  assert.deepEqual(browser.problems, []);
});

test("a drain does not retry with a spent single-use ticket; the page asks for a new one", { timeout: 60_000 }, async (t) => {
  const { upstreamUrl } = await fakeModel(t);
  const voxgate = await startVoxgate({ upstreamUrl, toml: `[auth]\nmode = "ticket"\nadmin_token = "${ADMIN_TOKEN}"\n` });
  t.after(() => voxgate.stop());
  const minted = await fetch(`${voxgate.baseUrl}/v1/sessions`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ sub: "dr-who", roles: ["clinician"], ttl_s: 60 }),
  });
  assert.equal(minted.status, 201);
  const { token } = await minted.json();
  assert.ok(token.startsWith("vgt."), token);
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page, { token });
  await recordStatuses(page);
  assert.equal(await voxgate.stop(), 0);
  await closed(page);
  const notice = page.locator("[data-testid=error-message][data-code=ticket_spent]");
  await notice.waitFor();
  assert.match(await notice.textContent(), /new ticket/i);
  // The first automatic retry would come within 0.5 s; wait well past it.
  await sleep(2500);
  const statuses = await page.evaluate(() => window.__statuses);
  assert.ok(!statuses.includes("connecting"), `no retry with the spent ticket (${statuses})`);
  assert.equal(await page.getByTestId("reconnect-button").isVisible(), false, "no Reconnect with a spent ticket");
  await screenshot(page, "closing-ticket-spent");
  assert.deepEqual(browser.problems, []);
});

/**
 * voxgate with the MCP lab server's `slow`, `count_steps` and `order_test` tools, and a connected page.
 * @param {import("node:test").TestContext} t
 * @param {Array<object>} rules
 */
async function labSession(t, rules) {
  return connectedSession(t, { rules, toml: labConfig(["slow", "count_steps", "order_test"]).toml });
}

test("a tool still running when the session closes ends as interrupted, not spinning", { timeout: 90_000 }, async (t) => {
  const { browser, page } = await labSession(t, [{ match: /slowly/i, name: "lab__slow", arguments: { tag: "t1", seconds: 30 } }]);
  await typeRequest(page, "Do it slowly");
  await page.waitForFunction(() => {
    const item = document.querySelector("[data-testid=activity-item][data-tool=lab__slow]");
    return item && item.dataset.state === "running";
  }, null, { timeout: 20_000 });
  await recordActivityStates(page);
  await page.getByTestId("disconnect-button").click();
  await closed(page);
  const states = await page.evaluate(() => window.__states);
  const last = states.filter((s) => s.tool === "lab__slow").pop();
  assert.equal(last && last.state, "interrupted", JSON.stringify(states));
  // The user's own Disconnect then clears the list (the next user must not see it).
  assert.equal(await activityOf(page, "lab__slow"), null);
  assert.deepEqual(browser.problems, []);
});

test("MCP progress shows as n/total — message in the activity row", { timeout: 90_000 }, async (t) => {
  const { browser, page } = await labSession(t, [{ match: /count/i, name: "lab__count_steps", arguments: { steps: 5 } }]);
  await page.evaluate(() => {
    // @ts-ignore
    window.__texts = [];
    const list = document.querySelector("[data-testid=activity-list]");
    new MutationObserver(() => {
      const state = list.querySelector("[data-tool=lab__count_steps] [data-testid=activity-state]");
      // @ts-ignore
      if (state) window.__texts.push(state.textContent);
    }).observe(list, { subtree: true, childList: true, characterData: true, attributes: true });
  });
  await typeRequest(page, "Please count the steps");
  await page.waitForFunction(() => {
    const item = document.querySelector("[data-testid=activity-item][data-tool=lab__count_steps]");
    return item && item.dataset.state === "done";
  }, null, { timeout: 20_000 });
  const texts = await page.evaluate(() => window.__texts);
  assert.ok(texts.some((s) => /\b\d\/5 — step \d of 5$/.test(s)), `progress shown (${JSON.stringify(texts)})`);
  assert.equal((await activityOf(page, "lab__count_steps")).stateText, "done");
  assert.deepEqual(browser.problems, []);
});

test("Approve and Decline set the row's state at once (approved, declining)", { timeout: 90_000 }, async (t) => {
  const { browser, page } = await labSession(t, [
    { match: /order a potassium/i, name: "lab__order_test", arguments: { test_code: "K-PLASMA", priority: "urgent" } },
    { match: /order a sodium/i, name: "lab__order_test", arguments: { test_code: "NA-PLASMA", priority: "routine" } },
  ]);
  await recordActivityStates(page);
  await typeRequest(page, "Please order a potassium test");
  await approveArmed(page, { timeout: 20_000 });
  await page.getByTestId("confirm-approve").click();
  await page.waitForFunction(() => window.__states.some((s) => s.state === "done"), null, { timeout: 15_000 });
  await typeRequest(page, "Please order a sodium test");
  await page.getByTestId("confirm-dialog").waitFor({ state: "visible", timeout: 15_000 });
  await page.getByTestId("confirm-decline").click();
  await page.waitForFunction(() => window.__states.some((s) => s.state === "declined"), null, { timeout: 15_000 });
  const states = await page.evaluate(() => window.__states.map((s) => s.state));
  assert.ok(states.includes("approved"), `approved is a state (${states})`);
  assert.ok(states.includes("declining"), `declining is a state (${states})`);
  assert.ok(states.indexOf("approved") < states.indexOf("done"));
  assert.deepEqual(browser.problems, []);
});
