/**
 * The page itself: served from the binary under a strict CSP, loads with no errors, connects,
 * converses by text (both sides in the transcript), shows errors in an alert region, carries a token
 * in the subprotocol, and offers Reconnect after the server drops the session. The model is a fake
 * realtime upstream (support/fake-upstream.js).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { connectPage, openPage, screenshot, startVoxgate, typeRequest } from "./support/harness.js";
import { connectedSession, fakeModel } from "./support/session.js";

const JWT_SECRET = "e2e-test-secret-that-is-long-enough-0123456789";
const ADMIN_TOKEN = "e2e-admin-token-0123456789abcdef";

/**
 * An HS256 JWT.
 * @param {object} claims
 * @param {string} secret
 */
function jwt(claims, secret) {
  const part = (obj) => Buffer.from(JSON.stringify(obj)).toString("base64url");
  const body = `${part({ alg: "HS256", typ: "JWT" })}.${part(claims)}`;
  return `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`;
}

/** @param {import("playwright-core").Page} page */
const statusOf = (page) => page.evaluate(() => {
  const el = document.querySelector("[data-testid=connection-status]");
  return { state: el.dataset.state, text: el.textContent.trim() };
});

test("the page and its modules are served with a strict CSP and load without errors", { timeout: 60_000 }, async (t) => {
  const { upstreamUrl } = await fakeModel(t);
  const voxgate = await startVoxgate({ upstreamUrl });
  t.after(() => voxgate.stop());
  const page = await fetch(`${voxgate.baseUrl}/`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get("content-type"), /^text\/html/);
  const csp = page.headers.get("content-security-policy") || "";
  assert.match(csp, /default-src 'self'/);
  assert.match(csp, /script-src 'self'(;|$)/);
  assert.match(csp, /connect-src 'self' ws: wss:/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  for (const file of [
    "voxgate-client.js", "voxgate-protocol.js", "voxgate-server-events.js", "voxgate-tool-calls.js", "voxgate-microphone.js",
    "voxgate-audio.js", "pcm-capture-worklet.js", "app.js", "dom.js", "errors-view.js", "audio-controls.js",
    "transcript-view.js", "activity-view.js", "sources-view.js", "confirm-dialog.js", "labels.js",
  ]) {
    const res = await fetch(`${voxgate.baseUrl}/assets/${file}`);
    assert.equal(res.status, 200, file);
    assert.equal(res.headers.get("content-type"), "text/javascript; charset=utf-8", file);
    assert.equal(res.headers.get("cache-control"), "no-cache", file);
  }

  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page: tab } = browser;
  await tab.waitForFunction(() => typeof window.voxgate === "object");
  assert.deepEqual(await statusOf(tab), { state: "idle", text: "Not connected" });
  // Accessible names for every control a user needs.
  for (const label of ["Session token (optional — a ticket or sign-in token, if your site uses them)", "Type a request"]) {
    assert.equal(await tab.getByLabel(label).count(), 1, label);
  }
  assert.equal(await tab.getByRole("button", { name: "Connect", exact: true }).isEnabled(), true);
  assert.equal(await tab.getByRole("button", { name: "Start microphone", exact: true }).isDisabled(), true, "mic needs a session");
  assert.equal(await tab.getByRole("alert").count(), 1, "an alert region for errors");
  assert.equal(await tab.getByRole("meter", { name: "Microphone level" }).count(), 1);
  assert.equal(await tab.getByTestId("confirm-dialog").isVisible(), false);
  await screenshot(tab, "page-idle");
  assert.deepEqual(browser.problems, [], "no page errors, no CSP violations");
});

