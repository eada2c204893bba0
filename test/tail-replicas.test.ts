// The run tail across server processes: two servers (the bundle `make run` runs) on one
// PostgreSQL, each with its own data dir and runtime root, sharing the master key. A tail
// opened on one follows annotations written through the other. While a server's notifications flow its tails
// wait for them and never poll, so the events can only arrive through the store's
// NOTIFY from the other process.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { sweepRoot } from "../src/drivers/runtime/local/sweep.js";
import { type PgCluster, startPgCluster } from "./support/pg-cluster.js";
import { ServerProcess } from "./support/server-process.js";
import { openSse, type SseItem } from "./support/sse.js";

const SCHEMA = JSON.stringify({
  type: "object",
  properties: { n: { type: "integer" } },
  required: ["n"],
  additionalProperties: false,
});

describe("run tail across two server processes on one PostgreSQL", () => {
  const apiKey = `wrn_${randomBytes(32).toString("base64url")}`;
  // Replicas share the master key (README): each seals and opens the other's data keys.
  const masterKey = randomBytes(32).toString("base64");
  let cluster: PgCluster | null = null;
  const servers: ServerProcess[] = [];
  const dirs: string[] = [];
  const roots: string[] = [];

  before(async () => {
    cluster = await startPgCluster();
    for (const name of ["a", "b"]) {
      const root = await mkdtemp(path.join(os.tmpdir(), `warren-runtime-tail-${name}-`));
      await writeFile(path.join(root, "owner.pid"), String(process.pid));
      roots.push(root);
      const dataDir = await mkdtemp(path.join(os.tmpdir(), `warren-tail-${name}-data-`));
      dirs.push(dataDir);
      const server = new ServerProcess({
        dataDir,
        runtimeRoot: root,
        apiKey,
        env: { DATABASE_URL: cluster.url, WARREN_SANDBOX_POOL_SIZE: "0", WARREN_MASTER_KEY: masterKey },
      });
      await server.build(`warren-tail-${name}-test`);
      servers.push(server);
    }
    // One at a time: the first migrates the database and bootstraps the organization.
    for (const server of servers) await server.start();
  });

  after(async () => {
    for (const server of servers) await server.dispose();
    for (const root of roots) await sweepRoot(root).catch(() => undefined);
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
    cluster?.stop();
  });

  it("follows annotations written through the other server, live, and ends when it completes the run", async () => {
    const [a, b] = servers as [ServerProcess, ServerProcess];
    const name = `rep${randomBytes(3).toString("hex")}`;
    assert.equal((await a.api("POST", "/v1/annotation-schemas", { name, json_schema: SCHEMA })).status, 200);
    const run = await a.api("POST", "/v1/runs", { label: "replicas" });
    assert.equal(run.status, 200, run.raw);
    const runId = (run.body.run as { id: string }).id;
    const stream = await openSse(`http://127.0.0.1:${b.port}/v1/runs/${runId}/tail`, {
      authorization: `Bearer ${apiKey}`,
    });
    assert.equal(stream.status, 200, stream.body);
    assert.equal((await stream.next(30_000))?.data.name, "run.started");
    for (let n = 0; n < 3; n++) {
      const res = await a.api("POST", "/v1/annotations", {
        schema_name: name,
        run_id: runId,
        payload_json: JSON.stringify({ n }),
      });
      assert.equal(res.status, 200, res.raw);
      const item = await stream.next(30_000);
      assert.equal(item?.data.event_id, res.body.event_id, `annotation ${n} written on A arrives on B's tail`);
      assert.deepEqual(item?.data.payload, { n });
    }
    assert.equal((await a.api("POST", `/v1/runs/${runId}:complete`, { status: "succeeded" })).status, 200);
    const rest: SseItem[] = [];
    for (let item = await stream.next(30_000); item; item = await stream.next(30_000)) {
      rest.push(item);
      if (item.event === "end") break;
    }
    assert.deepEqual(
      rest.map((item) => item.event ?? item.data.name),
      ["run.completed", "end"],
    );
    stream.close();
  });
});
