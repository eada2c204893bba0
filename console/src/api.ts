// The console's one client of the API: the SDK (packages/sdk), authenticated by the session
// cookie (no key is ever kept in the browser: the key typed at sign-in is sent once, to
// exchange it for the cookie, and dropped).
import { errorFromResponse, Warren, WarrenApiError } from "@warren/sdk";

const origin = location.origin;

/** The client every page uses: no key, so the browser's cookie is the credential. */
export const api = new Warren({ apiKey: "", baseUrl: origin, maxRetries: 1 });

/** Exchanges an API key for the session cookie (POST /v1/console/sessions). */
export async function signIn(apiKey: string): Promise<void> {
  const once = new Warren({ apiKey, baseUrl: origin, maxRetries: 0 });
  await once.transport.json("POST", "/v1/console/sessions");
}

/** Revokes the session and clears its cookie. */
export async function signOut(): Promise<void> {
  await api.transport.json("DELETE", "/v1/console/sessions/current");
}

/** The API's message for an error, as the API words it. */
export function messageOf(error: unknown): string {
  if (error instanceof WarrenApiError) return `${error.message} (${error.code})`;
  if (error instanceof Error) return error.message;
  return String(error);
}

export function isUnauthenticated(error: unknown): boolean {
  return error instanceof WarrenApiError && error.status === 401;
}

/** One page of a list route, through the SDK's transport. */
export async function listPage<T>(
  route: string,
  key: string,
  pageToken: string,
  query: Record<string, string | number | undefined> = {},
  pageSize = 50,
): Promise<{ items: T[]; next: string }> {
  const page = await api.transport.json<Record<string, unknown>>("GET", route, {
    query: { ...query, page_size: pageSize, ...(pageToken ? { page_token: pageToken } : {}) },
  });
  return { items: (page[key] as T[] | undefined) ?? [], next: String(page.next_page_token ?? "") };
}

/**
 * Writes a file of a sandbox (PUT /v1/sandboxes/{id}/files, WriteSandboxFile) with the bytes as
 * one body. Not the SDK's `files.upload`: it streams its body, and Chrome sends a streamed
 * request body only over HTTP/2 (the API speaks HTTP/1.1).
 */
export async function uploadFile(sandboxId: string, filePath: string, bytes: Uint8Array): Promise<void> {
  const url = api.transport.url(`/v1/sandboxes/${encodeURIComponent(sandboxId)}/files`, { path: filePath });
  const response = await fetch(url, {
    method: "PUT",
    headers: { "content-type": "application/octet-stream", accept: "application/json" },
    body: new Blob([new Uint8Array(bytes)]),
  });
  if (response.ok) return;
  const text = await response.text();
  let parsed: unknown = {};
  try {
    parsed = text ? JSON.parse(text) : {};
  } catch {
    parsed = { message: text.slice(0, 200) };
  }
  throw errorFromResponse(response.status, parsed, response.headers.get("retry-after"));
}
