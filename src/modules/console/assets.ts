// The web console's built files (console/dist, from `make build`), served at /console on the
// API's listener, so the console and the API share one origin and the session cookie never
// leaves it. Files are read once at start into memory (with a gzip copy of text ones);
// only those files are served, so no request path reaches the file system. Hashed assets
// (/console/assets/*) are cached for a year; everything else, and every path that names no
// file (a deep link: /console/sandboxes/sbx-...), is the index, never cached.
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { gzipSync } from "node:zlib";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { App } from "../../http/types.js";
import { AppError } from "../../lib/errors.js";

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

interface Asset {
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

function send(request: FastifyRequest, reply: FastifyReply, asset: Asset) {
  const gzip = asset.gzip !== null && /\bgzip\b/.test(String(request.headers["accept-encoding"] ?? ""));
  void reply
    .header("content-type", asset.type)
    .header("cache-control", asset.cacheControl)
    .header("content-security-policy", CONSOLE_CSP)
    .header("x-content-type-options", "nosniff")
    .header("referrer-policy", "no-referrer")
    .header("x-frame-options", "DENY")
    .header("vary", "accept-encoding");
  if (gzip) void reply.header("content-encoding", "gzip");
  return reply.send(gzip ? asset.gzip : asset.body);
}

export function registerConsoleAssets(app: App, dir: string): void {
  const assets = loadConsoleAssets(dir);
  const index = assets.get("index.html");
  const schema = { hide: true, querystring: { type: "object" } } as Record<string, unknown>;
  const serve = async (request: FastifyRequest<{ Params: { "*"?: string } }>, reply: FastifyReply) => {
    if (!index) {
      throw new AppError("not_found", "the console is not built in this checkout: run make build (it builds console/)");
    }
    const rel = request.params["*"] ?? "";
    const asset = assets.get(rel);
    if (asset) return send(request, reply, asset);
    // A missing hashed file is a 404 (an old page asking for a script of an earlier build), not the index.
    if (rel.startsWith("assets/")) throw new AppError("not_found", `no console file ${rel}`);
    return send(request, reply, index);
  };
  app.get("/console", { config: { auth: false }, schema }, serve);
  app.get("/console/*", { config: { auth: false }, schema }, serve);
}
