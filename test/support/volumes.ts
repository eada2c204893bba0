// Volume pushes driven through the API in-process: a tree given as path -> bytes, cut
// into chunks like the push helper, uploaded to the presigned URLs (Warren's own blob
// route through inject, or S3 through fetch).
import assert from "node:assert/strict";
import { blake3 } from "@napi-rs/blake-hash";
import type { TestApp, TestResponse } from "../harness.js";

export const digest = (bytes: Uint8Array) => `blake3:${blake3(bytes).toString("hex")}`;

export interface PushedTree {
  manifest: {
    version: 1;
    files: { path: string; mode: number; size: number; digest: string; chunks: { digest: string; size: number }[] }[];
  };
  blobs: Map<string, Buffer>;
}

/** The manifest and blobs of a tree, files cut into `chunkBytes` chunks. */
export function treeOf(files: Record<string, Buffer | string>, chunkBytes = 4 * 1_048_576, mode = 0o644): PushedTree {
  const blobs = new Map<string, Buffer>();
  const entries = Object.entries(files).map(([path, content]) => {
    const bytes = Buffer.isBuffer(content) ? content : Buffer.from(content);
    const chunks = [];
    for (let at = 0; at < bytes.length; at += chunkBytes) {
      const piece = bytes.subarray(at, at + chunkBytes);
      blobs.set(digest(piece), piece);
      chunks.push({ digest: digest(piece), size: piece.length });
    }
    return { path, mode, size: bytes.length, digest: digest(bytes), chunks };
  });
  return { manifest: { version: 1, files: entries }, blobs };
}

/** PUTs bytes to a presigned URL: Warren's own route in-process, anything else over HTTP. */
export async function putUrl(t: TestApp, url: string, body: Buffer): Promise<number> {
  const parsed = new URL(url);
  if (parsed.pathname.startsWith("/v1/blobs/") && url.startsWith(t.c.config.publicApiUrl)) {
    const res = await t.app.inject({
      method: "PUT",
      url: `${parsed.pathname}${parsed.search}`,
      payload: body,
      headers: { "content-type": "application/octet-stream" },
    });
    return res.statusCode;
  }
  const res = await fetch(url, { method: "PUT", body: body as unknown as BodyInit });
  await res.arrayBuffer();
  return res.status;
}

export interface PushOutcome {
  publish: TestResponse;
  pushId: string;
  uploaded: string[];
}

export async function startPush(t: TestApp, key: string, volumeId: string) {
  const res = await t.request("POST", `/v1/volumes/${volumeId}/pushes`, { key, body: {} });
  assert.equal(res.status, 200, res.raw);
  return res.body as {
    push_id: string;
    manifest_upload_url: string;
    expires_in_seconds: number;
    max_manifest_bytes: string;
  };
}

export async function requestUploads(t: TestApp, key: string, pushId: string, tree: PushedTree) {
  const blobs = [...tree.blobs].map(([d, bytes]) => ({ digest: d, size_bytes: String(bytes.length) }));
  const res = await t.request("POST", `/v1/volume-pushes/${pushId}/blob-uploads`, { key, body: { blobs } });
  assert.equal(res.status, 200, res.raw);
  return res.body.uploads as { digest: string; present: boolean; upload_url: string }[];
}

/** The whole protocol: start, upload what is missing, upload the manifest, publish. */
export async function pushTree(t: TestApp, key: string, volumeId: string, tree: PushedTree): Promise<PushOutcome> {
  const start = await startPush(t, key, volumeId);
  const uploads = await requestUploads(t, key, start.push_id, tree);
  const uploaded: string[] = [];
  for (const upload of uploads) {
    if (upload.present) continue;
    assert.equal(upload.upload_url !== "", true);
    assert.ok([200, 201].includes(await putUrl(t, upload.upload_url, tree.blobs.get(upload.digest) as Buffer)));
    uploaded.push(upload.digest);
  }
  const manifestStatus = await putUrl(t, start.manifest_upload_url, Buffer.from(JSON.stringify(tree.manifest)));
  assert.ok([200, 201].includes(manifestStatus), String(manifestStatus));
  const publish = await t.request("POST", `/v1/volume-pushes/${start.push_id}/publish`, { key, body: {} });
  return { publish, pushId: start.push_id, uploaded };
}

export async function createVolume(t: TestApp, key: string, name: string, quota = "1073741824") {
  const res = await t.request("POST", "/v1/volumes", { key, body: { name, quota_bytes: quota } });
  assert.equal(res.status, 200, res.raw);
  return res.body.volume as { id: string; current_version_digest: string; used_bytes: string };
}
