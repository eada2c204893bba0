// The run tail (GET /v1/runs/{id}/tail, server-sent events) as an async iterator that
// resumes from its last cursor (Last-Event-ID) after a dropped connection, and ends at the
// server's `event: end`. Frames are bounded: a line over MAX_LINE_BYTES ends the stream.
import { ConnectionError, WarrenError } from "./errors.js";
import { sleep, type Transport } from "./transport.js";

export interface TailEvent {
  /** Resume cursor of this item (absent on `end`). */
  id?: string;
  /** `end` on the last item; absent on telemetry events. */
  event?: string;
  data: Record<string, unknown>;
}

export interface TailOptions {
  /** Resume after this cursor (default: from the run's first event). */
  cursor?: string;
  lineagePath?: string;
  signal?: AbortSignal;
  /** Reconnects in a row without receiving an item before giving up (default 10). */
  maxReconnects?: number;
  /** Called before each reconnect with the cursor it resumes from. */
  onReconnect?: (cursor: string | undefined, error: unknown) => void;
  /** Called each time the stream is open (the server answered 200), before its first item. */
  onOpen?: () => void;
}

const MAX_LINE_BYTES = 4 * 1_048_576;

/** Parses an SSE byte stream into items (comments skipped). */
export async function* parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<TailEvent & { retry?: number }> {
  const decoder = new TextDecoder();
  let buffer = "";
  let data: string[] = [];
  let id: string | undefined;
  let event: string | undefined;
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline = buffer.indexOf("\n");
      while (newline >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        newline = buffer.indexOf("\n");
        if (line === "") {
          if (data.length > 0 || event) {
            const text = data.join("\n");
            let parsed: Record<string, unknown> = {};
            try {
              parsed = text ? (JSON.parse(text) as Record<string, unknown>) : {};
            } catch {
              parsed = { text };
            }
            yield { ...(id !== undefined ? { id } : {}), ...(event ? { event } : {}), data: parsed };
          }
          data = [];
          id = undefined;
          event = undefined;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const valueText = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") data.push(valueText);
        else if (field === "id") id = valueText;
        else if (field === "event") event = valueText;
      }
      if (buffer.length > MAX_LINE_BYTES) throw new WarrenError("run tail: a line over 4 MiB");
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}

/** Streams the events of `runId`; see TailOptions. */
export async function* tailRun(transport: Transport, runId: string, options: TailOptions = {}) {
  let cursor = options.cursor;
  let failures = 0;
  const maxReconnects = options.maxReconnects ?? 10;
  for (;;) {
    let response: Response;
    try {
      response = await transport.send("GET", `/v1/runs/${encodeURIComponent(runId)}/tail`, {
        query: { lineage_path: options.lineagePath },
        headers: { accept: "text/event-stream", ...(cursor ? { "last-event-id": cursor } : {}) },
        signal: options.signal,
      });
    } catch (error) {
      if (options.signal?.aborted || !(error instanceof ConnectionError) || ++failures > maxReconnects) throw error;
      options.onReconnect?.(cursor, error);
      await sleep(Math.min(5000, 200 * 2 ** failures), options.signal);
      continue;
    }
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw transport.error(response, body);
    }
    options.onOpen?.();
    let dropped: unknown = new Error("the stream ended without an end event");
    try {
      for await (const item of parseSse(response.body as ReadableStream<Uint8Array>)) {
        failures = 0;
        if (item.id !== undefined) cursor = item.id;
        yield item as TailEvent;
        if (item.event === "end") return;
      }
    } catch (error) {
      if (options.signal?.aborted || error instanceof WarrenError) throw error;
      dropped = error;
    }
    if (++failures > maxReconnects) throw new ConnectionError(`run tail: gave up after ${maxReconnects} reconnects`);
    options.onReconnect?.(cursor, dropped);
    await sleep(Math.min(5000, 100 * 2 ** failures), options.signal);
  }
}
