// The console's session cookie at the API edge (docs/api-decisions.md "Console sessions"): its
// names, the Set-Cookie values, and the origin rule that makes it CSRF-safe. A request without
// an Authorization header that carries the cookie is authenticated by it, and only when it
// comes from the console's own origin: unsafe methods and WebSocket upgrades must name that
// origin (browsers always send Origin on them), and any request naming another origin, or that
// the browser marks as sent from another site or origin (Sec-Fetch-Site), is refused.
import type { FastifyRequest } from "fastify";
import { AppError } from "../lib/errors.js";

/** The cookie over plain HTTP (a browser refuses the __Host- prefix without Secure). */
export const CONSOLE_COOKIE = "warren_console";
/** The cookie under TLS: __Host- binds it to this exact host, path / and Secure. */
export const CONSOLE_COOKIE_SECURE = "__Host-warren_console";
/** The longest cookie value read (a secret is 47 characters). */
const MAX_SECRET_LENGTH = 256;
const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/** The console session's secret from a Cookie header; null when it carries none. */
export function consoleCookieSecret(cookie: string | undefined): string | null {
  if (!cookie?.includes(CONSOLE_COOKIE)) return null;
  for (const part of cookie.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    if (name !== CONSOLE_COOKIE && name !== CONSOLE_COOKIE_SECURE) continue;
    const value = part.slice(eq + 1).trim();
    if (value.length === 0 || value.length > MAX_SECRET_LENGTH) return null;
    return value;
  }
  return null;
}

/** Whether the request arrived over TLS (here, or at a front proxy that says so). */
export function isSecureRequest(request: FastifyRequest): boolean {
  return request.protocol === "https" || request.headers["x-forwarded-proto"] === "https";
}

/** The Set-Cookie value that hands the browser its session. */
export function sessionCookie(secret: string, maxAgeSeconds: number, secure: boolean): string {
  const name = secure ? CONSOLE_COOKIE_SECURE : CONSOLE_COOKIE;
  return `${name}=${secret}; Path=/; Max-Age=${maxAgeSeconds}; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}`;
}

/** The Set-Cookie value that removes it. */
export function clearedSessionCookie(secure: boolean): string {
  return sessionCookie("", 0, secure);
}

/**
 * Refuses (403 permission_denied) a cookie-authenticated request that did not come from the
 * console's own origin: the host the request was sent to (its Host header).
 */
export function checkConsoleOrigin(request: FastifyRequest): void {
  const refused = () =>
    new AppError("permission_denied", "the console session is accepted only from pages of the console's own origin");
  const fetchSite = request.headers["sec-fetch-site"];
  if (fetchSite !== undefined && fetchSite !== "same-origin" && fetchSite !== "none") throw refused();
  const origin = request.headers.origin;
  const needsOrigin = !SAFE_METHODS.has(request.method) || request.headers.upgrade !== undefined;
  if (origin === undefined) {
    if (needsOrigin) throw refused();
    return;
  }
  // Both read as URLs of the origin's scheme, so a default port written or not compares equal.
  let same = false;
  try {
    const from = new URL(origin);
    same =
      request.headers.host !== undefined && new URL(`${from.protocol}//${request.headers.host}`).host === from.host;
  } catch {
    same = false;
  }
  if (!same) throw refused();
}