test("connect, a typed exchange in the transcript, disconnect", { timeout: 60_000 }, async (t) => {
  const { fake, browser, page } = await connectedSession(t);
  await page.waitForFunction(() => /tools? available/.test(document.querySelector("[data-testid=connection-status]").textContent));
  const tools = await page.evaluate(() => window.voxgate.tools.map((tool) => tool.name));
  assert.ok(tools.includes("create_calendar_event"), `session.ready lists the tools (${tools})`);
  assert.equal(await page.getByRole("button", { name: "Start microphone", exact: true }).isEnabled(), true);

  await typeRequest(page, "Hello, can you hear me?");
  await page.locator("[data-testid=transcript-entry][data-role=user]", { hasText: "Hello, can you hear me?" }).waitFor();
  const answer = page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").first();
  await answer.waitFor({ timeout: 15_000 });
  assert.equal(await answer.getByTestId("transcript-text").textContent(), "Hello from the fake model.");
  assert.equal(await page.getByTestId("text-input").inputValue(), "", "the text box is cleared after sending");
  // What the page sent reached the model: the client's session settings and the typed message.
  const created = fake.eventsOf("conversation.item.create").find((e) => e.item && e.item.type === "message");
  assert.deepEqual(created.item.content, [{ type: "input_text", text: "Hello, can you hear me?" }]);
  const update = fake.eventsOf("session.update").find((e) => e.session && e.session.audio);
  assert.ok(update, "the client's session.update reached the model");
  assert.deepEqual(update.session.audio.input.format, { type: "audio/pcm", rate: 24000 });
  assert.ok(fake.urls[0].includes("model="), `voxgate asked for a model (${fake.urls[0]})`);
  await screenshot(page, "page-conversation");

  await page.getByTestId("disconnect-button").click();
  await page.waitForFunction(() => document.querySelector("[data-testid=connection-status]").dataset.state === "closed");
  assert.equal((await statusOf(page)).text, "Disconnected");
  assert.equal(await page.getByTestId("reconnect-button").isVisible(), false, "no Reconnect after a deliberate disconnect");
  assert.equal(await page.getByTestId("error-message").count(), 0, "no error for a deliberate disconnect");
  assert.deepEqual(browser.problems, []);
});

test("errors from the server appear in the alert region", { timeout: 60_000 }, async (t) => {
  const { browser, page } = await connectedSession(t);
  // A decision for a call that does not exist: voxgate answers with the standard error event.
  await page.evaluate(() => window.voxgate.confirm("call_does_not_exist", true));
  const error = page.locator("[role=alert] [data-testid=error-message]").first();
  await error.waitFor();
  assert.equal(await error.getAttribute("data-code"), "voxgate_not_awaiting_confirmation");
  assert.ok((await error.textContent()).length > 10, "the error has words");
  await screenshot(page, "page-error");
  await error.getByTestId("error-dismiss").click();
  assert.equal(await page.getByTestId("error-message").count(), 0, "errors can be dismissed");
  assert.equal((await statusOf(page)).state, "open", "the session goes on");
});

/**
 * The fake model, voxgate admitting JWTs (and the admin token), and the page on it.
 * @param {import("node:test").TestContext} t
 */
async function jwtPage(t) {
  const { fake, upstreamUrl } = await fakeModel(t);
  const voxgate = await startVoxgate({
    upstreamUrl, toml: `[auth]\nmode = "jwt"\njwt_secret = "${JWT_SECRET}"\nadmin_token = "${ADMIN_TOKEN}"\n`,
  });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  return { fake, voxgate, browser, page: browser.page };
}

test("a token travels in the subprotocol; a bad one is refused with a clear error", { timeout: 60_000 }, async (t) => {
  const { fake, voxgate, browser, page } = await jwtPage(t);

  await page.getByTestId("token-input").fill(jwt({ sub: "dr-who", roles: ["clinician"], exp: 1 }, JWT_SECRET)); // expired
  await page.getByTestId("connect-button").click();
  await page.waitForFunction(() => document.querySelector("[data-testid=connection-status]").dataset.state === "closed");
  const refused = page.locator("[data-testid=error-message][data-code=connect_failed]");
  await refused.waitFor();
  assert.match(await refused.textContent(), /could not connect/i);
  assert.equal(await page.getByTestId("reconnect-button").isVisible(), true, "Reconnect is offered");
  await screenshot(page, "page-refused");

  const token = jwt({ sub: "dr-who", roles: ["clinician"], exp: Math.floor(Date.now() / 1000) + 600 }, JWT_SECRET);
  await page.getByTestId("token-input").fill(token);
  await connectPage(page);
  assert.equal(await page.evaluate(() => window.voxgate.ws.protocol), "realtime", "voxgate selects `realtime`, never the token");
  assert.equal(fake.connections, 1, "the refused attempt never reached the model");
  assert.ok(!voxgate.log().includes(token), "the token is not logged");
  assert.ok(!JSON.stringify(fake.headers).includes(token), "the token is not passed upstream");
});

