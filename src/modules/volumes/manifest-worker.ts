// The manifest parser's thread (manifest-parser.ts): parses and checks one uploaded manifest
// and builds its canonical bytes, off the server's event loop. Answers what a publish needs
// (not the file list): counts, blobs, the content digest and the canonical bytes.
import { parentPort, workerData } from "node:worker_threads";
import { AppError } from "../../lib/errors.js";
import { canonicalBytes, parseManifest } from "./manifest.js";
import type { ParseReply, ParseRequest } from "./manifest-parser.js";

const request = workerData as ParseRequest;
let reply: ParseReply;
try {
  const manifest = parseManifest(Buffer.from(request.bytes), request.maxFiles);
  const canonical = canonicalBytes(manifest, request.parent);
  reply = {
    ok: true,
    fileCount: manifest.fileCount,
    sizeBytes: manifest.sizeBytes,
    blobs: manifest.blobs,
    contentDigest: manifest.contentDigest,
    canonical: new Uint8Array(canonical.buffer, canonical.byteOffset, canonical.byteLength),
  };
} catch (error) {
  reply =
    error instanceof AppError
      ? { ok: false, code: error.code, message: error.message }
      : { ok: false, code: "internal", message: error instanceof Error ? error.message : String(error) };
}
parentPort?.postMessage(reply, reply.ok ? [reply.canonical.buffer as ArrayBuffer] : []);
