// The request layer: a thin fetch wrapper. Every logical call gets one Idempotency-Key (a
// mutating one), reused by its retries, so a retried create or exec never runs twice; 429,
// 503 and connection failures are retried honouring Retry-After; so is a 409
// operation_conflict with Retry-After on a keyed call (the first request with the key is still
// in flight, or its holder crashed and the server has yet to notice), for a bounded time;
// every call takes an AbortSignal.
import { ConnectionError, errorFromResponse, type WarrenApiError } from "./errors.js";
import type { StreamSocketOpener } from "./exec-stream.js";
import type { VolumePusher } from "./resources.js";

export interface TransportOptions {
  baseUrl: string;
  apiKey: string;
  /** Retries after the first attempt (default 3). */
  maxRetries?: number;
  /** Delay before the first retry when the server names none (default 250 ms, doubled per retry, at most 8 s). */
  retryBaseDelayMs?: number;
  /** A Retry-After longer than this (default 10 s) is not slept through: the error is thrown at once. */
  maxRetryAfterSeconds?: number;
  /**
   * How long (default 30 s) a keyed call keeps retrying 409 operation_conflict with Retry-After
   * (its key is held by a request still in flight); 0 answers the conflict at once.
   */
  inFlightRetrySeconds?: number;
  fetch?: typeof fetch;
  userAgent?: string;
  /** The WebSocket of `execStream` (default: `ws` in Node, the browser's own in a browser). */
  openSocket?: StreamSocketOpener;
  /** What `volumes.push` runs (default: Node's directory push; none in a browser). */
  pushVolume?: VolumePusher;
}

export interface CallOptions {
  signal?: AbortSignal | undefined;
  /** Idempotency-Key of this logical call; one is generated for every POST/PATCH/PUT/DELETE when omitted. */
  idempotencyKey?: string | undefined;
}

export interface RequestInit2 extends CallOptions {
  query?: Record<string, string | number | boolean | undefined> | undefined;
  body?: unknown;
  headers?: Record<string, string> | undefined;
  /** Retry after a connection failure (default true): false for a call the server cannot deduplicate. */
  retryOnConnectionError?: boolean | undefined;
}

const RETRYABLE_STATUS = new Set([429, 503]);

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export class Transport {
  readonly baseUrl: string;
  readonly apiKey: string;
  private readonly maxRetries: number;
  private readonly retryBaseDelayMs: number;
  private readonly maxRetryAfterMs: number;
  private readonly inFlightRetryMs: number;
  private readonly fetchImpl: typeof fetch;
  private readonly userAgent: string;
  readonly openSocket: StreamSocketOpener | null;
  readonly pushVolume: VolumePusher | null;

  constructor(options: TransportOptions) {
    this.openSocket = options.openSocket ?? null;
    this.pushVolume = options.pushVolume ?? null;
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.maxRetries = options.maxRetries ?? 3;
    this.retryBaseDelayMs = options.retryBaseDelayMs ?? 250;
    this.maxRetryAfterMs = (options.maxRetryAfterSeconds ?? 10) * 1000;
    this.inFlightRetryMs = (options.inFlightRetrySeconds ?? 30) * 1000;
    // Called unbound: a browser's fetch refuses to run as a method of another object ("Illegal invocation").
    const fetchOf = options.fetch ?? fetch;
    this.fetchImpl = (input, init) => fetchOf(input, init);
    this.userAgent = options.userAgent ?? "warren-sdk/0.1";
  }

  url(path: string, query?: RequestInit2["query"]): string {
    let url = `${this.baseUrl}${path}`;
    if (query) {
      const params = new URLSearchParams();
      for (const [name, value] of Object.entries(query)) if (value !== undefined) params.set(name, String(value));
      const text = params.toString();
      if (text) url += `?${text}`;
    }
    return url;
  }

  /** Sends one logical call (retrying as described above) and returns the raw response of the last attempt. */
  async send(method: string, path: string, init: RequestInit2 = {}): Promise<Response> {
    const headers: Record<string, string> = {
      accept: "application/json",
      "user-agent": this.userAgent,
      ...(this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {}),
      ...init.headers,
    };
    const mutating = method !== "GET" && method !== "HEAD";
    if (mutating) headers["idempotency-key"] = init.idempotencyKey ?? globalThis.crypto.randomUUID();
    let body: string | undefined;
    if (init.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(init.body);
    }
    const url = this.url(path, init.query);
    const started = Date.now();
    let inFlightAttempt = 0;
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await this.fetchImpl(url, { method, headers, body, signal: init.signal });
      } catch (error) {
        if (init.signal?.aborted) throw init.signal.reason ?? error;
        if (attempt >= this.maxRetries || init.retryOnConnectionError === false) {
          throw new ConnectionError(
            `could not reach ${this.baseUrl} (${method} ${path}): ${(error as Error).message}`,
            {
              cause: error,
            },
          );
        }
        await sleep(this.backoff(attempt), init.signal);
        continue;
      }
      if (response.status === 409 && mutating) {
        const delay = await this.inFlightDelay(response, inFlightAttempt++, started);
        if (delay === null) return response;
        await response.body?.cancel().catch(() => undefined);
        await sleep(delay, init.signal);
        attempt--; // its own budget, not maxRetries
        continue;
      }
      if (!RETRYABLE_STATUS.has(response.status) || attempt >= this.maxRetries) return response;
      const delay = this.retryDelay(response.headers.get("retry-after"), attempt);
      // A quota refusal names a wait; one past our ceiling is answered now rather than slept through.
      if (delay === null) return response;
      await response.body?.cancel().catch(() => undefined);
      await sleep(delay, init.signal);
    }
  }

  /** One logical call whose JSON answer is returned; an error status throws its WarrenApiError. */
  async json<T>(method: string, path: string, init: RequestInit2 = {}): Promise<T> {
    const response = await this.send(method, path, init);
    const text = await response.text();
    let parsed: unknown = {};
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = { code: response.ok ? "internal" : undefined, message: text.slice(0, 200) };
        if (response.ok) throw errorFromResponse(502, parsed, null);
      }
    }
    if (!response.ok) throw this.error(response, parsed);
    return parsed as T;
  }

  error(response: Response, body: unknown): WarrenApiError {
    return errorFromResponse(response.status, body, response.headers.get("retry-after"));
  }

  /** The wait before retrying a 409, or null when it is not an in-flight key's or the budget is spent. */
  private async inFlightDelay(response: Response, attempt: number, started: number): Promise<number | null> {
    const header = response.headers.get("retry-after");
    if (header === null || !/^\d+$/.test(header)) return null;
    const body = (await response
      .clone()
      .json()
      .catch(() => null)) as { code?: unknown } | null;
    if (body?.code !== "operation_conflict") return null;
    const delay =
      Math.min(Number(header) * 1000, this.maxRetryAfterMs) + Math.min(2000, this.retryBaseDelayMs * attempt);
    return Date.now() - started + delay > this.inFlightRetryMs ? null : delay;
  }

  private backoff(attempt: number): number {
    return Math.min(8000, this.retryBaseDelayMs * 2 ** attempt);
  }

  private retryDelay(header: string | null, attempt: number): number | null {
    if (header !== null && /^\d+$/.test(header)) {
      const ms = Number(header) * 1000;
      return ms > this.maxRetryAfterMs ? null : ms;
    }
    return this.backoff(attempt);
  }
}
