// The file API of a sandbox (docs/api-decisions.md "Files"): upload, download, stat, list,
// mkdir, remove, rename and watch, each one streaming session in the sandbox (session.ts)
// running a busybox script (scripts.ts) as the sandbox's own user, routed to the sandbox's
// owner host like an SSH session. The checks are exec's: the caller's organization (another's
// sandbox is not_found), a sandbox-scoped credential's own sandbox, not quarantined, running.
import { randomBytes } from "node:crypto";
import type { SandboxDefaults } from "../../config.js";
import { RuntimeError, type SandboxRuntime } from "../../drivers/runtime/interface.js";
import type { Clock } from "../../lib/clock.js";
import { AppError, invalid, notFound } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import type { HostRouter } from "../hosts/router.js";
import type { Credential } from "../identity/credential.js";
import type { ExecsInFlight } from "../sandboxes/execs-in-flight.js";
import { isVisible, SANDBOX_ID } from "../sandboxes/view.js";
import {
  childPath,
  type FileInfo,
  MAX_PATH_BYTES,
  malformed,
  nameText,
  parseStatLine,
  RecordSplitter,
} from "./records.js";
import * as scripts from "./scripts.js";
import { FILE_EXIT } from "./scripts.js";
import { type RunningFileSession, type SessionEnd, startFileSession } from "./session.js";

/** How long a non-streaming operation (stat, list, mkdir, remove, rename) may take in the sandbox. */
export const FILE_OP_DEADLINE_MS = 30_000;
/** How long a download may take to name what it sends (a FIFO swapped in after the check blocks its open). */
export const DOWNLOAD_HEADER_DEADLINE_MS = 15_000;
/** The most a stat or mkdir-like answer may print (a record and a symlink target). */
const MAX_SMALL_OUTPUT = 8 * 1024;

/** What a file operation needs of the sandbox's row (SandboxService.rowForHost). */
export interface FileTarget {
  id: string;
  org_id: string;
  state: string;
  desired_state: string;
  quarantined: boolean;
  finished_at: Date | null;
  host_id: string | null;
  host_epoch: number | null;
}

export interface FileServiceDeps {
  /** The sandbox's row and its activity, through the sandbox service (never its repo). */
  sandboxes: {
    rowForHost(id: string): Promise<FileTarget | null>;
    touch(row: { id: string }, source: "session"): Promise<void>;
  };
  clock: Clock;
  log: Logger;
  defaults: SandboxDefaults;
  router: Pick<HostRouter, "runtimeOf">;
  /** The sandbox service's idle check reads these: an operation in flight holds off an idle stop. */
  inFlight: ExecsInFlight<unknown>;
}

/** A sandbox path as the API takes it: absolute, at most MAX_PATH_BYTES, no NUL, no `.` or `..` segment. */
export function checkPath(name: string, value: unknown): string {
  if (typeof value !== "string" || value === "") throw invalid(`${name} is required`);
  if (value.includes("\0")) throw invalid(`${name} may not contain NUL`);
  if (Buffer.byteLength(value) > MAX_PATH_BYTES) throw invalid(`${name} is longer than ${MAX_PATH_BYTES} bytes`);
  if (!value.startsWith("/")) throw invalid(`${name} must be an absolute path inside the sandbox`);
  const segments = value.split("/").filter((segment) => segment !== "");
  if (segments.some((segment) => segment === "." || segment === "..")) {
    throw invalid(`${name} may not contain . or .. segments`);
  }
  return `/${segments.join("/")}`;
}

/** A mode as the API takes it: octal permission bits, `644` or `0755` (at most 07777). */
export function checkMode(value: string | undefined, fallback: string): string {
  if (value === undefined) return fallback;
  if (!/^0?[0-7]{3,4}$/.test(value) || Number.parseInt(value, 8) > 0o7777) {
    throw invalid("mode must be octal permission bits such as 644 or 0755");
  }
  return Number.parseInt(value, 8).toString(8);
}

