// The web console in headless Chromium (Debian's, through playwright-core) against the real
// server (the `make run` bundle, no sandbox runtime: these pages need none), issue 28:
//   first load of /console: the JavaScript it fetches, compressed (<= 250 KB), and the time
//     from navigation to an interactive page (the sign-in field ready; then, signed in, the
//     sandboxes list drawn) (<= 1 s);
//   a run of 100,000 events (annotations written through the API first): the time from
//     navigation until the first events are drawn and until all are (<= 1.5 s), and the
//     frame rate of scrolling its virtualized timeline (60 frames per second).
// The terminal's keystroke echo against the SSH gateway's is not measured here yet.
// Usage: node --import tsx bench/console.ts [--loads 5] [--events 100000] [--concurrency 32]
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { CHROMIUM } from "../test/support/browser.js";
import { api } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { recordResults } from "./lib/results.js";
import { freePort, startServer } from "./lib/server.js";
import { percentile } from "./lib/stats.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const LOADS = Number(args.get("loads") ?? 5);
const EVENTS = Number(args.get("events") ?? 100_000);
const CONCURRENCY = Number(args.get("concurrency") ?? 32);
const TARGETS = { firstLoadJsGzipKb: 250, interactiveMs: 1000, runOpenMs: 1500, scrollFps: 60 };

const tmp = await mkdtemp(path.join(os.tmpdir(), "warren-bench-console-"));
const key = `wrn_${randomBytes(32).toString("base64url")}`;
await writeFile(path.join(tmp, "no-runtime"), "");
const server = await startServer(
  {
    root: ROOT,
    port: await freePort(),
    logFile: path.join(tmp, "server.log"),
    env: {
      WARREN_DATA_DIR: path.join(tmp, "data"),
      // A root under a file: no sandbox runtime is opened (these pages need none).
      WARREN_RUNTIME_ROOT: path.join(tmp, "no-runtime", "runtime"),
      WARREN_BOOTSTRAP_API_KEY: key,
      WARREN_SANDBOX_POOL_SIZE: "0",
      WARREN_LOG_LEVEL: "warn",
    },
  },
  300_000,
);
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
const results: Record<string, unknown> = { targets: TARGETS };
const summary = (values: number[]) => ({
  n: values.length,
  p50: Math.round(percentile(values, 50)),
  max: Math.round(Math.max(...values)),
});
try {
  const base = server.baseUrl;
  // Signed in once; each load then gets a fresh context holding only the session cookie.
  const signIn = await fetch(`${base}/v1/console/sessions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}` },
  });
  const cookie = (signIn.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
  const [cookieName, cookieValue] = cookie.split("=") as [string, string];

  const jsGzipBytes: number[] = [];
  const signInReadyMs: number[] = [];
  const listReadyMs: number[] = [];
  for (let i = 0; i < LOADS; i++) {
    const fresh = await browser.newContext();
    const page = await fresh.newPage();
    let js = 0;
    page.on("requestfinished", (request) => {
      if (request.url().endsWith(".js")) void request.sizes().then((sizes) => (js += sizes.responseBodySize));
    });
    await page.goto(`${base}/console`);
    await page.getByLabel("API key").waitFor();
    signInReadyMs.push(await page.evaluate(() => performance.now()));
    await page.waitForLoadState("networkidle");
    jsGzipBytes.push(js);
    await fresh.addCookies([{ name: cookieName, value: cookieValue, url: base }]);
    await page.goto(`${base}/console/sandboxes`);
    await page.getByText("No sandboxes yet").waitFor();
    listReadyMs.push(await page.evaluate(() => performance.now()));
    await fresh.close();
  }
  results.firstLoad = {
    jsGzipKb: Math.round((Math.max(...jsGzipBytes) / 1024) * 10) / 10,
    signInInteractiveMs: summary(signInReadyMs),
    sandboxesListDrawnMs: summary(listReadyMs),
  };

  // A run of EVENTS annotations, written CONCURRENCY at a time.
  await api(base, key, "POST", "/v1/annotation-schemas", {
    name: "bench",
    json_schema: JSON.stringify({ type: "object" }),
  });
  const run = await api<{ run: { id: string } }>(base, key, "POST", "/v1/runs", { label: "console-bench" });
  const runId = run.run.id;
  let next = 0;
  const writeStarted = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < EVENTS) {
        const n = next++;
        await api(base, key, "POST", "/v1/annotations", {
          run_id: runId,
          schema_name: "bench",
          payload_json: JSON.stringify({ n }),
        });
      }
    }),
  );
  const writeSeconds = (performance.now() - writeStarted) / 1000;
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addCookies([{ name: cookieName, value: cookieValue, url: base }]);
  const page = await context.newPage();
  const opens: { firstEventsMs: number; allEventsMs: number }[] = [];
  for (let i = 0; i < 3; i++) {
    await page.goto(`${base}/console/runs/${runId}`);
    await page.locator(".vrow").first().waitFor({ timeout: 300_000 });
    const firstEventsMs = await page.evaluate(() => performance.now());
    // The run's own events (its start) come beside the annotations.
    await page.waitForFunction(
      (want) => Number.parseInt(document.querySelector("[data-testid=tail-status]")?.textContent ?? "0", 10) >= want,
      EVENTS,
      { timeout: 600_000, polling: 50 },
    );
    opens.push({ firstEventsMs, allEventsMs: await page.evaluate(() => performance.now()) });
  }
  process.stdout.write(`opens: ${JSON.stringify(opens)}\n`);
  // A string, not a function: tsx's names helper (__name) does not exist in the page.
  const fps = (await page.evaluate(`new Promise((resolve) => {
    const list = document.querySelector("[data-testid=vlist]");
    list.scrollTop = 0;
    let frames = 0;
    const started = performance.now();
    const step = () => {
      frames++;
      list.scrollTop += 400;
      if (performance.now() - started < 3000) requestAnimationFrame(step);
      else resolve((frames * 1000) / (performance.now() - started));
    };
    requestAnimationFrame(step);
  })`)) as number;
  results.run = {
    events: EVENTS,
    writeSecondsThroughApi: Math.round(writeSeconds),
    firstEventsDrawnMs: summary(opens.map((o) => o.firstEventsMs)),
    allEventsLoadedMs: summary(opens.map((o) => o.allEventsMs)),
    domRowsWhileScrolling: await page.locator(".vrow").count(),
    scrollFps: Math.round(fps * 10) / 10,
  };
  await context.close();
} finally {
  await browser.close();
  await server.stop();
  await rm(tmp, { recursive: true, force: true });
}
await recordResults("console.json", results);
