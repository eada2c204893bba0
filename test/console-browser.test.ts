// The web console end to end in a real browser (Chromium, headless, playwright-core) against
// the real server (the bundle, as `make run` starts it) with real sandboxes: sign in with a
// key (by keyboard), create a sandbox, type in its terminal, upload a file by drag and drop
// and read it back, snapshot and restore, switch the restored one's network, watch a new annotation appear on the ambient run,
// run a saved view and see its chart, sign out and find the session revoked. axe-core on
// every page (zero serious violations), no CSP violation, screenshots into docs/console/.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { PROJECT_DIR } from "../scripts/server-bundle.js";
import { assertAccessible, launchBrowser, screenshot } from "./support/browser.js";
import { type CrashRig, eventually, startCrashRig } from "./support/server-process.js";

const exec = promisify(execFile);
const LONG = 180_000;

describe("the web console in a real browser [pglite]", () => {
  const apiKey = `wrn_${randomBytes(32).toString("base64url")}`;
  let rig: CrashRig;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let base = "";
  const problems: string[] = [];
  let sandboxId = "";

  const api = (method: string, url: string, body?: unknown) => rig.server.api(method, url, body);
  const visit = async (pathname: string, heading: string | RegExp) => {
    await page.goto(`${base}${pathname}`);
    await page.getByRole("heading", { level: 1, name: heading }).waitFor({ timeout: LONG });
  };

  before(async () => {
    // `make test` builds the console first; run alone, this file builds it.
    if (!existsSync(path.join(PROJECT_DIR, "console", "dist", "index.html"))) {
      await exec("npx", ["vite", "build", "--config", "console/vite.config.ts", "--logLevel", "warn"], {
        cwd: PROJECT_DIR,
      });
    }
    rig = await startCrashRig("console", apiKey, (busyboxRef) => ({
      WARREN_DEFAULT_IMAGE: busyboxRef,
      WARREN_SANDBOX_MEMORY_MB: "256",
      WARREN_SANDBOX_POOL_SIZE: "0",
    }));
    await rig.server.start();
    base = `http://127.0.0.1:${rig.server.port}`;
    browser = await launchBrowser();
    context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    page = await context.newPage();
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    page.on("console", (message) => {
      if (message.type() === "error" && /Content Security Policy|Refused to/i.test(message.text())) {
        problems.push(`CSP: ${message.text()}`);
      }
    });
  });

  after(async () => {
    await browser?.close();
    await rig?.cleanup();
  });

  it("serves /console with a CSP and no inline script, hashed assets cached, deep links the index", async () => {
    const index = await fetch(`${base}/console/sandboxes/sbx-deep-link`);
    assert.equal(index.status, 200);
    const csp = index.headers.get("content-security-policy") ?? "";
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.doesNotMatch(csp, /script-src[^;]*unsafe-inline/);
    const html = await index.text();
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, "no inline script");
    const script = /src="(\/console\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    assert.ok(script, html);
    const asset = await fetch(`${base}${script}`, { headers: { "accept-encoding": "gzip" } });
    assert.equal(asset.status, 200);
    assert.equal(asset.headers.get("cache-control"), "public, max-age=31536000, immutable");
    assert.equal(index.headers.get("cache-control"), "no-cache");
    const missing = await fetch(`${base}/console/assets/nope.js`);
    assert.equal(missing.status, 404);
    assert.equal(((await missing.json()) as { code: string }).code, "not_found");
  });

  it("signs in by keyboard with a key it never stores, and the pages pass axe", async () => {
    await page.goto(`${base}/console`);
    await page.getByLabel("API key").waitFor({ timeout: LONG });
    await assertAccessible(page, "sign-in");
    await screenshot(page, "sign-in");
    // Keyboard only: the first tab stop is the key field; Enter submits.
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement?.id), "api-key");
    await page.keyboard.type(apiKey);
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { level: 1, name: "Sandboxes" }).waitFor({ timeout: LONG });
    const stored = await page.evaluate(() => ({
      cookie: document.cookie,
      local: JSON.stringify({ ...localStorage }),
      session: JSON.stringify({ ...sessionStorage }),
    }));
    assert.equal(stored.cookie, "", "the session cookie is HttpOnly");
    assert.ok(!JSON.stringify(stored).includes(apiKey), "the key is kept nowhere");
    const cookies = await context.cookies();
    const session = cookies.find((c) => c.name === "warren_console");
    assert.ok(session?.httpOnly && session.sameSite === "Strict", JSON.stringify(cookies));
    assert.notEqual(session.value, apiKey);
    await assertAccessible(page, "sandboxes (empty)");
  });

  it("creates a sandbox and types in its terminal", async () => {
    await page.getByRole("button", { name: "New sandbox" }).click();
    const form = page.getByRole("form", { name: "New sandbox" });
    await form.getByLabel("Name").fill("console-e2e");
    // The test image's command is a shell that ends at once without a terminal.
    await form.getByLabel("Command").fill("sleep 3600");
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/\/console\/sandboxes\/sbx-[0-9a-f]{40}$/, { timeout: LONG });
    sandboxId = /sbx-[0-9a-f]{40}/.exec(page.url())?.[0] ?? "";
    await page.getByTestId("sandbox-state").filter({ hasText: "running" }).waitFor({ timeout: LONG });
    await assertAccessible(page, "sandbox detail");
    await screenshot(page, "sandbox");
    await page.getByRole("link", { name: "Terminal" }).click();
    await page.getByTestId("terminal-status").filter({ hasText: "connected" }).waitFor({ timeout: LONG });
    await page.locator(".xterm-helper-textarea").focus();
    await page.keyboard.type("echo console-$((6*7))\n");
    await eventually(
      "the command's output in the terminal",
      async () => ((await page.locator(".xterm-rows").textContent()) ?? "").includes("console-42"),
      LONG,
    );
    await assertAccessible(page, "terminal");
    await screenshot(page, "terminal");
  });

  it("uploads a file by drag and drop and reads it back", async () => {
    await page.getByRole("link", { name: "Files" }).click();
    await page.getByRole("heading", { level: 1 }).waitFor();
    await page.getByText("Drop files here").waitFor({ timeout: LONG });
    await page.evaluate(() => {
      const data = new DataTransfer();
      data.items.add(new File(["hello from the browser\n"], "dropped.txt", { type: "text/plain" }));
      const zone = document.querySelector(".dropzone") as HTMLElement;
      zone.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
    });
    await page.getByRole("button", { name: "dropped.txt", exact: true }).click({ timeout: LONG });
    await page.getByTestId("file-view").filter({ hasText: "hello from the browser" }).waitFor({ timeout: LONG });
    const read = await fetch(`${base}/v1/sandboxes/${sandboxId}/files?path=/workspace/dropped.txt`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    assert.equal(await read.text(), "hello from the browser\n");
    await assertAccessible(page, "files");
    await screenshot(page, "files");
  });

  it("snapshots the sandbox and restores the snapshot into a new one", async () => {
    await page.getByRole("link", { name: "Overview" }).click();
    await page.getByRole("button", { name: "Snapshot" }).click();
    await page.getByLabel("Command of a restored sandbox").fill("sleep 3600");
    const restore = page.getByRole("button", { name: /^Restore / }).first();
    await restore.waitFor({ timeout: LONG });
    await restore.click();
    await page.waitForURL((url) => /sbx-[0-9a-f]{40}$/.test(url.pathname) && !url.pathname.endsWith(sandboxId), {
      timeout: LONG,
    });
    await page.getByTestId("sandbox-state").filter({ hasText: "running" }).waitFor({ timeout: LONG });
    const childId = /sbx-[0-9a-f]{40}/.exec(page.url())?.[0] ?? "";
    await rig.server.waitFor(childId, "running");
    const child = await api("GET", `/v1/sandboxes/${childId}`);
    assert.ok(String((child.body.sandbox as { snapshot_id?: string }).snapshot_id).startsWith("snp-"), child.raw);
    const file = await fetch(`${base}/v1/sandboxes/${childId}/files?path=/workspace/dropped.txt`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    assert.equal(await file.text(), "hello from the browser\n", "the restored sandbox holds the uploaded file");
    // The network switch, confirmed in its dialog, with the receipt shown.
    await page.getByLabel("Network mode").selectOption("none");
    await page.getByRole("button", { name: "Switch network" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Switch network" }).click();
    await page.getByRole("status").filter({ hasText: "Network none: requested" }).waitFor({ timeout: LONG });
    await eventually(
      "the switch applied",
      async () =>
        ((await api("GET", `/v1/sandboxes/${childId}`)).body.sandbox as { network_access: string }).network_access ===
        "none",
      LONG,
    );
  });

  it("opens the ambient run and shows a new annotation live", async () => {
    await page.goto(`${base}/console/sandboxes/${sandboxId}`);
    await page.getByRole("link", { name: "Ambient run" }).click({ timeout: LONG });
    await page.getByTestId("tail-status").filter({ hasText: "live" }).waitFor({ timeout: LONG });
    const runId = /run_[0-9a-z]+/.exec(page.url())?.[0] ?? "";
    const schema = await api("POST", "/v1/annotation-schemas", {
      name: "review",
      json_schema: JSON.stringify({ type: "object", properties: { verdict: { type: "string" } } }),
    });
    assert.equal(schema.status, 200, schema.raw);
    const note = await api("POST", "/v1/annotations", {
      run_id: runId,
      schema_name: "review",
      payload_json: JSON.stringify({ verdict: "looks-right-from-the-console" }),
    });
    assert.equal(note.status, 200, note.raw);
    await page
      .getByTestId("annotations")
      .filter({ hasText: "looks-right-from-the-console" })
      .waitFor({ timeout: LONG });
    await assertAccessible(page, "run");
    await screenshot(page, "run");
  });

  it("runs a saved view and draws its chart", async () => {
    const view = await api("PUT", "/v1/data-views/events-by-name", {
      description: "events by name",
      spec: {
        type: "sql.v1",
        sql: "SELECT name, count(*) AS n FROM events GROUP BY name ORDER BY name",
        render: { chart: "bar", x: "name", y: "n" },
      },
    });
    assert.equal(view.status, 200, view.raw);
    await visit("/console/views", "Data views");
    await page.getByRole("button", { name: "Run events-by-name" }).click();
    await page.getByTestId("chart-bar").waitFor({ timeout: LONG });
    assert.ok((await page.locator("[data-testid=chart-bar] rect").count()) > 0);
    await assertAccessible(page, "views");
    await screenshot(page, "view-chart");
    await visit("/console/sql", "SQL");
    await page.getByRole("button", { name: /^Run/ }).click();
    await page.getByTestId("result-table").waitFor({ timeout: LONG });
    await assertAccessible(page, "sql");
    await screenshot(page, "sql");
  });

  it("passes axe on the registry pages and lists the session with the keys", async () => {
    for (const [pathname, heading] of [
      ["/console/runs", "Runs"],
      ["/console/schemas", "Annotation schemas"],
      ["/console/volumes", "Volumes"],
      ["/console/secrets", "Secrets"],
      ["/console/workloads", "Workloads"],
      ["/console/usage", "Usage"],
      ["/console/keys", "API keys and console sessions"],
    ] as const) {
      await visit(pathname, heading);
      await page.waitForLoadState("networkidle");
      await assertAccessible(page, pathname);
    }
    await page.getByText("console session").first().waitFor({ timeout: LONG });
    await screenshot(page, "keys");
    await visit("/console/sandboxes", "Sandboxes");
    await page.getByRole("link", { name: "console-e2e" }).waitFor({ timeout: LONG });
    await screenshot(page, "sandboxes");
  });

  it("moves through the main navigation by keyboard", async () => {
    await visit("/console/sandboxes", "Sandboxes");
    for (let i = 0; i < 30; i++) {
      await page.keyboard.press("Tab");
      const text = await page.evaluate(() => document.activeElement?.textContent ?? "");
      if (text === "Runs") break;
    }
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { level: 1, name: "Runs" }).waitFor({ timeout: LONG });
  });

  it("signs out, and the session is revoked", async () => {
    const cookie = (await context.cookies()).find((c) => c.name === "warren_console");
    assert.ok(cookie);
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("API key").waitFor({ timeout: LONG });
    const who = await fetch(`${base}/v1/whoami`, { headers: { cookie: `warren_console=${cookie.value}` } });
    assert.equal(who.status, 401);
    const org = ((await api("GET", "/v1/whoami")).body.organization as { id: string }).id;
    const keys = await api("GET", `/v1/admin/organizations/${org}/api-keys`);
    const sessions = (keys.body.api_keys as { session_of_key_id: string; revoked_at: string }[]).filter(
      (k) => k.session_of_key_id !== "",
    );
    assert.ok(sessions.length > 0 && sessions.every((s) => s.revoked_at !== ""), keys.raw);
    assert.deepEqual(problems, [], "no page error and no CSP violation");
  });
});
