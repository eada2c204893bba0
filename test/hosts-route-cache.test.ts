// The router's cache of owners' hosts rows (src/modules/hosts/router.ts, ROUTE_CACHE_MS) against
// real internal API listeners (the owner's NodeApi with its grant checks) on both stores: a
// routable row is read once per ROUTE_CACHE_MS; a cached row naming another epoch than the
// sandbox's is read again; a grant the owner refused, or a request that never reached it, is
// retried once on the row read again and never runs twice; an owner that re-joined reaches
// the right process or answers host_unavailable. The operations behind the API count runs.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { type InternalApiServer, startInternalApi } from "../src/http/internal/server.js";
import { AppError } from "../src/lib/errors.js";
import { createLogger } from "../src/lib/logger.js";
import { GrantSigner } from "../src/modules/hosts/grants.js";
import { NodeApi, type NodeOperations } from "../src/modules/hosts/node-api.js";
import { HostRouter, ROUTE_CACHE_MS, type RoutedSandbox } from "../src/modules/hosts/router.js";
import type { Queryable } from "../src/store/db.js";
import { migrate } from "../src/store/migrate.js";
import { openTestStore, STORE_KINDS, type TestStore } from "./harness.js";

const HOST_A = "h_a0000000000000000000000a";
const HOST_B = "h_b0000000000000000000000b";
const SANDBOX = "sbx-2222222222222222222222222222222222222222";
const ORG = "org_cached";

/** One process of host A: its internal API at an epoch, counting the execs it ran. */
interface Owner {
  name: string;
  gate: { epoch: number; acting: boolean };
  runs: number;
  server: InternalApiServer;
}

