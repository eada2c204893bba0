// Warren's blob route, which serves the fs blob store's presigned URLs: the signature is
// the only credential, refusals are 403 signature_invalid in the flat envelope, a PUT body
// streams to the store under its own size limit and a PUT of a present key changes nothing.
// The route touches no store, so it runs on PGlite only.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { FsBlobStore } from "../src/drivers/blobs/fs.js";
import { startTestApp, type TestApp, type TestResponse } from "./harness.js";
import { assertErrorEnvelope } from "./support/assertions.js";

const MAX_PUT_BYTES = 2 * 1_048_576 + 1;

describe("presigned blob URLs served by Warren", () => {
  let t: TestApp;
  let dir: string;
  let store: FsBlobStore;
  let clockOffsetMs = 0;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-blob-route-"));
    store = await FsBlobStore.open({
      dir,
      signingKey: randomBytes(32),
      publicBaseUrl: "http://blobs.example:8080/",
      now: () => new Date(Date.now() + clockOffsetMs),
    });
    t = await startTestApp("pglite", {
      config: { blobs: { ...(await import("../src/config.js")).loadConfig({}).blobs, maxPutBytes: MAX_PUT_BYTES } },
      overrides: { blobs: store },
    });
  });
  after(async () => {
    await t?.close();
    await rm(dir, { recursive: true, force: true });
  });

  /** The path and query of a presigned URL, which is what reaches the route. */
  const local = (url: string) => {
    const parsed = new URL(url);
    assert.equal(parsed.origin, "http://blobs.example:8080", "URLs point at the configured public base");
    return `${parsed.pathname}${parsed.search}`;
  };

  async function call(
    method: "GET" | "PUT" | "HEAD",
    url: string,
    body?: Buffer | Readable,
    headers: Record<string, string> = {},
  ): Promise<TestResponse & { bytes: Buffer }> {
    const res = await t.app.inject({ method, url, headers, ...(body !== undefined ? { payload: body } : {}) });
    let parsed: Record<string, unknown> = {};
    try {
      parsed = JSON.parse(res.body) as Record<string, unknown>;
    } catch {
      parsed = {};
    }
    return { status: res.statusCode, headers: res.headers, body: parsed, raw: res.body, bytes: res.rawPayload };
  }

  /** A refusal in the flat envelope: exactly code, message and request_id. */
  function assertFlatError(res: TestResponse, status: number, code: string): void {
    assertErrorEnvelope(res, status, code);
    assert.deepEqual(Object.keys(res.body).sort(), ["code", "message", "request_id"]);
  }

  it("PUTs through a presigned URL without a bearer key, then GETs the bytes back", async () => {
    const bytes = randomBytes(70_000);
    const put = await call("PUT", local(await store.presignPut("org/chunks/one", { expiresInSeconds: 60 })), bytes, {
      "content-type": "application/octet-stream",
    });
    assert.equal(put.status, 201, put.raw);
    const get = await call("GET", local(await store.presignGet("org/chunks/one", { expiresInSeconds: 60 })));
    assert.equal(get.status, 200, get.raw);
    assert.equal(get.headers["content-type"], "application/octet-stream");
    assert.equal(Number(get.headers["content-length"]), bytes.length);
    assert.ok(get.bytes.equals(bytes));
    const head = await call("HEAD", local(await store.presignGet("org/chunks/one", { expiresInSeconds: 60 })));
    assert.equal(head.status, 200);
    assert.equal(Number(head.headers["content-length"]), bytes.length);
  });

  it("takes a body of any media type, or none, and larger than the JSON body limit", async () => {
    const big = randomBytes(2 * 1_048_576);
    const put = await call("PUT", local(await store.presignPut("big", { expiresInSeconds: 60 })), big, {
      "content-type": "text/plain",
    });
    assert.equal(put.status, 201, put.raw);
    assert.ok((await store.get("big"))?.equals(big));
    const empty = await call("PUT", local(await store.presignPut("empty", { expiresInSeconds: 60 })));
    assert.equal(empty.status, 201, empty.raw);
    assert.deepEqual(await store.head("empty"), { size: 0 });
  });

  it("answers a PUT of a present key with 200 and leaves the object as it was", async () => {
    const url = local(await store.presignPut("once", { expiresInSeconds: 60 }));
    assert.equal((await call("PUT", url, Buffer.from("first"))).status, 201);
    const again = await call("PUT", url, Buffer.from("second"));
    assert.equal(again.status, 200, again.raw);
    assert.equal((await store.get("once"))?.toString(), "first");
  });

  it("refuses a body over the limit with 413, declared or streamed, and keeps nothing", async () => {
    const declared = await call(
      "PUT",
      local(await store.presignPut("too-big", { expiresInSeconds: 60 })),
      Buffer.alloc(MAX_PUT_BYTES + 1),
    );
    assertFlatError(declared, 413, "payload_too_large");
    // No Content-Length: the limit is applied to the bytes as they arrive.
    const streamed = await call(
      "PUT",
      local(await store.presignPut("too-big", { expiresInSeconds: 60 })),
      Readable.from([Buffer.alloc(MAX_PUT_BYTES), Buffer.alloc(10)]),
    );
    assertFlatError(streamed, 413, "payload_too_large");
    assert.equal(await store.head("too-big"), null);
    assert.deepEqual(await readdir(path.join(dir, "tmp")), [], "no temp file is left");
  });

  it("answers 404 not_found in the flat envelope for a signed GET of a missing object", async () => {
    const res = await call("GET", local(await store.presignGet("no/such/blob", { expiresInSeconds: 60 })));
    assertFlatError(res, 404, "not_found");
  });

  it("refuses an expired URL with 403 signature_invalid", async () => {
    clockOffsetMs = -3_600_000;
    try {
      const put = await call("PUT", local(await store.presignPut("late", { expiresInSeconds: 60 })), Buffer.from("x"));
      assertFlatError(put, 403, "signature_invalid");
      assert.match(String(put.body.message), /expired/);
      await store.putIfAbsent("late", Buffer.from("x"));
      const get = await call("GET", local(await store.presignGet("late", { expiresInSeconds: 60 })));
      assertFlatError(get, 403, "signature_invalid");
    } finally {
      clockOffsetMs = 0;
    }
    assert.equal((await call("GET", local(await store.presignGet("late", { expiresInSeconds: 60 })))).status, 200);
  });

  it("refuses a URL used for another key, another method, or with a changed signature or expiry", async () => {
    await store.putIfAbsent("a/one", Buffer.from("one"));
    await store.putIfAbsent("a/two", Buffer.from("two"));
    const getOne = local(await store.presignGet("a/one", { expiresInSeconds: 60 }));
    assert.equal((await call("GET", getOne)).status, 200);
    const refusals: [string, "GET" | "PUT", string][] = [
      ["another key", "GET", getOne.replace("/a/one?", "/a/two?")],
      ["a GET URL used to PUT", "PUT", getOne],
      ["a GET URL relabelled as PUT", "PUT", getOne.replace("method=GET", "method=PUT")],
      [
        "a changed signature",
        "GET",
        getOne.replace(/signature=([0-9a-f])/, (_m, c) => `signature=${c === "0" ? "1" : "0"}`),
      ],
      ["a later expiry", "GET", getOne.replace(/expires=(\d+)/, (_m, e) => `expires=${Number(e) + 3600}`)],
      ["no signature", "GET", getOne.replace(/&signature=[0-9a-f]+/, "")],
      ["a signature that is not hex", "GET", getOne.replace(/signature=[0-9a-f]+/, "signature=zz")],
      ["no query at all", "GET", getOne.split("?")[0] ?? ""],
    ];
    for (const [name, method, url] of refusals) {
      const res = await call(method, url, method === "PUT" ? Buffer.from("evil") : undefined);
      assertFlatError(res, 403, "signature_invalid");
      assert.ok(res.status === 403, name);
    }
    assert.equal((await store.get("a/one"))?.toString(), "one");
  });

  it("is not opened by a bearer key: without a signature even an owner key gets 403", async () => {
    const res = await t.request("GET", "/v1/blobs/a/one", { key: t.orgA.keys.owner });
    assertFlatError(res, 403, "signature_invalid");
  });

  it("refuses unknown query parameters with 400 invalid_argument", async () => {
    const url = `${local(await store.presignGet("a/one", { expiresInSeconds: 60 }))}&extra=1`;
    assertFlatError(await call("GET", url), 400, "invalid_argument");
  });

  it("keeps signatures out of the logs and the route out of the OpenAPI document", async () => {
    const url = local(await store.presignGet("a/one", { expiresInSeconds: 60 }));
    await call("GET", url);
    const signature = /signature=([0-9a-f]+)/.exec(url)?.[1] ?? "";
    assert.ok(signature.length === 64);
    assert.ok(!t.logs().includes(signature), "the signature is not logged");
    const doc = await t.request("GET", "/v1/openapi.json");
    assert.ok(!Object.keys(doc.body.paths as object).some((p) => p.startsWith("/v1/blobs")));
  });
});
