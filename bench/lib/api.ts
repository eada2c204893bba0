// Calls to the server's JSON API with the bootstrap key, from the benchmark process.

async function send(base: string, key: string, method: string, route: string, body?: unknown) {
  const response = await fetch(`${base}${route}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, text: await response.text() };
}

/** Any status, with the parsed body. */
export async function call<T>(
  base: string,
  key: string,
  method: string,
  route: string,
  body?: unknown,
): Promise<{ status: number; body: T }> {
  const res = await send(base, key, method, route, body);
  return { status: res.status, body: JSON.parse(res.text) as T };
}

/** The parsed body of a 200 response; any other status throws. */
export async function api<T>(base: string, key: string, method: string, route: string, body?: unknown): Promise<T> {
  const res = await send(base, key, method, route, body);
  if (res.status !== 200) throw new Error(`${method} ${route}: ${res.status} ${res.text}`);
  return JSON.parse(res.text) as T;
}
