// The console terminal's keystroke echo against the SSH gateway's (issue 28: p50 within 5 ms),
// on one real runc sandbox of the real server (the `make run` bundle, SSH gateway on):
//   console: a key pressed in headless Chromium (playwright-core) in the terminal page (xterm.js
//     over the exec stream's WebSocket, a PTY shell) until its echo is drawn in xterm's rows;
//   ssh: the same key written on an interactive PTY shell of the SSH gateway (ssh2 client,
//     password auth with the API key) until its echo arrives.
// Both echo through the same busybox sh on a PTY; samples alternate in blocks of 10. The
// console's side includes the browser driver's round trip (playwright's command to Chromium
// and the poll that sees the drawn row), reported separately as `driverRoundTrip`.
// Usage: node --import tsx bench/console-terminal.ts [--keys 100]
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { Client } from "ssh2";
import { CHROMIUM } from "../test/support/browser.js";
import { pushTestImages } from "../test/support/registry.js";
import { call } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { recordResults } from "./lib/results.js";
import { openBenchRig } from "./lib/rig.js";
import { freePort } from "./lib/server.js";
import { percentile } from "./lib/stats.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const KEYS = Number(benchArgs().get("keys") ?? 100);
const BLOCK = 10;
const summary = (values: number[]) => ({
  n: values.length,
  p50: Math.round(percentile(values, 50) * 100) / 100,
  p90: Math.round(percentile(values, 90) * 100) / 100,
});

const rig = await openBenchRig("console-terminal", ROOT);
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
try {
  await pushTestImages(rig.registry);
  const server = await rig.start({ WARREN_SSH_LISTEN: `127.0.0.1:${await freePort()}`, WARREN_SANDBOX_POOL_SIZE: "0" });
  const api = async (method: string, url: string, body?: unknown) => {
    const response = await call<Record<string, unknown>>(server.baseUrl, rig.key, method, url, body);
    if (response.status >= 300)
      throw new Error(`${method} ${url} -> ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  const created = (await api("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none" })) as {
    id: string;
  };
  const got = (await api("GET", `/v1/sandboxes/${created.id}?wait_state=running&wait_timeout_seconds=25`)) as {
    sandbox: { ssh?: { host: string; port: number; user: string } };
  };
  const ssh = got.sandbox.ssh;
  if (!ssh) throw new Error("the sandbox has no SSH connection");

  // The SSH side: one interactive PTY shell, a key written, its echo awaited.
  const client = new Client();
  await new Promise<void>((resolve, reject) => {
    client.once("ready", () => resolve()).once("error", reject);
    client.connect({ host: ssh.host, port: ssh.port, username: ssh.user, password: rig.key, readyTimeout: 60_000 });
  });
  const shell = await new Promise<import("ssh2").ClientChannel>((resolve, reject) =>
    client.shell({ term: "xterm", rows: 24, cols: 80 }, (error, channel) => (error ? reject(error) : resolve(channel))),
  );
  let sshSeen = 0;
  let sshWaiter: (() => void) | null = null;
  shell.on("data", (data: Buffer) => {
    for (const byte of data) if (byte === 0x78) sshSeen++;
    sshWaiter?.();
  });
  const sshKey = async () => {
    const want = sshSeen + 1;
    const started = performance.now();
    await new Promise<void>((resolve) => {
      sshWaiter = () => sshSeen >= want && resolve();
      shell.write("x");
    });
    return performance.now() - started;
  };

  // The console's side: signed in by its cookie, the terminal page open and connected.
  const signIn = await fetch(`${server.baseUrl}/v1/console/sessions`, {
    method: "POST",
    headers: { authorization: `Bearer ${rig.key}` },
  });
  const [name, value] = ((signIn.headers.get("set-cookie") ?? "").split(";")[0] ?? "").split("=") as [string, string];
  const context = await browser.newContext();
  await context.addCookies([{ name, value, url: server.baseUrl }]);
  const page = await context.newPage();
  await page.goto(`${server.baseUrl}/console/sandboxes/${created.id}/terminal`);
  await page.getByTestId("terminal-status").filter({ hasText: "connected" }).waitFor({ timeout: 120_000 });
  await page.locator(".xterm-helper-textarea").focus();
  // The x's typed on the prompt's line (after the last "# "), as xterm draws them.
  const typedXs = (): number => {
    const text = document.querySelector(".xterm-rows")?.textContent ?? "";
    return text.slice(text.lastIndexOf("# ") + 2).split("x").length - 1;
  };
  const consoleKey = async () => {
    const before = await page.evaluate(typedXs);
    const started = performance.now();
    await page.keyboard.type("x");
    await page.waitForFunction(
      (n) => {
        const text = document.querySelector(".xterm-rows")?.textContent ?? "";
        return text.slice(text.lastIndexOf("# ") + 2).split("x").length - 1 > n;
      },
      before,
      { polling: "raf", timeout: 60_000 },
    );
    return performance.now() - started;
  };
  const driverRoundTrip = async () => {
    const started = performance.now();
    await page.evaluate(() => 1);
    return performance.now() - started;
  };

  await sshKey();
  await consoleKey();
  const times = { console: [] as number[], ssh: [] as number[], driver: [] as number[] };
  for (let i = 0; i < KEYS; i += BLOCK) {
    const blocks = [
      async () => {
        for (let j = 0; j < BLOCK; j++) times.console.push(await consoleKey());
      },
      async () => {
        for (let j = 0; j < BLOCK; j++) times.ssh.push(await sshKey());
      },
      async () => {
        for (let j = 0; j < BLOCK; j++) times.driver.push(await driverRoundTrip());
      },
    ];
    if ((i / BLOCK) % 2 === 1) blocks.reverse();
    for (const block of blocks) await block();
    // A fresh line now and then, so the shell's line stays short (Ctrl-U on both).
    shell.write("\u0015");
    await page.keyboard.press("Control+U");
    await page.waitForFunction(
      () => {
        const text = document.querySelector(".xterm-rows")?.textContent ?? "";
        return text.slice(text.lastIndexOf("# ") + 2).split("x").length - 1 === 0;
      },
      undefined,
      { polling: "raf", timeout: 60_000 },
    );
  }
  client.end();
  const consoleSummary = summary(times.console);
  const sshSummary = summary(times.ssh);
  await recordResults("console-terminal.json", {
    keys: KEYS,
    consoleEcho: consoleSummary,
    sshEcho: sshSummary,
    driverRoundTrip: summary(times.driver),
    target: "console p50 within 5 ms of the SSH gateway's",
    p50DifferenceMs: Math.round((consoleSummary.p50 - sshSummary.p50) * 100) / 100,
    pass: consoleSummary.p50 - sshSummary.p50 <= 5,
  });
} finally {
  await browser.close();
  await rig.close();
}
process.exit(0);
