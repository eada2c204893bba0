// Issue 24 A17b end to end: keyed creates in flight when the server is killed with SIGKILL.
// The real server (the bundle, as a child process) takes a burst of CreateSandbox calls, each
// with its own Idempotency-Key, and is killed as the first answer arrives; the claims it made
// and never answered are read from its store. After a restart a retry with the same key takes
// such a claim over and runs the create (on the embedded store at once; on PostgreSQL once the
// dead holder's heartbeat is stale, HOLDER_STALE_SECONDS), never `409 operation_conflict`
// until the five-minute abandonment; a retry of an answered key replays its answer.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { HOLDER_STALE_SECONDS } from "../src/http/idempotency.js";
import { openPglite } from "../src/store/pglite.js";
import { adminUrl, STORE_KINDS, type StoreKind } from "./harness.js";
import { type CrashRig, type Reply, sleep, startCrashRig } from "./support/server-process.js";

/** Creates fired at once in a round: enough that some are claimed and not yet answered at the kill. */
const BURST = 8;
/** Rounds tried until one leaves a claim pending (each kills the server at its first answer). */
const ROUNDS = 5;
/** An image no registry serves (nothing listens on port 1): the sandboxes fail at once, no runc work. */
const BODY = { image: "127.0.0.1:1/none/image:latest", command: ["true"], network_access: "none" };

interface Claim {
  key: string;
  state: "pending" | "done";
}

for (const store of STORE_KINDS) {
  describe(`keyed creates the server never answered, after kill -9 [${store}]`, () => {
    const apiKey = `wrn_${randomBytes(32).toString("base64url")}`;
    let rig: CrashRig | undefined;
    let databaseUrl = "";
    let database = "";

    before(async () => {
      rig = await startCrashRig(`idem-${store}`, apiKey, () => ({ WARREN_SANDBOX_POOL_SIZE: "0" }));
      if (store === "postgres") {
        database = `t_idem_${randomBytes(6).toString("hex")}`;
        const admin = new pg.Client({ connectionString: await adminUrl() });
        await admin.connect();
        await admin.query(`CREATE DATABASE ${database}`);
        await admin.end();
        const url = new URL(await adminUrl());
        url.pathname = `/${database}`;
        databaseUrl = url.toString();
      }
    });

    after(async () => {
      await rig?.cleanup();
      if (database) {
        const admin = new pg.Client({ connectionString: await adminUrl() });
        await admin.connect();
        await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
        await admin.end();
      }
    });

    const start = () => (rig as CrashRig).server.start(store === "postgres" ? { DATABASE_URL: databaseUrl } : {});
    const create = (key: string) =>
      (rig as CrashRig).server.api("POST", "/v1/sandboxes", BODY, { "idempotency-key": key });

    /** The CreateSandbox claims in the (stopped) server's store. */
    const claims = async (kind: StoreKind): Promise<Claim[]> => {
      const sql =
        "SELECT idempotency_key AS key, state FROM idempotency_keys WHERE operation = 'CreateSandbox' ORDER BY 1";
      if (kind === "postgres") {
        const client = new pg.Client({ connectionString: databaseUrl });
        await client.connect();
        try {
          return (await client.query<Claim>(sql)).rows;
        } finally {
          await client.end();
        }
      }
      // The killed process held the data dir alone; nothing else opens it until the restart.
      const db = await openPglite(path.join((rig as CrashRig).dataDir, "pglite"));
      try {
        return (await db.query<Claim>(sql)).rows;
      } finally {
        await db.close();
      }
    };

    it("a retry takes over the claim of a create in flight at the kill, and runs it", async (t) => {
      const server = (rig as CrashRig).server;
      await start();
      for (const metric of ["sandboxes.total", "sandboxes.running"]) {
        const set = await server.api("PUT", `/v1/admin/organizations/default/quotas/${metric}`, { limit: 10_000 });
        assert.equal(set.status, 200, set.raw);
      }
      let pending: string[] = [];
      let answered = new Map<string, Reply>();
      let killedAt = 0;
      for (let round = 0; round < ROUNDS && pending.length === 0; round++) {
        if (round > 0) await start();
        const keys = Array.from({ length: BURST }, (_, i) => `crash-${round}-${i}-${randomBytes(4).toString("hex")}`);
        answered = new Map();
        const calls = keys.map((key) =>
          create(key).then(
            (reply) => {
              answered.set(key, reply);
              return reply;
            },
            () => null, // cut by the kill
          ),
        );
        await Promise.race(calls);
        assert.equal(await server.stop("SIGKILL"), null, "killed, not exited");
        killedAt = Date.now();
        await Promise.all(calls);
        const stored = new Map((await claims(store)).map((claim) => [claim.key, claim.state]));
        pending = keys.filter((key) => stored.get(key) === "pending" && !answered.has(key));
        t.diagnostic(
          `round ${round}: ${answered.size} answered, ${pending.length} claimed and never answered, ` +
            `${keys.filter((key) => !stored.has(key)).length} never claimed`,
        );
      }
      assert.ok(pending.length > 0, `no round of ${ROUNDS} left a claim pending at the kill`);

      await start();
      for (const key of pending) {
        // The first retry: taken over at once on the embedded store (the holder is gone with its
        // process); on PostgreSQL a 409 with Retry-After while the dead holder's heartbeat is fresh.
        let reply = await create(key);
        if (store === "pglite") assert.equal(reply.status, 200, `${key}: ${reply.raw}`);
        while (reply.status === 409) {
          assert.equal(reply.body.code, "operation_conflict", reply.raw);
          assert.ok(
            Date.now() - killedAt < (HOLDER_STALE_SECONDS + 60) * 1000,
            `still 409 ${Math.round((Date.now() - killedAt) / 1000)} s after the kill: ${reply.raw}`,
          );
          await sleep(500);
          reply = await create(key);
        }
        assert.equal(reply.status, 200, `${key}: ${reply.raw}`);
        assert.match(String(reply.body.id), /^sbx-/);
        // The takeover's answer is the key's answer from now on.
        const again = await create(key);
        assert.equal(again.status, 200, again.raw);
        assert.deepEqual(again.body, reply.body);
      }
      // An answered key replays its answer after the restart.
      for (const [key, before] of [...answered].slice(0, 3)) {
        if (before.status !== 200) continue;
        const replay = await create(key);
        assert.equal(replay.status, 200, replay.raw);
        assert.deepEqual(replay.body, before.body);
      }
    });
  });
}