export interface DownloadStream {
  kind: "file" | "directory";
  /** A file's size (the bytes that follow); null for a directory's tar. */
  size: number | null;
  /**
   * Sends the rest to `write` (each chunk's promise settles once the target took it);
   * resolves when everything was sent, rejects when the stream broke (the target must then be cut).
   */
  pipe(write: (data: Buffer) => Promise<void>): Promise<void>;
  cancel(): void;
}

export class FileService {
  constructor(private readonly deps: FileServiceDeps) {}

  /** A file from the request body (streamed), parents created, renamed into place once complete. */
  async writeFile(
    cred: Credential,
    id: string,
    input: { path: string; mode?: string | undefined },
    body: AsyncIterable<Buffer | Uint8Array>,
  ): Promise<FileInfo> {
    const path = checkPath("path", input.path);
    if (path === "/") throw invalid("path must name a file");
    const mode = checkMode(input.mode, "644");
    const row = await this.target(cred, id);
    const dir = path.slice(0, path.lastIndexOf("/")) || "/";
    const temporary = `${dir === "/" ? "" : dir}/.warren-upload-${randomBytes(8).toString("hex")}`;
    const out = new Bounded(MAX_SMALL_OUTPUT);
    const end = await this.run(row, scripts.scriptArgv(scripts.WRITE_FILE, [path, temporary, mode]), {
      stdin: body,
      stdout: (data) => out.push(data),
    });
    if (end.failure !== undefined || end.exit === null) {
      // The caller went away (or the session was lost) mid-upload: nothing is renamed into
      // place; the partial temporary file is removed.
      await this.cleanup(row, temporary);
      if (end.failure !== undefined) throw bodyFailure(end.failure);
    }
    this.check(end, "upload");
    return parseStatLine(out.text().trimEnd(), path);
  }

  /** A tar stream from the request body extracted under `path` (created with its parents). */
  async extractTar(
    cred: Credential,
    id: string,
    input: { path: string },
    body: AsyncIterable<Buffer | Uint8Array>,
  ): Promise<FileInfo> {
    const path = checkPath("path", input.path);
    const row = await this.target(cred, id);
    const end = await this.run(row, scripts.scriptArgv(scripts.EXTRACT_TAR, [path]), {
      stdin: body,
      stdout: () => undefined,
    });
    if (end.failure !== undefined) throw bodyFailure(end.failure);
    this.check(end, "extract");
    return this.statRow(row, path);
  }

  async stat(cred: Credential, id: string, input: { path: string }): Promise<FileInfo> {
    const path = checkPath("path", input.path);
    return this.statRow(await this.target(cred, id), path);
  }

