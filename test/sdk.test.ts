// The SDK (packages/sdk) against a real server listening on TCP, on both stores: every
// contract group, typed errors, retries through a misbehaving proxy (a lost answer is
// retried under the same Idempotency-Key and never creates twice; 503 and 429 honour
// Retry-After), AbortSignal, and the run tail resuming after a dropped connection.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { blake3 } from "@napi-rs/blake-hash";
import {
  ConnectionError,
  NotFoundError,
  PermissionDeniedError,
  QuotaExceededError,
  type TailEvent,
  toArray,
  Warren,
  WarrenApiError,
} from "../packages/sdk/src/index.js";
import { STORE_KINDS } from "./harness.js";
import { type ApiServer, type FaultyProxy, startApiServer, startFaultyProxy } from "./support/sdk-server.js";

for (const store of STORE_KINDS) {
  describe(`SDK [${store}]`, () => {
    let api: ApiServer;
    let proxy: FaultyProxy;
    let warren: Warren;
    let tmp: string;
    const sdk = (apiKey: string, baseUrl = api.url) => new Warren({ apiKey, baseUrl, retryBaseDelayMs: 20 });

    before(async () => {
      api = await startApiServer(store);
      proxy = await startFaultyProxy(api.url);
      warren = sdk(api.t.orgA.keys.owner);
      tmp = await mkdtemp(path.join(os.tmpdir(), "warren-sdk-"));
    });
    after(async () => {
      await proxy?.close();
      await api?.close();
      if (tmp) await rm(tmp, { recursive: true, force: true });
    });

    it("defaults to WARREN_API_KEY / WARREN_API_URL and answers whoami", async () => {
      const saved = { key: process.env.WARREN_API_KEY, url: process.env.WARREN_API_URL };
      process.env.WARREN_API_KEY = api.t.orgA.keys.member;
      process.env.WARREN_API_URL = api.url;
      try {
        const who = await new Warren().whoami();
        assert.equal((who.organization as { id: string }).id, api.t.orgA.id);
        assert.equal(who.principal.key_id, api.t.orgA.keyIds.member);
      } finally {
        for (const [name, value] of [
          ["WARREN_API_KEY", saved.key],
          ["WARREN_API_URL", saved.url],
        ] as const) {
          if (value === undefined) delete process.env[name];
          else process.env[name] = value;
        }
      }
    });

    it("maps error envelopes to one class per code; another org's project is NotFoundError", async () => {
      const theirs = await sdk(api.t.orgB.keys.owner).projects.create({ name: "theirs", slug: "theirs" });
      const error = await warren.projects.get(theirs.id).catch((e: unknown) => e);
      assert.ok(error instanceof NotFoundError, String(error));
      assert.equal(error.code, "not_found");
      assert.equal(error.status, 404);
      const bad = await sdk("wrn_not_a_key")
        .whoami()
        .catch((e: unknown) => e);
      assert.ok(bad instanceof WarrenApiError && bad.status === 401, String(bad));
      const denied = await sdk(api.t.orgA.keys.member)
        .secrets.create({ name: "nope", value: "x" })
        .catch((e: unknown) => e);
      assert.ok(denied instanceof PermissionDeniedError, String(denied));
      assert.ok(!String((denied as Error).message).includes(api.t.orgA.keys.member));
    });

    it("QuotaExceededError carries the exhausted metric", async () => {
      await api.t.c.admin.setQuota(api.t.orgB.slug, "projects.total", 1);
      const started = Date.now();
      try {
        const owner = sdk(api.t.orgB.keys.owner);
        const error = await owner.projects.create({ name: "over", slug: "over" }).catch((e: unknown) => e);
        assert.ok(error instanceof QuotaExceededError, String(error));
        assert.equal(error.metric, "projects.total");
        assert.equal(error.limit, 1);
        assert.ok(
          error.retryAfterSeconds === undefined || error.retryAfterSeconds > 10,
          "a long wait is not slept through",
        );
        assert.ok(Date.now() - started < 5000, `answered at once, not after ${Date.now() - started} ms`);
      } finally {
        await api.t.c.admin.setQuota(api.t.orgB.slug, "projects.total", null);
      }
    });

    it("retries a create whose answer was lost under the same Idempotency-Key: one project, not two", async () => {
      const client = sdk(api.t.orgA.keys.owner, proxy.url);
      const before = (await toArray(warren.projects.list())).length;
      proxy.dropNextAfterRequest("POST /v1/projects");
      const project = await client.projects.create({ name: "exactly-once", slug: "exactly-once" });
      const posts = proxy.seen.filter((line) => line.startsWith("POST /v1/projects"));
      assert.equal(posts.length, 2, "the first answer was lost, so the SDK sent it again");
      const after = await toArray(warren.projects.list());
      assert.equal(after.length, before + 1, "the retry replayed the first create");
      assert.equal(after.filter((p) => p.name === "exactly-once").length, 1);
      assert.ok(after.some((p) => p.id === project.id));
    });

    it("honours Retry-After on 503 and 429, and gives up with the error after maxRetries", async () => {
      const client = sdk(api.t.orgA.keys.owner, proxy.url);
      proxy.refuseNext(503, 1);
      const started = Date.now();
      const who = await client.whoami();
      assert.ok(Date.now() - started >= 950, `waited ${Date.now() - started} ms for Retry-After: 1`);
      assert.equal((who.organization as { id: string }).id, api.t.orgA.id);
      const noRetry = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: proxy.url, maxRetries: 0 });
      proxy.refuseNext(429, 1);
      const error = await noRetry.whoami().catch((e: unknown) => e);
      assert.ok(
        error instanceof WarrenApiError && error.status === 429 && error.retryAfterSeconds === 1,
        String(error),
      );
      const down = await sdk(api.t.orgA.keys.owner, "http://127.0.0.1:1")
        .whoami()
        .catch((e: unknown) => e);
      assert.ok(down instanceof ConnectionError, String(down));
    });

    it("retries 409 operation_conflict while its key is in flight, until the holder is gone", async () => {
      const key = `inflight-${store}-${Date.now()}`;
      const first = await warren.runs.start({ label: "in flight" }, { idempotencyKey: key });
      // The claim as a request still running in another process (on the embedded store, this one) left it.
      const holder = store === "postgres" ? "01JBUSYPR0CESS0000000000000" : api.t.c.idempotency.instanceId;
      if (store === "postgres") await api.t.c.db.query("INSERT INTO server_instances (id) VALUES ($1)", [holder]);
      await api.t.c.db.query(
        `UPDATE idempotency_keys SET state = 'pending', status_code = NULL, response_body = NULL, holder = $2
          WHERE idempotency_key = $1`,
        [key, holder],
      );
      const statuses: number[] = [];
      const client = new Warren({
        apiKey: api.t.orgA.keys.owner,
        baseUrl: api.url,
        fetch: async (input, init) => {
          const response = await fetch(input, init);
          statuses.push(response.status);
          // After the first conflict the holder dies (a crash the server now knows of).
          if (statuses.length === 1) {
            await (store === "postgres"
              ? api.t.c.db.query(
                  "UPDATE server_instances SET heartbeat_at = now() - interval '1 minute' WHERE id = $1",
                  [holder],
                )
              : api.t.c.db.query("UPDATE idempotency_keys SET holder = 'gone' WHERE idempotency_key = $1", [key]));
          }
          return response;
        },
      });
      try {
        const run = await client.runs.start({ label: "in flight" }, { idempotencyKey: key });
        assert.deepEqual(statuses, [409, 200]);
        assert.notEqual(run.id, first.id, "the retry that took the claim over ran the start anew");
      } finally {
        await api.t.c.db.query("DELETE FROM server_instances WHERE id = $1", [holder]);
      }
      const impatient = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url, inFlightRetrySeconds: 0 });
      await api.t.c.db.query("UPDATE idempotency_keys SET state = 'pending', holder = $2 WHERE idempotency_key = $1", [
        key,
        api.t.c.idempotency.instanceId,
      ]);
      const error = await impatient.runs
        .start({ label: "in flight" }, { idempotencyKey: key })
        .catch((e: unknown) => e);
      assert.ok(error instanceof WarrenApiError && error.code === "operation_conflict", String(error));
    });

    it("aborts a call with its AbortSignal", async () => {
      const controller = new AbortController();
      proxy.refuseNext(503, 5);
      const call = sdk(api.t.orgA.keys.owner, proxy.url).whoami({ signal: controller.signal });
      let abortedAt = 0;
      setTimeout(() => {
        abortedAt = Date.now();
        controller.abort(new Error("stop"));
      }, 100);
      await assert.rejects(call, /stop/);
      // Measured from the abort, against the 5 s Retry-After it cut short (not the machine's speed).
      assert.ok(abortedAt > 0 && Date.now() - abortedAt < 4000, "the abort cut the Retry-After wait short");
    });

    it("projects, runs (list as an async iterator over pages), workloads, usage, feedback", async () => {
      const project = await warren.projects.create({ name: "sdk-project", slug: "sdk-project" });
      const renamed = await warren.projects.update(project.id, { name: "sdk-renamed" }, { ifMatch: project.version });
      assert.equal(renamed.name, "sdk-renamed");
      const stale = await warren.projects
        .update(project.id, { name: "x" }, { ifMatch: project.version })
        .catch((e: unknown) => e);
      assert.equal((stale as WarrenApiError).code, "precondition_failed");
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push(await warren.runs.start({ project_id: project.id, label: `r${i}` }));
      const listed = [];
      for await (const run of warren.runs.list({ project_id: project.id, page_size: 2 })) listed.push(run.id);
      assert.deepEqual(listed, runs.map((r) => r.id).reverse(), "three runs over two pages, newest first");
      const done = await warren.runs.complete(runs[0]?.id as string, "succeeded");
      assert.equal(done.status, "succeeded");
      assert.equal((await warren.runs.get(done.id)).status, "succeeded");
      const workload = await warren.workloads.create({ name: "sdk-bot" });
      assert.equal(workload.name, "sdk-bot");
      assert.ok((await toArray(warren.workloads.list())).some((w) => w.name === "sdk-bot"));
      const usage = await warren.usage();
      assert.ok(usage, "a usage snapshot");
      const feedback = await warren.feedback({ title: "sdk feedback", surface: "api" } as never);
      assert.ok(feedback.id);
      await warren.projects.delete(project.id, { cascade: true });
      await assert.rejects(warren.projects.get(project.id), NotFoundError);
    });

    it("schemas, annotations (a minted event_id converges), SQL and data views", async () => {
      const run = await warren.runs.start({ project_id: api.t.orgA.defaultProjectId, label: "annotated" });
      const schema = await warren.schemas.register({
        name: "sdk_rating",
        json_schema: JSON.stringify({
          type: "object",
          properties: { score: { type: "integer" } },
          required: ["score"],
        }),
      } as never);
      assert.equal(String(schema.version), "1");
      const first = await warren.annotations.annotate({
        schema_name: "sdk_rating",
        run_id: run.id,
        payload: { score: 4 },
      });
      assert.equal(first.event_id.length, 26);
      const again = await warren.annotations.annotate({
        schema_name: "sdk_rating",
        run_id: run.id,
        payload: { score: 4 },
        event_id: first.event_id,
      });
      assert.equal(again.event_id, first.event_id);
      const invalid = await warren.annotations
        .annotate({ schema_name: "sdk_rating", run_id: run.id, payload: { score: "high" } })
        .catch((e: unknown) => e);
      assert.equal((invalid as WarrenApiError).code, "invalid_argument");
      const result = await warren.sql(
        `SELECT schema_name, payload_json FROM annotations WHERE run_id = '${run.id}' ORDER BY ts_wall_ns`,
      );
      assert.deepEqual(result.rows, [["sdk_rating", '{"score":4}']]);
      await warren.views.put("sdk-by-label", {
        spec: {
          type: "sql.v1",
          sql: "SELECT label FROM runs WHERE label = $1",
          params: [{ name: "label", type: "text" }],
        },
      } as never);
      assert.ok((await warren.views.list()).some((v) => v.name === "sdk-by-label"));
      const viewed = await warren.views.run("sdk-by-label", { params: { label: "annotated" } } as never);
      assert.deepEqual(viewed.rows, [["annotated"]]);
      await warren.views.delete("sdk-by-label");
      const archived = await warren.schemas.archive("sdk_rating");
      assert.ok(archived.archived_at);
      assert.equal((await warren.schemas.list()).filter((s) => s.name === "sdk_rating").length, 0);
    });

    it("tails a run as an async iterator that resumes after a dropped connection, without gaps or duplicates", async () => {
      const client = sdk(api.t.orgA.keys.owner, proxy.url);
      const run = await warren.runs.start({ project_id: api.t.orgA.defaultProjectId, label: "tailed" });
      await warren.schemas.register({ name: "sdk_note", json_schema: JSON.stringify({ type: "object" }) } as never);
      const seen: TailEvent[] = [];
      const reconnects: (string | undefined)[] = [];
      const tail = (async () => {
        for await (const item of client.runs.tail(run.id, { onReconnect: (cursor) => reconnects.push(cursor) })) {
          seen.push(item);
          if (seen.length === 2) {
            proxy.dropStreams();
            await warren.annotations.annotate({ schema_name: "sdk_note", run_id: run.id, payload: { n: 2 } });
            await warren.runs.complete(run.id, "succeeded");
          }
        }
      })();
      await warren.annotations.annotate({ schema_name: "sdk_note", run_id: run.id, payload: { n: 1 } });
      await tail;
      assert.equal(reconnects.length, 1, "one reconnect");
      assert.equal(reconnects[0], seen[1]?.id, "resumed from the last cursor");
      const ids = seen.filter((item) => item.id).map((item) => item.id);
      assert.equal(new Set(ids).size, ids.length, "no duplicates");
      const names = seen.filter((item) => item.event !== "end").map((item) => item.data.name);
      assert.equal(names.filter((name) => name === "sdk_note").length, 2, "both annotations arrived");
      assert.equal(seen.at(-1)?.event, "end");
      assert.equal(proxy.seen.filter((line) => line.includes(`/v1/runs/${run.id}/tail`)).length, 2);
    });

    it("volumes: create, push a directory (then nothing to upload), list", async () => {
      const dir = path.join(tmp, "tree");
      await mkdir(path.join(dir, "sub"), { recursive: true });
      await writeFile(path.join(dir, "a.txt"), "alpha\n");
      await writeFile(path.join(dir, "sub", "b.bin"), Buffer.alloc(17 * 1_048_576, 7));
      const volume = await warren.volumes.create({ name: "sdk-vol", quota_bytes: String(1024 ** 3) });
      const phases = new Set<string>();
      const first = await warren.volumes.push(volume.id as string, dir, {
        hashCache: false,
        onProgress: (_line, p) => phases.add(p.phase),
      });
      assert.equal(first.files, 2);
      assert.equal(first.uploadedBlobs, 3, "two chunks of the 17 MiB file and the small one");
      assert.ok(phases.has("upload") && phases.has("done"), [...phases].join());
      const second = await warren.volumes.push(volume.id as string, dir, { hashCache: false });
      assert.equal(second.uploadedBlobs, 0);
      assert.equal(second.version.version_digest, first.version.version_digest);
      assert.ok((await toArray(warren.volumes.list())).some((v) => v.id === volume.id));
    });

    it("volumes: a hash cache written with 4 MiB chunks still pushes each chunk from its own offset", async () => {
      const dir = path.join(tmp, "old-cache-tree");
      await mkdir(dir, { recursive: true });
      const file = path.join(dir, "c.bin");
      const bytes = randomBytes(9 * 1_048_576);
      await writeFile(file, bytes);
      const info = await stat(file, { bigint: true });
      const chunks = [0, 4, 8].map((mib) => {
        const piece = bytes.subarray(mib * 1_048_576, Math.min(bytes.length, (mib + 4) * 1_048_576));
        return { digest: `blake3:${blake3(piece).toString("hex")}`, size: piece.length };
      });
      const cache = path.join(tmp, "old-hash-cache.json");
      const entry = {
        size: String(info.size),
        mtimeNs: String(info.mtimeNs),
        ctimeNs: String(info.ctimeNs),
        ino: String(info.ino),
        digest: `blake3:${blake3(bytes).toString("hex")}`,
        chunks,
      };
      await writeFile(cache, JSON.stringify({ version: 1, files: { "c.bin": entry } }));
      const volume = await warren.volumes.create({ name: "sdk-old-cache", quota_bytes: String(1024 ** 3) });
      // The server checks every uploaded blob against its digest: a chunk read from another offset is refused.
      const pushed = await warren.volumes.push(volume.id as string, dir, { hashCache: cache });
      assert.equal(pushed.uploadedBlobs, 3);
      assert.equal(pushed.uploadedBytes, bytes.length);
    });

    it("secrets: create, grant, rotate, revoke; the value appears in no answer", async () => {
      const value = "s3cr3t-value-never-echoed";
      const secret = await warren.secrets.create({ name: "sdk-token", value, dest_host: "api.openai.com" });
      const rotated = await warren.secrets.rotate(secret.id, `${value}-2`);
      assert.equal(rotated.current_version, 2);
      const grant = await warren.secrets.grant(secret.id, {
        subject_kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER",
        subject_id: api.t.orgA.principalIds.member,
      } as never);
      assert.ok(grant);
      const revoked = await warren.secrets.revoke(secret.id);
      assert.ok(revoked.revoked_at);
      const everything = JSON.stringify([secret, rotated, grant, revoked, await toArray(warren.secrets.list())]);
      assert.ok(!everything.includes(value));
    });
  });
}
