// What every command shares: where the server and the key come from (flags, then
// WARREN_API_URL / WARREN_API_KEY, then `warren login`'s config file), output (human tables
// or --json), progress on stderr, and exit codes scripts can rely on.
import { chmod, mkdir, readFile, rename, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { InvalidArgumentError } from "commander";
import { ConnectionError, SandboxStateError, Warren, WarrenApiError } from "../../sdk/src/index.js";

/** Exit codes (README "CLI"): the same for every command. */
export const EXIT = {
  ok: 0,
  error: 1,
  usage: 2,
  notFound: 3,
  conflict: 4,
  quota: 5,
  auth: 6,
  connection: 7,
  /** A sandbox awaited failed because its image could not be had (`image_unavailable`, `invalid_spec`). */
  imageUnavailable: 8,
  /** A sandbox awaited failed or ended otherwise; the error code is its state_reason code. */
  sandboxFailed: 9,
  /** `sandbox exec` whose command could not be started (a missing binary; as a shell's 127). */
  execNotStarted: 127,
  /** `sandbox exec` whose command timed out (as timeout(1)). */
  execTimedOut: 124,
  /** `sandbox exec` whose outcome could not be read: it may have run. */
  execIndeterminate: 125,
} as const;

/**
 * The first process of a sandbox the CLI or MCP creates (or restores) without a command: the
 * image's own CMD is often a shell that exits at once, which stops the sandbox. `sleep
 * infinity` is in GNU coreutils and busybox; an image without `sleep` needs a command
 * (docs/sdk-cli.md).
 */
export const KEEP_ALIVE_COMMAND: readonly string[] = ["sleep", "infinity"];

export interface GlobalOptions {
  json?: boolean;
  url?: string;
  apiKey?: string;
  quiet?: boolean;
}

export interface StoredConfig {
  url?: string;
  api_key?: string;
}

export function configFile(): string {
  const base = process.env.XDG_CONFIG_HOME || path.join(os.homedir(), ".config");
  return path.join(base, "warren", "config.json");
}

export async function readStoredConfig(): Promise<StoredConfig> {
  try {
    return JSON.parse(await readFile(configFile(), "utf8")) as StoredConfig;
  } catch {
    return {};
  }
}

/** Writes the config file owner-only (0600, its directory 0700), replacing it atomically. */
export async function writeStoredConfig(config: StoredConfig): Promise<string> {
  const file = configFile();
  await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.tmp-${process.pid}`;
  await writeFile(tmp, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  await chmod(tmp, 0o600);
  await rename(tmp, file);
  return file;
}

export async function resolveTarget(options: GlobalOptions): Promise<{ url: string; apiKey: string }> {
  const stored = await readStoredConfig();
  const url = options.url || process.env.WARREN_API_URL || stored.url || "http://127.0.0.1:8080";
  const apiKey = options.apiKey || process.env.WARREN_API_KEY || stored.api_key || "";
  return { url, apiKey };
}

export async function client(options: GlobalOptions): Promise<Warren> {
  const { url, apiKey } = await resolveTarget(options);
  if (!apiKey) throw new UsageError("no API key: run `warren login`, or set WARREN_API_KEY");
  return new Warren({ baseUrl: url, apiKey, userAgent: "warren-cli/0.1" });
}

export class UsageError extends Error {}

const IMAGE_REASONS = new Set(["image_unavailable", "invalid_spec"]);

/** An error's exit code. */
export function exitCodeOf(error: unknown): number {
  if (error instanceof UsageError) return EXIT.usage;
  if (error instanceof ConnectionError) return EXIT.connection;
  if (error instanceof SandboxStateError) {
    if (error.code === "sandbox_wait_timeout") return EXIT.error;
    return IMAGE_REASONS.has(error.code) ? EXIT.imageUnavailable : EXIT.sandboxFailed;
  }
  if (error instanceof WarrenApiError) {
    if (error.code === "not_found") return EXIT.notFound;
    // A command that did not start (a missing binary), as a shell reports it.
    if (error.code === "spawn_failed") return EXIT.execNotStarted;
    if (error.code === "unauthenticated" || error.code === "permission_denied") return EXIT.auth;
    if (error.status === 429) return EXIT.quota;
    if (error.status === 409 || error.status === 412) return EXIT.conflict;
    if (error.status === 400 || error.status === 422) return EXIT.usage;
  }
  return EXIT.error;
}

/** The error as one line (human) or as the contract's envelope fields (--json), on stderr. */
export function reportError(error: unknown, json: boolean): void {
  if (json) {
    const body =
      error instanceof WarrenApiError
        ? {
            error: {
              code: error.code,
              message: error.message,
              status: error.status,
              ...(error.requestId ? { request_id: error.requestId } : {}),
              ...(error.details ? { details: error.details } : {}),
            },
          }
        : error instanceof SandboxStateError
          ? {
              error: {
                code: error.code,
                message: error.message,
                sandbox_id: error.sandboxId,
                state: error.state,
                ...(error.reason ? { state_reason: error.reason } : {}),
              },
            }
          : { error: { code: error instanceof UsageError ? "usage" : "error", message: (error as Error).message } };
    process.stderr.write(`${JSON.stringify(body)}\n`);
    return;
  }
  const prefix =
    error instanceof WarrenApiError || (error instanceof SandboxStateError && !error.reason) ? `${error.code}: ` : "";
  process.stderr.write(`warren: ${prefix}${(error as Error).message ?? String(error)}\n`);
}

export type Row = Record<string, unknown>;

function cell(value: unknown): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

/** A plain aligned table: a header of column names, then one line per row. */
export function table(rows: Row[], columns: string[]): string {
  if (rows.length === 0) return "";
  const cells = rows.map((row) => columns.map((column) => cell(row[column]).replace(/\s+/g, " ")));
  const widths = columns.map((column, i) =>
    Math.max(column.length, ...cells.map((line) => (line[i] as string).length)),
  );
  const line = (values: string[]) =>
    values
      .map((value, i) => (i === values.length - 1 ? value : value.padEnd(widths[i] as number)))
      .join("  ")
      .trimEnd();
  return `${[line(columns.map((c) => c.toUpperCase())), ...cells.map(line)].join("\n")}\n`;
}

/** `key: value` lines for one record. */
export function record(row: Row): string {
  const width = Math.max(...Object.keys(row).map((key) => key.length));
  return `${Object.entries(row)
    .map(([key, value]) => `${key.padEnd(width)}  ${cell(value)}`)
    .join("\n")}\n`;
}

export interface Output {
  json: boolean;
  /** Writes `value` as JSON (--json) or as `human(value)`. */
  print(value: unknown, human: (value: never) => string): void;
  /** Progress on stderr: a line redrawn in place on a terminal, nothing otherwise (or with --quiet). */
  progress(text: string): void;
  done(): void;
}

export function output(options: GlobalOptions): Output {
  const json = Boolean(options.json);
  const live = process.stderr.isTTY === true && !options.quiet;
  let drawn = false;
  return {
    json,
    print(value, human) {
      if (drawn) this.done();
      process.stdout.write(json ? `${JSON.stringify(value, null, 2)}\n` : human(value as never));
    },
    progress(text) {
      if (!live) return;
      process.stderr.write(`\r\x1b[2K${text}`);
      drawn = true;
    },
    done() {
      if (drawn) process.stderr.write("\r\x1b[2K");
      drawn = false;
    },
  };
}

/** A text progress bar: `[#####.....] 50% label`. */
export function bar(done: number, total: number, label: string): string {
  const fraction = total > 0 ? Math.min(1, done / total) : 1;
  const filled = Math.round(fraction * 24);
  return `[${"#".repeat(filled)}${".".repeat(24 - filled)}] ${String(Math.round(fraction * 100)).padStart(3)}% ${label}`;
}

export function mib(bytes: number): string {
  return `${(bytes / 1_048_576).toFixed(1)} MiB`;
}

/** Reads stdin to its end (a piped secret value or key), without its final newline. */
export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks)
    .toString("utf8")
    .replace(/\r?\n$/, "");
}

/** `key=value` pairs of a repeatable option. */
export function pairs(values: string[] | undefined): Record<string, string> | undefined {
  if (!values || values.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const item of values) {
    const at = item.indexOf("=");
    if (at <= 0) throw new UsageError(`"${item}" is not key=value`);
    out[item.slice(0, at)] = item.slice(at + 1);
  }
  return out;
}

export const collect = (value: string, previous: string[] = []) => [...previous, value];

export function integer(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError("a whole number");
  return Number(value);
}
