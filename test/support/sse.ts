// A server-sent-events client over a real socket (node:http), for the run tail's tests:
// items are parsed as they arrive, and close() drops the connection mid-stream.
import http from "node:http";

export interface SseItem {
  id?: string;
  event?: string;
  data: Record<string, unknown>;
}

export interface SseStream {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** The body of a refused request (not a stream). */
  body: string;
  /** The next item, or null when the stream ended. Heartbeat comments are counted, not returned. */
  next(timeoutMs?: number): Promise<SseItem | null>;
  heartbeats(): number;
  close(): void;
}

export function openSse(url: string, headers: Record<string, string>): Promise<SseStream> {
  return new Promise((resolve, reject) => {
    const request = http.get(url, { headers: { accept: "text/event-stream", ...headers } }, (res) => {
      const status = res.statusCode ?? 0;
      res.setEncoding("utf8");
      if (status !== 200) {
        let body = "";
        res.on("data", (chunk: string) => {
          body += chunk;
        });
        res.on("end", () => resolve(refused(status, res.headers, body)));
        return;
      }
      const items: SseItem[] = [];
      const waiters: (() => void)[] = [];
      let buffer = "";
      let ended = false;
      let heartbeats = 0;
      const notify = () => {
        for (const waiter of waiters.splice(0)) waiter();
      };
      res.on("data", (chunk: string) => {
        buffer += chunk;
        for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const item: Partial<SseItem> = {};
          let data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) heartbeats += 1;
            else if (line.startsWith("id: ")) item.id = line.slice(4);
            else if (line.startsWith("event: ")) item.event = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (data) items.push({ ...item, data: JSON.parse(data) as Record<string, unknown> });
        }
        notify();
      });
      const finish = () => {
        ended = true;
        notify();
      };
      res.on("end", finish);
      res.on("error", finish);
      res.on("close", finish);
      resolve({
        status,
        headers: res.headers,
        body: "",
        heartbeats: () => heartbeats,
        next: async (timeoutMs = 10_000) => {
          const deadline = Date.now() + timeoutMs;
          while (items.length === 0 && !ended) {
            const left = deadline - Date.now();
            if (left <= 0) throw new Error("no item within the timeout");
            await new Promise<void>((wake) => {
              const timer = setTimeout(wake, left);
              waiters.push(() => {
                clearTimeout(timer);
                wake();
              });
            });
          }
          return items.shift() ?? null;
        },
        close: () => {
          request.destroy();
          finish();
        },
      });
    });
    request.on("error", reject);
  });
}

function refused(status: number, headers: http.IncomingHttpHeaders, body: string): SseStream {
  return {
    status,
    headers,
    body,
    heartbeats: () => 0,
    next: async () => null,
    close: () => undefined,
  };
}
