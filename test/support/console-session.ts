// Console sessions in tests: open one with a key (POST /v1/console/sessions) and the headers a
// page of the console's own origin sends with its cookie (injected requests' Host is localhost:80).
import assert from "node:assert/strict";
import type { TestApp } from "../harness.js";

export const CONSOLE_ORIGIN = "http://localhost:80";

export interface OpenedSession {
  /** The whole Set-Cookie value. */
  setCookie: string;
  /** `name=value`, as a Cookie header. */
  cookie: string;
  secret: string;
  sessionId: string;
}

export async function openSession(
  t: TestApp,
  key: string,
  headers: Record<string, string> = {},
): Promise<OpenedSession> {
  const res = await t.request("POST", "/v1/console/sessions", { key, headers });
  assert.equal(res.status, 200, res.raw);
  const setCookie = String(res.headers["set-cookie"]);
  const pair = setCookie.split(";")[0] as string;
  return {
    setCookie,
    cookie: pair,
    secret: pair.slice(pair.indexOf("=") + 1),
    sessionId: (res.body.session as { session_id: string }).session_id,
  };
}

/** The headers of a same-origin page's request with the session's cookie. */
export function sameOrigin(session: OpenedSession, extra: Record<string, string> = {}): Record<string, string> {
  return { cookie: session.cookie, origin: CONSOLE_ORIGIN, "sec-fetch-site": "same-origin", ...extra };
}
