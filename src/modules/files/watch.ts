// Watching a directory (GET .../files:watch): the host's busybox has no inotify applet, so the
// sandbox lists the directory every `interval` seconds (scripts.ts WATCH) and the server
// compares each pass with the one before: created, modified (type, size, mode or mtime
// changed) and deleted entries, as events. The sandbox's output is parsed as hostile input:
// a malformed record, or a pass of more than MAX_WATCH_ENTRIES, ends only this stream.

import { AppError } from "../../lib/errors.js";
import type { Credential } from "../identity/credential.js";
import { childPath, type FileInfo, nameText, parseStatLine, RecordSplitter } from "./records.js";
import * as scripts from "./scripts.js";
import { checkPath, type FileService, scriptError } from "./service.js";

/** The most entries one pass of a watch may list. */
export const MAX_WATCH_ENTRIES = 10_000;
/** Watches of one sandbox this server streams at once. */
export const MAX_WATCHES_PER_SANDBOX = 8;

export type WatchEvent =
  | { kind: "ready"; path: string; entries: number }
  | { kind: "created" | "modified" | "deleted"; entry: FileInfo };

const open = new Map<string, number>();

/**
 * Streams the events of `path` to `emit` (each awaited: a caller that does not read holds the
 * sandbox's next pass back) until `signal` aborts; rejects with the error that ended it.
 */
export async function watchDirectory(
  files: FileService,
  cred: Credential,
  id: string,
  input: { path: string; interval_seconds: number },
  emit: (event: WatchEvent) => Promise<void>,
  signal: AbortSignal,
): Promise<void> {
  const path = checkPath("path", input.path);
  const row = await files.target(cred, id);
  const count = open.get(row.id) ?? 0;
  if (count >= MAX_WATCHES_PER_SANDBOX) {
    throw new AppError("rate_limited", `at most ${MAX_WATCHES_PER_SANDBOX} watches of one sandbox at once`, {
      retryAfterSeconds: 5,
    });
  }
  open.set(row.id, count + 1);
  try {
    await run();
  } finally {
    const left = (open.get(row.id) ?? 1) - 1;
    if (left > 0) open.set(row.id, left);
    else open.delete(row.id);
  }

  async function run(): Promise<void> {
    const splitter = new RecordSplitter();
    let previous: Map<string, FileInfo> | null = null;
    let current = new Map<string, FileInfo>();
    const end = await files.run(
      row,
      scripts.scriptArgv(scripts.WATCH, [path, String(input.interval_seconds)]),
      {
        streaming: true,
        stdout: async (data) => {
          for (const record of splitter.push(data)) {
            if (record !== "end") {
              if (current.size >= MAX_WATCH_ENTRIES) {
                throw new AppError("failed_precondition", `more than ${MAX_WATCH_ENTRIES} entries to watch`);
              }
              const info = parseStatLine(record.line, childPath(path, nameText(record.name)));
              current.set(info.name, info);
              continue;
            }
            if (previous === null) await emit({ kind: "ready", path, entries: current.size });
            else {
              for (const [name, info] of current) {
                const before = previous.get(name);
                if (!before) await emit({ kind: "created", entry: info });
                else if (changed(before, info)) await emit({ kind: "modified", entry: info });
              }
              for (const [name, info] of previous) if (!current.has(name)) await emit({ kind: "deleted", entry: info });
            }
            previous = current;
            current = new Map();
          }
        },
      },
      (session) => {
        if (signal.aborted) session.kill();
        signal.addEventListener("abort", () => session.kill(), { once: true });
      },
    );
    if (signal.aborted) return;
    if (end.failure !== undefined) throw end.failure;
    throw scriptError(end.exit === 0 ? { ...end, exit: 1 } : end, "watch");
  }
}

function changed(a: FileInfo, b: FileInfo): boolean {
  return a.type !== b.type || a.size !== b.size || a.mode !== b.mode || a.modified_at !== b.modified_at;
}
