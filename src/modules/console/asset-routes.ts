// GET /console and /console/*: the web console on the API's listener, so the console and the
// API share one origin and the session cookie never leaves it. Every path that names no file
// (a deep link: /console/sandboxes/sbx-...) is the index; a missing hashed asset is a 404.
import type { FastifyReply, FastifyRequest } from "fastify";
import type { App } from "../../http/types.js";
import { AppError } from "../../lib/errors.js";
import { type Asset, CONSOLE_CSP, loadConsoleAssets } from "./assets.js";

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
