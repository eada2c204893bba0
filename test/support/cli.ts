// Runs the `warren` CLI as a child process (packages/cli/bin/warren.mjs), with its own HOME
// so `warren login` writes into a temp dir, and nothing of this process's WARREN_* variables.
// The compiled CLI (packages/cli/dist) is built first when it is missing or stale, so the
// tests run what users run, not the TypeScript sources through tsx.
import { spawn } from "node:child_process";
import path from "node:path";
import { buildCliBundle, cliBundleIsStale } from "../../scripts/cli-bundle.js";

export const WARREN_BIN = path.resolve("packages/cli/bin/warren.mjs");

let built: Promise<void> | null = null;
/** Builds packages/cli/dist once per test process when it is stale. */
export function ensureCliBuilt(): Promise<void> {
  built ??= cliBundleIsStale().then((stale) => (stale ? buildCliBundle() : undefined));
  return built;
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function runCli(
  args: string[],
  options: {
    home: string;
    env?: Record<string, string>;
    stdin?: string;
    timeoutMs?: number;
    /** Called with all of stdout so far on every chunk (to wait for a line while it runs). */
    onStdout?: (stdout: string) => void;
  },
): Promise<CliResult> {
  return ensureCliBuilt().then(() => spawnCli(args, options));
}

function spawnCli(args: string[], options: Parameters<typeof runCli>[1]): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WARREN_BIN, ...args], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: options.home, ...options.env },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
      options.onStdout?.(stdout);
    });
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 120_000);
    child.once("error", reject);
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? (signal ? 128 : 1), stdout, stderr });
    });
    child.stdin.end(options.stdin ?? "");
  });
}
