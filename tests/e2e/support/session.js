/**
 * The set-up most page tests share: a fake model, voxgate in front of it and a page open on
 * voxgate, each stopped when the test ends; and the MCP lab server's voxgate configuration
 * (tests/mcp/lab_server.py, official Python SDK, started by voxgate over stdio).
 */

import assert from "node:assert/strict";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { FakeUpstream } from "./fake-upstream.js";
import { ROOT, connectPage, openPage, startVoxgate } from "./harness.js";

/** The Python with the MCP SDK that scripts/test installs. */
export const PYTHON = process.env.VOXGATE_TEST_PYTHON || path.join(ROOT, ".venv-test", "bin", "python");

/**
 * A fake model, stopped after the test.
 * @param {import("node:test").TestContext} t
 * @param {object} [options] FakeUpstream's options (`rules`, …)
 */
export async function fakeModel(t, options) {
  const fake = new FakeUpstream(options);
  const upstreamUrl = await fake.start();
  t.after(() => fake.stop());
  return { fake, upstreamUrl };
}

/**
 * A fake model, voxgate with `toml` in front of it, and a page connected to voxgate whose session
 * has reached the fake model (its `session.update` arrived).
 * @param {import("node:test").TestContext} t
 * @param {{ rules?: Array<object>, toml?: string }} [options]
 */
export async function connectedSession(t, { rules, toml = "" } = {}) {
  const { fake, upstreamUrl } = await fakeModel(t, { rules });
  const voxgate = await startVoxgate({ upstreamUrl, toml });
  t.after(() => voxgate.stop());
  const browser = await openPage({ baseUrl: voxgate.baseUrl });
  t.after(() => browser.close());
  await connectPage(browser.page);
  // The page's socket opens before voxgate's upstream one: wait for the page's session.update.
  await fake.waitFor(() => fake.eventsOf("session.update").length > 0);
  return { fake, voxgate, browser, page: browser.page };
}

/**
 * voxgate's configuration for the MCP lab server with the tools `allow`, and the folder the server
 * writes its records to.
 * @param {string[]} allow
 */
export function labConfig(allow) {
  assert.ok(existsSync(PYTHON), `${PYTHON} is missing: run scripts/test to create the test venv`);
  const labDir = mkdtempSync(path.join(tmpdir(), "voxgate-e2e-lab-"));
  const toml = [
    "[mcp]",
    "connect_timeout_ms = 60000", // start-up waits for Python on a loaded machine
    "[mcp.servers.lab]",
    `command = [${JSON.stringify(PYTHON)}, ${JSON.stringify(path.join(ROOT, "tests", "mcp", "lab_server.py"))}]`,
    `env = { LAB_DIR = ${JSON.stringify(labDir)} }`,
    `allow = ${JSON.stringify(allow)}`,
    "",
  ].join("\n");
  return { toml, labDir };
}