test("a server restart drops the session with a reason; the page reconnects by itself", { timeout: 90_000 }, async (t) => {
  const { upstreamUrl } = await fakeModel(t);
  let voxgate = await startVoxgate({ upstreamUrl });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);

  const addr = voxgate.addr;
  assert.equal(await voxgate.stop(), 0, "voxgate drains and exits 0 on SIGTERM");
  await page.waitForFunction(() => document.querySelector("[data-testid=connection-status]").dataset.state === "closed");
  const code = await page.evaluate(() => {
    const messages = [...document.querySelectorAll("[data-testid=error-message]")].map((m) => m.dataset.code);
    return messages;
  });
  assert.ok(code.includes("closing"), `the drain is announced (voxgate.session.closing with reconnect: true) (${code})`);
  await screenshot(page, "page-dropped");

  // The page retries with back-off (closing said reconnect: true); the server coming back is enough.
  voxgate = await startVoxgate({ upstreamUrl, listen: addr });
  await page.waitForFunction(
    () => document.querySelector("[data-testid=connection-status]").dataset.state === "open",
    null,
    { timeout: 40_000 },
  );
  assert.equal(await page.getByTestId("reconnect-button").isVisible(), false);
  await screenshot(page, "page-reconnected");
});

test("Disconnect forgets the user: token, Reconnect's parameters and the conversation are cleared", { timeout: 60_000 }, async (t) => {
  const { fake, voxgate, browser, page } = await jwtPage(t);
  // Dr A on a shared workstation: a sign-in token, a conversation, then Disconnect.
  const tokenA = jwt({ sub: "dr-a", roles: ["clinician"], exp: Math.floor(Date.now() / 1000) + 600 }, JWT_SECRET);
  await connectPage(page, { token: tokenA });
  await typeRequest(page, "Patient Jane Doe has a cough");
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").first().waitFor({ timeout: 15_000 });
  // A request begun and not sent: it may name a patient too.
  await page.getByTestId("text-input").fill("Book Jane Doe's");
  await page.getByTestId("disconnect-button").click();
  await page.waitForFunction(() => document.querySelector("[data-testid=connection-status]").dataset.state === "closed");
  assert.equal(await page.getByTestId("token-input").inputValue(), "", "the token field is emptied");
  assert.equal(await page.getByTestId("text-input").inputValue(), "", "the text typed and not sent is emptied");
  assert.equal(await page.locator("[data-testid=transcript-entry]").count(), 0, "the conversation leaves the screen");
  assert.doesNotMatch(await page.locator("main").textContent(), /Jane/);
  assert.equal(await page.getByTestId("reconnect-button").isVisible(), false);

  // Dr B presses Connect with nothing typed: refused (a JWT deployment), never Dr A's session.
  await page.getByTestId("connect-button").click();
  await page.locator("[data-testid=error-message][data-code=connect_failed]").waitFor();
  assert.equal((await statusOf(page)).state, "closed");
  assert.equal(fake.connections, 1, "no second session reached the model");
  // Chromium logs the refused handshake itself.
  assert.deepEqual(browser.problems.filter((p) => !/WebSocket connection .* failed/.test(p)), []);
});