  /** The directory's entries (not sorted by the sandbox: sorted here by name), at most `limit`. */
  async list(
    cred: Credential,
    id: string,
    input: { path: string; limit: number },
  ): Promise<{ path: string; entries: FileInfo[]; truncated: boolean }> {
    const path = checkPath("path", input.path);
    const row = await this.target(cred, id);
    const splitter = new RecordSplitter();
    const entries: FileInfo[] = [];
    let truncated = false;
    let running: RunningFileSession | null = null;
    const end = await this.run(
      row,
      scripts.scriptArgv(scripts.LIST, [path]),
      {
        stdout: (data) => {
          for (const record of splitter.push(data)) {
            if (record === "end") throw malformed("listing");
            if (entries.length >= input.limit) {
              truncated = true;
              running?.kill();
              return;
            }
            entries.push(parseStatLine(record.line, childPath(path, nameText(record.name))));
          }
        },
      },
      (session) => {
        running = session;
      },
    );
    if (end.failure !== undefined) throw end.failure;
    if (!truncated) {
      this.check(end, "list");
      if (splitter.partial) throw malformed("listing");
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return { path, entries, truncated };
  }

  async mkdir(cred: Credential, id: string, input: { path: string; mode?: string | undefined }): Promise<FileInfo> {
    const path = checkPath("path", input.path);
    const mode = checkMode(input.mode, "755");
    const row = await this.target(cred, id);
    this.check(
      await this.run(row, scripts.scriptArgv(scripts.MKDIR, [path, mode]), { stdout: () => undefined }),
      "mkdir",
    );
    return this.statRow(row, path);
  }

  async remove(cred: Credential, id: string, input: { path: string; recursive?: boolean | undefined }): Promise<void> {
    const path = checkPath("path", input.path);
    if (path === "/") throw invalid("the sandbox's root cannot be removed");
    const row = await this.target(cred, id);
    const argv = scripts.scriptArgv(scripts.REMOVE, [path, input.recursive ? "1" : "0"]);
    this.check(await this.run(row, argv, { stdout: () => undefined }), "remove");
  }

  async rename(
    cred: Credential,
    id: string,
    input: { from: string; to: string; overwrite?: boolean | undefined },
  ): Promise<FileInfo> {
    const from = checkPath("from", input.from);
    const to = checkPath("to", input.to);
    if (from === "/" || to === "/") throw invalid("the sandbox's root cannot be renamed");
    if (to === from || to.startsWith(`${from}/`)) throw invalid("to may not be from or inside it");
    const row = await this.target(cred, id);
    const argv = scripts.scriptArgv(scripts.RENAME, [from, to, input.overwrite ? "1" : "0"]);
    this.check(await this.run(row, argv, { stdout: () => undefined }), "rename");
    return this.statRow(row, to);
  }

  /**
   * A regular file (raw) or a directory (tar), once the sandbox named which: errors before
   * that are thrown here (the route answers them as usual); after it, pipe() streams the rest.
   */
  async download(cred: Credential, id: string, input: { path: string }): Promise<DownloadStream> {
    const path = checkPath("path", input.path);
    const row = await this.target(cred, id);
    let header = Buffer.alloc(0);
    let named: ((head: { kind: "file" | "directory"; size: number | null; rest: Buffer }) => void) | null = null;
    const headerSeen = new Promise<{ kind: "file" | "directory"; size: number | null; rest: Buffer }>((resolve) => {
      named = resolve;
    });
    let sink: ((data: Buffer) => Promise<void>) | null = null;
    let sinkSet: () => void = () => undefined;
    const sinkReady = new Promise<void>((resolve) => {
      sinkSet = resolve;
    });
    let sent = 0;
    let expected: number | null = null;
    let running: RunningFileSession | null = null;
    const deadline = setTimeout(() => running?.kill(), DOWNLOAD_HEADER_DEADLINE_MS);
    const send = async (data: Buffer) => {
      await sinkReady;
      if (expected !== null && sent + data.length > expected) throw malformed("file (longer than its size)");
      sent += data.length;
      if (sink) await sink(data);
    };
    const ended = this.run(
      row,
      scripts.scriptArgv(scripts.READ, [path]),
      {
        streaming: true,
        stdout: async (data) => {
          if (named === null) return send(data);
          header = Buffer.concat([header, data]);
          const newline = header.indexOf(0x0a);
          if (newline < 0) {
            if (header.length > 64) throw malformed("download header");
            return;
          }
          const line = header.subarray(0, newline).toString("latin1");
          const rest = header.subarray(newline + 1);
          const file = /^f ([0-9]{1,16})$/.exec(line);
          if (line !== "d" && !file) throw malformed("download header");
          const resolve = named;
          named = null;
          clearTimeout(deadline);
          expected = file ? Number(file[1]) : null;
          resolve({ kind: file ? "file" : "directory", size: expected, rest });
          if (rest.length > 0) await send(rest);
        },
      },
      (session) => {
        running = session;
      },
    );
    const first = await Promise.race([headerSeen, ended.then((end) => ({ end }))]);
    if ("end" in first) {
      clearTimeout(deadline);
      const { end } = first;
      if (end.failure !== undefined) throw end.failure;
      if (end.exit === 0) throw malformed("download (no header)");
      if (end.exit !== null && end.exit >= 128) {
        throw new AppError("deadline_exceeded", "the file could not be opened in time (a FIFO or a device?)");
      }
      this.check(end, "download");
      throw malformed("download");
    }
    const session = running as RunningFileSession | null;
    return {
      kind: first.kind,
      size: first.size,
      cancel: () => session?.kill(),
      pipe: async (write) => {
        sink = write;
        sinkSet();
        const end = await ended;
        if (end.failure !== undefined) throw end.failure;
        if (end.exit === null) throw new Error(`the download's session was lost: ${end.lost ?? ""}`);
        // tar exits 1 after warnings (an unreadable file is skipped): the archive is still whole.
        if (end.exit !== 0 && !(first.kind === "directory" && end.exit === 1)) {
          throw new Error(`the download's command ended with ${end.exit}`);
        }
        if (expected !== null && sent !== expected) throw new Error("the file shrank while it was read");
      },
    };
  }

  /**
   * The sandbox's row for a file operation: visible to the caller's organization, the
   * credential's own sandbox when it is sandbox-scoped, not quarantined, running.
   */
  async target(cred: Credential, id: string): Promise<FileTarget> {
    const row = SANDBOX_ID.test(id) ? await this.deps.sandboxes.rowForHost(id) : null;
    if (
      !row ||
      row.org_id !== cred.orgId ||
      !isVisible(row, this.deps.clock.now(), this.deps.defaults.retentionSeconds)
    ) {
      throw notFound("sandbox");
    }
    if (cred.sandbox && cred.sandbox.sandboxId !== row.id) throw notFound("sandbox");
    if (row.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
    if (row.state !== "running" || row.desired_state !== "running") {
      throw new AppError("sandbox_not_running", `the sandbox is ${row.state}; files need it running`);
    }
    return row;
  }

  /** Runs a script to its end (a deadline for the non-streaming ones: the ones without stdin or a sink). */
  async run(
    row: FileTarget,
    argv: string[],
    options: {
      stdin?: AsyncIterable<Buffer | Uint8Array>;
      stdout(data: Buffer): Promise<void> | void;
      /** Streams (an upload's body, a download) have none: the caller's pace decides. */
      streaming?: boolean;
    },
    started?: (session: RunningFileSession) => void,
  ): Promise<SessionEnd> {
    const route = await this.deps.router.runtimeOf(row);
    const opId = `files-${randomBytes(8).toString("hex")}`;
    let session: RunningFileSession;
    try {
      session = await startFileSession(route.runtime as Pick<SandboxRuntime, "openSession">, row.id, argv, {
        stdin: options.stdin ?? null,
        stdout: options.stdout,
      });
    } catch (error) {
      throw openError(error);
    }
    started?.(session);
    // Held against an idle stop while it runs (the owner's idle check reads in-flight work).
    this.deps.inFlight.began(opId, row.id, session.ended);
    void this.deps.sandboxes.touch(row, "session").catch(() => undefined);
    const timer = !options.stdin && !options.streaming ? setTimeout(() => session.kill(), FILE_OP_DEADLINE_MS) : null;
    try {
      return await session.ended;
    } finally {
      if (timer) clearTimeout(timer);
      this.deps.inFlight.ended(opId);
    }
  }

  private async statRow(row: FileTarget, path: string): Promise<FileInfo> {
    const out = new Bounded(MAX_SMALL_OUTPUT);
    const end = await this.run(row, scripts.scriptArgv(scripts.STAT, [path]), { stdout: (data) => out.push(data) });
    this.check(end, "stat");
    const text = out.text();
    const newline = text.indexOf("\n");
    if (newline < 0) throw malformed("stat record");
    const info = parseStatLine(text.slice(0, newline), path);
    if (info.type === "symlink") {
      const target = text.slice(newline + 1).replace(/\n$/, "");
      if (target.includes("\0")) throw malformed("symlink target");
      info.link_target = target;
    }
    return info;
  }

  private async cleanup(row: FileTarget, temporary: string): Promise<void> {
    try {
      await this.run(row, scripts.scriptArgv(scripts.REMOVE_TEMPORARY, [temporary]), { stdout: () => undefined });
    } catch (error) {
      this.deps.log.warn(
        { sandbox_id: row.id, err: (error as Error).message },
        "an interrupted upload's temporary file stayed",
      );
    }
  }

  /** An AppError for a script's end that is not success. */
  private check(end: SessionEnd, operation: string): void {
    if (end.failure !== undefined) throw end.failure;
    if (end.exit === 0) return;
    throw scriptError(end, operation);
  }
}

/** What a script's exit status and stderr mean for the caller. */
export function scriptError(end: SessionEnd, operation: string): AppError {
  const text = end.stderr
    .replace(/[^\x20-\x7e\n]/g, "?")
    .trim()
    .slice(0, 512);
  switch (end.exit) {
    case null:
      return new AppError("unavailable", `the sandbox's ${operation} session was lost; retry`, {
        retryAfterSeconds: 1,
      });
    case FILE_EXIT.notFound:
      return notFound("file");
    case FILE_EXIT.wrongType:
      return new AppError("failed_precondition", `${operation}: not a regular file or directory there`, {
        details: { reason: "wrong_type" },
      });
    case FILE_EXIT.isDirectory:
      return new AppError("failed_precondition", `${operation}: the path is a directory`, {
        details: { reason: "is_directory" },
      });
    case FILE_EXIT.exists:
      return new AppError("already_exists", `${operation}: the path already exists`);
    case FILE_EXIT.notEmpty:
      return new AppError("failed_precondition", `${operation}: the directory is not empty (recursive removes it)`, {
        details: { reason: "not_empty" },
      });
  }
  if (/No space left on device|Disk quota exceeded|File too large/.test(text)) {
    return new AppError("payload_too_large", `${operation}: the sandbox's filesystem is full`, {
      details: { reason: "no_space" },
    });
  }
  if (/Permission denied|Operation not permitted/.test(text)) {
    return new AppError("permission_denied", `${operation}: the sandbox's user may not do that: ${text}`);
  }
  if (end.exit !== null && end.exit >= 128) {
    return new AppError("deadline_exceeded", `${operation} did not finish in time in the sandbox`);
  }
  return new AppError("failed_precondition", `${operation} failed in the sandbox: ${text || `exit ${end.exit}`}`, {
    details: { reason: "command_failed" },
  });
}

/** A request body that broke off (the client went away): never a 500. */
function bodyFailure(error: unknown): unknown {
  if (error instanceof AppError) return error;
  return new AppError("invalid_argument", "the request body ended before it was complete", { cause: error });
}

/** openSession's refusals as the API's errors. */
function openError(error: unknown): unknown {
  if (error instanceof RuntimeError) {
    if (error.code === "not_running") return new AppError("sandbox_not_running", "the sandbox is not running");
    if (error.code === "start_failed" || error.code === "unsupported") {
      return new AppError(
        "failed_precondition",
        "this sandbox run has no file tools (it started before the file API): restart it",
        { details: { reason: "no_file_tools" }, cause: error },
      );
    }
    return new AppError("unavailable", "the sandbox's session could not be opened; retry", {
      retryAfterSeconds: 1,
      cause: error,
    });
  }
  return error;
}

/** Output kept whole up to a bound; past it, malformed. */
class Bounded {
  private chunks: Buffer[] = [];
  private size = 0;
  constructor(private readonly max: number) {}
  push(data: Buffer): void {
    this.size += data.length;
    if (this.size > this.max) throw malformed("answer (too long)");
    this.chunks.push(data);
  }
  text(): string {
    return Buffer.concat(this.chunks).toString("utf8");
  }
}
