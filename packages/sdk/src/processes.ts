// `sandbox.processes`: background processes (docs/api-decisions.md "Processes"). `start()`
// answers at once with a Process handle; the process outlives every connection (and the
// server's restart), so a handle can be had again by id (`get`). `output()` is an async
// iterator of the output from an offset over server-sent events, reconnecting from the last
// offset when the connection drops (never a byte lost or repeated while the server keeps it;
// bytes it no longer keeps come as a `gap`).

import { bytesOf, fromBase64, toBase64 } from "./bytes.js";
import { ConnectionError, errorFromResponse, WarrenApiError } from "./errors.js";
import { parseSse } from "./tail.js";
import type { CallOptions, Transport } from "./transport.js";
import type { Ok } from "./types.js";

export type ProcessRecord = Ok<"GetSandboxProcess">;
export type ProcessSignal =
  | "SIGHUP"
  | "SIGINT"
  | "SIGQUIT"
  | "SIGKILL"
  | "SIGUSR1"
  | "SIGUSR2"
  | "SIGTERM"
  | "SIGCONT"
  | "SIGSTOP"
  | "SIGWINCH";

export interface StartProcessOptions extends CallOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** Give the process a stdin pipe (write with `stdin.write`); always with a terminal. */
  stdin?: boolean;
  /** A terminal of this size (all output then comes as stdout). */
  pty?: { rows: number; cols: number } | null;
  /** Killed after this long (its end_reason is then `timeout`). */
  timeoutSeconds?: number;
}

export type ProcessOutput =
  | { type: "stdout" | "stderr"; offset: number; data: Buffer }
  /** Bytes from `from` to `to` are no longer kept (the reader fell behind the server's buffer). */
  | { type: "gap"; from: number; to: number };

export interface OutputOptions extends CallOptions {
  /** Where to start (default 0: everything still kept). */
  offset?: number;
  /** Reconnects after a dropped connection (default 5; each waits a little longer). */
  reconnects?: number;
}

export class SandboxProcesses {
  constructor(
    private readonly transport: Transport,
    private readonly sandboxId: string,
  ) {}

  private get base(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/processes`;
  }

  /** Starts `cmd` in the background; resolves with its handle as soon as it runs. */
  async start(cmd: string[], options: StartProcessOptions = {}): Promise<Process> {
    const record = await this.transport.json<ProcessRecord>("POST", this.base, {
      body: {
        cmd,
        ...(options.env ? { env: options.env } : {}),
        ...(options.cwd ? { cwd: options.cwd } : {}),
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
        ...(options.pty ? { pty: options.pty } : {}),
        ...(options.timeoutSeconds !== undefined ? { timeout_seconds: options.timeoutSeconds } : {}),
      },
      signal: options.signal,
    });
    return new Process(this.transport, this.sandboxId, record);
  }

  /** A handle on a process by id (re-attach after a restart of this program). */
  async get(processId: string, options: CallOptions = {}): Promise<Process> {
    const process = new Process(this.transport, this.sandboxId, undefined, processId);
    await process.refresh(options);
    return process;
  }

  /** The sandbox's processes, newest first (every page). */
  async list(options: CallOptions = {}): Promise<ProcessRecord[]> {
    const all: ProcessRecord[] = [];
    let token = "";
    do {
      const page = await this.transport.json<Ok<"ListSandboxProcesses">>("GET", this.base, {
        query: { page_size: 200, ...(token ? { page_token: token } : {}) },
        signal: options.signal,
      });
      all.push(...page.processes);
      token = page.next_page_token;
    } while (token);
    return all;
  }
}

export class Process {
  record: ProcessRecord | undefined;
  readonly id: string;
  /** Writes to the process's stdin (started with `stdin: true` or a pty). */
  readonly stdin: { write(data: string | Uint8Array): Promise<number>; close(): Promise<void> };

  constructor(
    private readonly transport: Transport,
    readonly sandboxId: string,
    record?: ProcessRecord,
    id?: string,
  ) {
    this.record = record;
    this.id = record?.id ?? (id as string);
    this.stdin = {
      write: async (data) => {
        let written = 0;
        const bytes = bytesOf(data);
        // At most 64 KiB a call (the server's limit).
        for (let at = 0; at < bytes.length; at += 64 << 10) {
          const piece = bytes.subarray(at, at + (64 << 10));
          const res = await this.verb<{ written: number }>("stdin", { data_base64: toBase64(piece) });
          written += res.written;
        }
        return written;
      },
      close: async () => {
        await this.verb("stdin", { close: true });
      },
    };
  }

  private get path(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/processes/${encodeURIComponent(this.id)}`;
  }

