/**
 * An MCP tool's confirmation in the page, like any other: the fake model calls `lab__order_test`, a
 * write tool of a real MCP server (tests/mcp/lab_server.py, official Python SDK, started by voxgate
 * over stdio). The page shows the confirmation dialog with the exact arguments; Approve → the server
 * records the order and the page shows done; Decline → declined, and the server recorded nothing.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { activityOf, connectPage, openPage, startVoxgate, typeRequest, waitUntil } from "./support/harness.js";
import { fakeModel, labConfig } from "./support/session.js";

const ORDER_ARGS = { test_code: "K-PLASMA", priority: "urgent" };
const RULES = [{ match: /order a potassium/i, name: "lab__order_test", arguments: ORDER_ARGS }];

/** JSON Lines the lab server wrote. */
function records(dir, name) {
  const file = path.join(dir, name);
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8").split("\n").filter(Boolean).map((line) => JSON.parse(line));
}

async function orderDialog(t) {
  const { toml, labDir } = labConfig(["order_test"]);
  const { fake, upstreamUrl } = await fakeModel(t, { rules: RULES });
  const voxgate = await startVoxgate({ upstreamUrl, toml });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  const { page } = browser;
  await connectPage(page);
  await typeRequest(page, "Please order a potassium test, urgent");
  const dialog = page.getByTestId("confirm-dialog");
  await dialog.waitFor({ state: "visible", timeout: 15_000 });
  const call = fake.calls.find((c) => c.name === "lab__order_test");
  assert.ok(call, "the fake model made the call");
  return { fake, labDir, browser, page, call };
}

async function activityReaches(page, state) {
  await page.waitForFunction((wanted) => {
    const item = document.querySelector("[data-testid=activity-item][data-tool=lab__order_test]");
    return item && item.dataset.state === wanted;
  }, state, { timeout: 15_000 });
  return activityOf(page, "lab__order_test");
}

test("an MCP write tool asks in the page; approve → the server records the order", { timeout: 90_000 }, async (t) => {
  const { fake, labDir, browser, page, call } = await orderDialog(t);
  const raw = await page.getByTestId("confirm-raw").textContent();
  assert.deepEqual(JSON.parse(raw), ORDER_ARGS, "the exact request is shown");
  assert.equal(await page.evaluate(() => document.querySelector("[data-testid=confirm-dialog]").dataset.callId), call.call_id);
  assert.equal((await activityOf(page, "lab__order_test")).state, "awaiting_confirmation");
  assert.deepEqual(records(labDir, "orders.jsonl"), [], "nothing is written before the decision");

  await page.getByTestId("confirm-approve").click();
  await activityReaches(page, "done");
  const orders = await waitUntil(() => records(labDir, "orders.jsonl").length > 0 && records(labDir, "orders.jsonl"), { message: "the order on the server" });
  assert.deepEqual(orders, [ORDER_ARGS]);
  const output = await fake.waitFor(() => fake.outputFor(call.call_id));
  assert.equal(output.output.text, "Ordered K-PLASMA (urgent).");
  assert.deepEqual(browser.problems, []);
});

test("an MCP write tool declined in the page writes nothing", { timeout: 90_000 }, async (t) => {
  const { fake, labDir, page, call } = await orderDialog(t);
  await page.getByTestId("confirm-decline").click();
  const item = await activityReaches(page, "declined");
  assert.equal(item.code, "user_declined");
  const output = await fake.waitFor(() => fake.outputFor(call.call_id));
  assert.equal(output.output.error.code, "user_declined");
  assert.deepEqual(records(labDir, "calls.jsonl"), [], "the call never reached the server");
});
