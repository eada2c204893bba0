// A real browser for the console's tests: Debian's Chromium (make test-deps installs it)
// driven headless by playwright-core; axe-core run inside the page (through the DevTools
// protocol, which the page's CSP does not govern), and the screenshots the README links.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir, readFile } from "node:fs/promises";
import path from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { PROJECT_DIR } from "../../scripts/server-bundle.js";

export const CHROMIUM = "/usr/bin/chromium";
export const SCREENSHOT_DIR = path.join(PROJECT_DIR, "docs", "console");

export async function launchBrowser(): Promise<Browser> {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: make test-deps installs Debian's chromium`);
  // As root Chromium needs --no-sandbox; the pages it loads are the console's own.
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
}

let axeSource: string | null = null;

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: string[] }[];
}

/** axe-core's violations of impact serious or critical on the page as it stands. */
export async function seriousViolations(page: Page): Promise<AxeViolation[]> {
  axeSource ??= await readFile(path.join(PROJECT_DIR, "node_modules", "axe-core", "axe.min.js"), "utf8");
  const loaded = await page.evaluate(() => typeof (globalThis as { axe?: unknown }).axe !== "undefined");
  if (!loaded) await page.evaluate(axeSource);
  const violations = (await page.evaluate(async () => {
    const axe = (
      globalThis as unknown as { axe: { run(ctx: unknown, opts: unknown): Promise<{ violations: unknown[] }> } }
    ).axe;
    const result = await axe.run(document, { resultTypes: ["violations"] });
    return result.violations;
  })) as AxeViolation[];
  return violations.filter((v) => v.impact === "serious" || v.impact === "critical");
}

/** Asserts zero serious axe violations on the page, naming them when there are some. */
export async function assertAccessible(page: Page, label: string): Promise<void> {
  const violations = await seriousViolations(page);
  assert.deepEqual(
    violations.map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`),
    [],
    `${label}: serious accessibility violations`,
  );
}

export async function screenshot(page: Page, name: string): Promise<void> {
  await mkdir(SCREENSHOT_DIR, { recursive: true });
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}.png`), fullPage: true });
}
