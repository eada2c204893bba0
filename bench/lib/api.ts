// Calls to the server's JSON API with the bootstrap key, from the benchmark process.
import http from "node:http";

// node:http over one keep-alive agent: fetch (undici) adds about a millisecond of client CPU
// per request, which a benchmark of a few-millisecond call must not count as the server's.
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function send(
  base: string,
  key: string,
  method: string,
  route: string,
  body?: unknown,
  extraHeaders: Record<string, string> = {},
) {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise<{ status: number; text: string }>((resolve, reject) => {
    const request = http.request(
      `${base}${route}`,
      {
        method,
        agent,
        headers: {
          authorization: `Bearer ${key}`,
          ...extraHeaders,
          ...(payload !== undefined
            ? { "content-type": "application/json", "content-length": Buffer.byteLength(payload) }
            : {}),
        },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }),
        );
        response.on("error", reject);
      },
    );
    request.on("error", reject);
    request.end(payload);
  });
}

/** Any status, with the parsed body. */
export async function call<T>(
  base: string,
  key: string,
  method: string,
  route: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: T }> {
  const res = await send(base, key, method, route, body, headers);
  return { status: res.status, body: JSON.parse(res.text) as T };
}

/** The parsed body of a 200 response; any other status throws. */
export async function api<T>(base: string, key: string, method: string, route: string, body?: unknown): Promise<T> {
  const res = await send(base, key, method, route, body);
  if (res.status !== 200) throw new Error(`${method} ${route}: ${res.status} ${res.text}`);
  return JSON.parse(res.text) as T;
}
