// A push interrupted by a crash (SIGKILL of the real server, PGlite and the fs blob store in
// its data dir) between its uploads and its publish: a blob whose upload was answered is
// durable and verified after the restart (present to the next push, never sent again); one
// whose upload was cut short left only a temp file, which the store removes at open, and
// counts as missing; the push then publishes with the same bytes.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import http from "node:http";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { volumeKeys } from "../src/modules/volumes/blobs.js";
import { type CrashRig, eventually, startCrashRig } from "./support/server-process.js";
import { treeOf } from "./support/volumes.js";

const KEY = `wrn_test_${randomBytes(16).toString("hex")}`;

/** PUTs `body` to a presigned URL over HTTP and answers the status. */
async function put(url: string, body: Buffer): Promise<number> {
  const res = await fetch(url, { method: "PUT", body: body as unknown as BodyInit });
  await res.arrayBuffer();
  return res.status;
}

describe("volume push across a server crash [pglite, fs blob store]", () => {
  let rig: CrashRig;

  before(async () => {
    rig = await startCrashRig("volcrash", KEY, () => ({ WARREN_SANDBOX_POOL_SIZE: "0" }));
  });

  after(async () => {
    await rig?.cleanup();
  });

  it("keeps an answered upload and drops a cut-short one; the push publishes after the restart", async () => {
    const { server } = rig;
    await server.start();
    const ok = async (method: string, url: string, body?: unknown) => {
      const res = await server.api(method, url, body);
      assert.equal(res.status, 200, res.raw);
      return res.body;
    };
    const volume = (await ok("POST", "/v1/volumes", { name: "crash", quota_bytes: "1073741824" })).volume as {
      id: string;
    };
    const tree = treeOf({ "f.bin": randomBytes(2 * 1_048_576) }, 1_048_576);
    const [first, second] = [...tree.blobs.keys()] as [string, string];
    const blobs = [...tree.blobs].map(([digest, bytes]) => ({ digest, size_bytes: String(bytes.length) }));
    const start = (await ok("POST", `/v1/volumes/${volume.id}/pushes`, {})) as {
      push_id: string;
      manifest_upload_url: string;
    };
    const uploads = (await ok("POST", `/v1/volume-pushes/${start.push_id}/blob-uploads`, { blobs })).uploads as {
      digest: string;
      upload_url: string;
    }[];
    const urlOf = (digest: string) => uploads.find((upload) => upload.digest === digest)?.upload_url ?? "";
    assert.equal(await put(urlOf(first), tree.blobs.get(first) as Buffer), 201);

    // The second upload is cut short: half its bytes sent, then the server is killed.
    const tmp = path.join(rig.dataDir, "blobs", "tmp");
    const half = (tree.blobs.get(second) as Buffer).subarray(0, 512 * 1024);
    const request = http.request(urlOf(second), {
      method: "PUT",
      headers: { "content-length": String(1_048_576) },
    });
    request.on("error", () => undefined);
    request.write(half);
    const killedPid = server.pid;
    await eventually("the cut-short upload's temp file", async () => (await readdir(tmp)).length > 0);
    assert.equal(await server.stop("SIGKILL"), null, "killed, not exited");
    request.destroy();

    await server.start();
    assert.deepEqual(
      (await readdir(tmp)).filter((name) => name.startsWith(`${killedPid}-`)),
      [],
      "the killed server's temp file is gone once the store reopened",
    );
    const orgId = (await readdir(path.join(rig.dataDir, "blobs", "objects", "volumes")))[0] as string;
    const stored = path.join(rig.dataDir, "blobs", "objects", `${volumeKeys.blob(orgId, first)}@`);
    assert.ok((await readFile(stored)).equals(tree.blobs.get(first) as Buffer), "the answered upload is whole");

    // The same push goes on: the first blob is present, the second is missing and uploaded.
    const again = (await ok("POST", `/v1/volume-pushes/${start.push_id}/blob-uploads`, { blobs })).uploads as {
      digest: string;
      present: boolean;
      upload_url: string;
    }[];
    assert.deepEqual(
      again.map((upload) => [upload.digest, upload.present]).sort(),
      [
        [first, true],
        [second, false],
      ].sort(),
    );
    const missing = again.find((upload) => !upload.present);
    assert.equal(await put(missing?.upload_url ?? "", tree.blobs.get(second) as Buffer), 201);
    assert.equal(await put(start.manifest_upload_url, Buffer.from(JSON.stringify(tree.manifest))), 201);
    const version = (await ok("POST", `/v1/volume-pushes/${start.push_id}/publish`, {})).version as {
      size_bytes: string;
    };
    assert.equal(version.size_bytes, String(2 * 1_048_576));
  });
});