for (const kind of STORE_KINDS) {
  describe(`the router's cache of owners' rows [${kind}]`, () => {
    const signer = new GrantSigner(randomBytes(32));
    const log = createLogger("fatal", new Writable({ write: (_c, _e, cb) => cb() }));
    const owners: Owner[] = [];
    let store: TestStore;
    let router: HostRouter;
    let clock = 0;
    let reads = 0;

    const startOwner = async (name: string, epoch: number): Promise<Owner> => {
      const gate = { epoch, acting: true };
      const owner = { name, gate, runs: 0 } as Owner;
      const operations = {
        exec: async () => {
          owner.runs++;
          return { exit: 0, stdout: name, stderr: "", truncated: false };
        },
      } as unknown as NodeOperations;
      const api = new NodeApi(
        { id: HOST_A, owner: () => ({ hostId: HOST_A, epoch: gate.epoch }), canAct: () => gate.acting },
        signer,
        operations,
      );
      owner.server = await startInternalApi({ host: "127.0.0.1", port: 0, api, bodyLimitBytes: 4096, log });
      owners.push(owner);
      return owner;
    };
    const publish = (epoch: number, owner: Owner, state = "ready") =>
      store.db.query("UPDATE hosts SET epoch = $2, internal_url = $3, state = $4 WHERE id = $1", [
        HOST_A,
        epoch,
        owner.server.boundUrl,
        state,
      ]);
    const sandbox = (epoch: number): RoutedSandbox => ({
      id: SANDBOX,
      org_id: ORG,
      host_id: HOST_A,
      host_epoch: epoch,
    });
    /** The exec through B's router: who ran it, or the error code it answered. */
    const exec = async (epoch: number): Promise<string> => {
      try {
        const { remote } = await router.runtimeOf(sandbox(epoch));
        assert.ok(remote);
        const answer = (await remote.exec({ cmd: ["true"], env: {}, request_hash: "" }, 10_000)) as { stdout: string };
        return answer.stdout;
      } catch (error) {
        if (error instanceof AppError) return error.code;
        throw error;
      }
    };
    const runs = () => Object.fromEntries(owners.map((o) => [o.name, o.runs]));

    before(async () => {
      store = await openTestStore(kind);
      await migrate(store.db);
      const counted: Queryable = {
        query: (sql, params, options) => {
          reads++;
          return store.db.query(sql, params, options);
        },
        exec: (sql) => store.db.exec(sql),
        queryRaw: (sql, params, options) => store.db.queryRaw(sql, params, options),
      };
      const first = await startOwner("first", 1);
      await store.db.query(
        "INSERT INTO hosts (id, state, epoch, internal_url) VALUES ($1, 'ready', 1, $2), ($3, 'ready', 1, NULL)",
        [HOST_A, first.server.boundUrl, HOST_B],
      );
      const gateB = { id: HOST_B, owner: () => ({ hostId: HOST_B, epoch: 1 }), canAct: () => true };
      router = new HostRouter(counted, gateB, null, signer, log, undefined, () => clock);
    });
    after(async () => {
      router?.close();
      for (const owner of owners) await owner.server.close();
      await store?.close();
    });

    it("a routable owner's row is read once per ROUTE_CACHE_MS, not once per request", async () => {
      reads = 0;
      assert.equal(await exec(1), "first");
      assert.equal(await exec(1), "first");
      clock += ROUTE_CACHE_MS - 1;
      assert.equal(await exec(1), "first");
      assert.equal(reads, 1, "one read of the hosts row for three routed execs");
      clock += 1;
      assert.equal(await exec(1), "first");
      assert.equal(reads, 2, "read again once the cached row is ROUTE_CACHE_MS old");
      assert.deepEqual(runs(), { first: 4 });
    });

    it("the owner re-joined elsewhere under a new epoch: the new epoch's sandbox reaches it; the old process, still up, never runs", async () => {
      const second = await startOwner("second", 2);
      await publish(2, second);
      // The cached row names epoch 1: a sandbox adopted at epoch 2 reads the registry again.
      assert.equal(await exec(2), "second");
      // A sandbox row still at epoch 1 is not routed to the cached epoch-1 process.
      assert.equal(await exec(1), "host_unavailable");
      assert.deepEqual(runs(), { first: 4, second: 1 });
    });

    it("a cached owner that re-joined in place before the sandbox row moved: its refusal is read again, nothing runs", async () => {
      const second = owners[1] as Owner;
      assert.equal(await exec(2), "second");
      reads = 0;
      second.gate.epoch = 3;
      await publish(3, second);
      // The cached row still names epoch 2, the sandbox row's: the owner (now at 3) refuses the
      // grant before running anything, the row is read again, and epoch 3 is not the sandbox's.
      assert.equal(await exec(2), "host_unavailable");
      assert.equal(reads, 1, "the refusal cost one fresh read");
      assert.deepEqual(runs(), { first: 4, second: 2 });
      assert.equal(await exec(3), "second");
      assert.deepEqual(runs(), { first: 4, second: 3 });
    });

    it("a cached owner whose address changed under the same epoch: the unsent request is retried once there", async () => {
      const second = owners[1] as Owner;
      assert.equal(await exec(3), "second");
      const third = await startOwner("third", 3);
      await publish(3, third);
      await second.server.close();
      // The cached row names the closed listener: refused before it was sent, retried on the fresh row.
      assert.equal(await exec(3), "third");
      assert.equal(await exec(3), "third");
      assert.deepEqual(runs(), { first: 4, second: 4, third: 2 });
    });

    it("an owner no longer routable after the cached read answers host_unavailable once its request fails", async () => {
      const third = owners[2] as Owner;
      assert.equal(await exec(3), "third");
      await store.db.query("UPDATE hosts SET state = 'dead', epoch = 4 WHERE id = $1", [HOST_A]);
      await third.server.close();
      assert.equal(await exec(3), "host_unavailable");
      // Not cached as routable: the next request reads the registry (still not routable).
      reads = 0;
      assert.equal(await exec(4), "host_unavailable");
      assert.equal(reads, 1);
      assert.deepEqual(runs(), { first: 4, second: 4, third: 3 });
    });
  });
}