  private verb<T = ProcessRecord>(verb: string, body: unknown = {}, options: CallOptions = {}): Promise<T> {
    return this.transport.json<T>("POST", `${this.path}:${verb}`, { body, signal: options.signal });
  }

  get state(): ProcessRecord["state"] | undefined {
    return this.record?.state;
  }

  async refresh(options: CallOptions = {}): Promise<ProcessRecord> {
    this.record = await this.transport.json<ProcessRecord>("GET", this.path, { signal: options.signal });
    return this.record;
  }

  /** Resolves once the process ended (exit, kill, timeout, the sandbox's stop, lost). */
  async wait(options: CallOptions & { timeoutSeconds?: number } = {}): Promise<ProcessRecord> {
    const deadline = options.timeoutSeconds ? Date.now() + options.timeoutSeconds * 1000 : Number.POSITIVE_INFINITY;
    for (;;) {
      const left = Math.ceil((deadline - Date.now()) / 1000);
      const record = await this.verb("wait", { timeout_seconds: Math.max(1, Math.min(60, left)) }, options);
      this.record = record;
      if (record.state === "exited" || record.state === "lost" || Date.now() >= deadline) return record;
    }
  }

  async signal(signal: ProcessSignal, options: CallOptions = {}): Promise<ProcessRecord> {
    const record = await this.verb("signal", { signal }, options);
    this.record = record;
    return record;
  }

  async kill(options: CallOptions = {}): Promise<ProcessRecord> {
    const record = await this.verb("kill", {}, options);
    this.record = record;
    return record;
  }

  async resize(rows: number, cols: number, options: CallOptions = {}): Promise<ProcessRecord> {
    const record = await this.verb("resize", { rows, cols }, options);
    this.record = record;
    return record;
  }

  /** One read from `offset` (what is there now, or within `waitSeconds`). */
  async read(
    options: CallOptions & { offset?: number; maxBytes?: number; waitSeconds?: number } = {},
  ): Promise<Ok<"ReadSandboxProcessOutput">> {
    return this.transport.json("GET", `${this.path}/output`, {
      query: {
        offset: options.offset ?? 0,
        ...(options.maxBytes ? { max_bytes: options.maxBytes } : {}),
        ...(options.waitSeconds ? { wait_seconds: options.waitSeconds } : {}),
      },
      signal: options.signal,
    });
  }

  /** The output from `offset` until the process ends, reconnecting after a dropped connection. */
  async *output(options: OutputOptions = {}): AsyncGenerator<ProcessOutput> {
    let offset = options.offset ?? 0;
    let failures = 0;
    const reconnects = options.reconnects ?? 5;
    for (;;) {
      let ended = false;
      try {
        const response = await this.transport.send("GET", `${this.path}/output:stream`, {
          query: { offset },
          headers: { accept: "text/event-stream" },
          signal: options.signal,
        });
        if (!response.ok) {
          const text = await response.text();
          let body: unknown = {};
          try {
            body = JSON.parse(text);
          } catch {}
          throw errorFromResponse(response.status, body, response.headers.get("retry-after"));
        }
        if (!response.body) throw new ConnectionError("the output stream has no body");
        for await (const event of parseSse(response.body)) {
          const data = event.data as Record<string, unknown>;
          if (event.event === "stdout" || event.event === "stderr") {
            const bytes = fromBase64(String(data.data)) as Buffer;
            const at = Number(data.offset);
            offset = at + bytes.length;
            failures = 0;
            yield { type: event.event, offset: at, data: bytes };
          } else if (event.event === "gap") {
            offset = Number(data.to);
            yield { type: "gap", from: Number(data.from), to: Number(data.to) };
          } else if (event.event === "end") {
            this.record = data.process as ProcessRecord;
            ended = true;
            return;
          }
        }
      } catch (error) {
        if (options.signal?.aborted) return;
        if (error instanceof WarrenApiError && error.status < 500) throw error;
        if (++failures > reconnects) throw error;
      }
      if (ended) return;
      // The connection dropped before the end: go on from the last offset.
      await new Promise((resolve) => setTimeout(resolve, Math.min(5000, 100 * 2 ** failures)));
    }
  }

  /** All output (stdout and stderr as they came) until the end, as text. */
  async outputText(options: OutputOptions = {}): Promise<string> {
    let text = "";
    for await (const chunk of this.output(options)) if (chunk.type !== "gap") text += chunk.data.toString("utf8");
    return text;
  }
}