test("disconnect(reason) closes the socket even with a long non-ASCII reason", { timeout: 60_000 }, async (t) => {
  const { browser, page } = await connectedSession(t);
  // 100 "é" are 100 UTF-16 units but 200 UTF-8 bytes: over the 123 bytes a close reason may carry.
  await page.evaluate(() => window.voxgate.disconnect("é".repeat(100)));
  await page.waitForFunction(() => document.querySelector("[data-testid=connection-status]").dataset.state === "closed", null, { timeout: 5_000 });
  assert.equal(await page.evaluate(() => window.voxgate.ws), null, "the socket is gone");
  assert.deepEqual(browser.problems, []);
});

/**
 * End the page's session as an administrator would (`DELETE /admin/sessions/{id}`: a close the
 * user did not ask for, with `reconnect: false`); resolves once the page shows it closed.
 * @param {import("playwright-core").Page} page
 * @param {{baseUrl: string}} voxgate
 */
async function adminClose(page, voxgate) {
  const id = await page.evaluate(() => window.voxgate.sessionId);
  assert.ok(id, "the session has an id");
  const res = await fetch(`${voxgate.baseUrl}/admin/sessions/${encodeURIComponent(id)}`, {
    method: "DELETE", headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  assert.equal(res.status, 204);
  await page.waitForFunction(() => document.querySelector("[data-testid=connection-status]").dataset.state === "closed");
}

test("after a close the user did not ask for, Connect empties the unsent text and Disconnect still forgets the user", { timeout: 90_000 }, async (t) => {
  const { fake, voxgate, browser, page } = await jwtPage(t);
  const tokenA = jwt({ sub: "dr-a", roles: ["clinician"], exp: Math.floor(Date.now() / 1000) + 600 }, JWT_SECRET);
  await connectPage(page, { token: tokenA });
  await page.waitForFunction(() => window.voxgate.sessionId);

  // The session is ended for Dr A, a request half typed; Connect starts a new one without it.
  await page.getByTestId("text-input").fill("Book Jane Doe's");
  await adminClose(page, voxgate);
  await page.getByTestId("reconnect-button").waitFor();
  await connectPage(page);
  assert.equal(await page.getByTestId("text-input").inputValue(), "", "Connect empties the text typed and not sent");
  await page.waitForFunction(() => window.voxgate.sessionId);

  // Ended again, mid-conversation: Dr A leaves with Disconnect, though the session is already closed.
  await typeRequest(page, "Patient Jane Doe has a cough");
  await page.locator("[data-testid=transcript-entry][data-role=assistant][data-final=true]").first().waitFor({ timeout: 15_000 });
  await page.getByTestId("text-input").fill("Book Jane Doe's");
  await adminClose(page, voxgate);
  await page.getByTestId("reconnect-button").waitFor();
  const disconnect = page.getByRole("button", { name: "Disconnect", exact: true });
  assert.equal(await disconnect.isEnabled(), true, "Disconnect is usable while closed");
  await disconnect.click();
  assert.equal(await page.getByTestId("token-input").inputValue(), "", "the token field is emptied");
  assert.equal(await page.getByTestId("text-input").inputValue(), "", "the unsent text is emptied");
  assert.equal(await page.locator("[data-testid=transcript-entry]").count(), 0, "the conversation leaves the screen");
  assert.doesNotMatch(await page.locator("main").textContent(), /Jane/);
  assert.equal(await page.getByTestId("reconnect-button").isVisible(), false, "no Reconnect with the forgotten token");
  assert.equal(await disconnect.isDisabled(), true, "nothing left to forget");
  assert.equal((await statusOf(page)).text, "Disconnected");

  // Dr B presses Connect with nothing typed: refused (a JWT deployment), never Dr A's session.
  const connections = fake.connections;
  await page.getByTestId("connect-button").click();
  await page.locator("[data-testid=error-message][data-code=connect_failed]").waitFor();
  assert.equal((await statusOf(page)).state, "closed");
  assert.equal(fake.connections, connections, "no new session reached the model");
  assert.deepEqual(browser.problems.filter((p) => !/WebSocket connection .* failed/.test(p)), []);
});
