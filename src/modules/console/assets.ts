// The web console's built files (console/dist, from `make build`), read once at start into
// memory (with a gzip copy of text ones), and the page's Content-Security-Policy;
// asset-routes.ts serves them at /console. Only these files are served, so no request path
// reaches the file system. Hashed assets (assets/*) are cached for a year, the rest never.
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { gzipSync } from "node:zlib";

/**
 * No inline script, no eval, nothing from another origin. Styles allow 'unsafe-inline': the
 * terminal (xterm.js) writes its measured cell sizes into a <style> element at run time.
 */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".woff2": "font/woff2",
  ".txt": "text/plain; charset=utf-8",
};
const COMPRESSIBLE = new Set([".html", ".js", ".css", ".svg", ".json", ".txt"]);
const IMMUTABLE = "public, max-age=31536000, immutable";
/** A built console larger than this is refused at start rather than held in memory. */
const MAX_TOTAL_BYTES = 64 * 1_048_576;

export interface Asset {
  body: Buffer;
  gzip: Buffer | null;
  type: string;
  cacheControl: string;
}

/** The files of a built console by their URL path below /console/ ("" is the index); empty when it is not built. */
export function loadConsoleAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  let total = 0;
  const walk = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const full = path.join(at, entry.name);
      if (entry.isDirectory()) {
        walk(full);
        continue;
      }
      if (!entry.isFile()) continue;
      total += statSync(full).size;
      if (total > MAX_TOTAL_BYTES)
        throw new Error(`the built console in ${dir} is larger than ${MAX_TOTAL_BYTES} bytes`);
      const rel = path.relative(dir, full).split(path.sep).join("/");
      const ext = path.extname(entry.name).toLowerCase();
      const body = readFileSync(full);
      assets.set(rel, {
        body,
        gzip: COMPRESSIBLE.has(ext) && body.length > 512 ? gzipSync(body, { level: 9 }) : null,
        type: TYPES[ext] ?? "application/octet-stream",
        cacheControl: rel.startsWith("assets/") ? IMMUTABLE : "no-cache",
      });
    }
  };
  try {
    if (!statSync(dir).isDirectory()) return assets;
  } catch {
    return assets;
  }
  walk(dir);
  return assets;
}
