// Host admission is a reservation (issue 24 A17e and A9's race; docs/api-decisions.md "Host
// admission is a reservation"), on real runc sandboxes. Many creates at once, from ten
// organizations (a quota's per-organization lock does not serialize them), on a host that can
// run only a few: every create is either refused at once with the typed 503 or admitted, and
// every admitted one reaches running; none is accepted and then fails `storage_exhausted`.
// The same for memory: the admitted creates' memory_mb never adds up past the host's
// overcommit, although none of them has reached the host yet (they are all `requested`). A
// sandbox gives its share back by its state alone: once it is deleted, a create fits again.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import type { SandboxJson } from "../src/modules/sandboxes/schemas.js";
import { STORE_KINDS, type StoreKind, startTestApp, type TestApp, type TestResponse } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { eventually } from "./support/eventually.js";

const GIB = 1024 ** 3;
const CREATES = 24;

/** An owner key of each of `extra` new organizations, beside the harness's two. */
async function ownerKeys(t: TestApp, extra: number): Promise<string[]> {
  const keys = [t.orgA.keys.owner, t.orgB.keys.owner];
  for (let i = 0; i < extra; i++) {
    const org = await t.c.identity.createOrganization({ slug: `admission-${i}`, isOperator: false });
    const issued = await t.c.identity.issueKey({
      orgId: org.id,
      kind: "user",
      role: "owner",
      email: `owner@admission-${i}.test`,
      name: "owner",
    });
    keys.push(issued.api_key);
  }
  return keys;
}

/** CREATES creates at once, round-robin over `keys`; each is a 200 or the typed 503. */
async function createAtOnce(t: TestApp, keys: string[], body: Record<string, unknown>) {
  const results = await Promise.all(
    Array.from({ length: CREATES }, async (_, i) => {
      const key = keys[i % keys.length] as string;
      return { key, res: await t.request("POST", "/v1/sandboxes", { key, body }) };
    }),
  );
  const admitted: { key: string; id: string }[] = [];
  for (const { key, res } of results) {
    if (res.status === 200) admitted.push({ key, id: res.body.id as string });
    else refusedForNow(res);
  }
  return admitted;
}

function refusedForNow(res: TestResponse): void {
  assertError(res, 503, "unavailable");
  assert.equal(res.headers["retry-after"], "30");
  assert.doesNotMatch(String(res.body.message), /\d/, `no host numbers: ${res.raw}`);
}

/** Waits (long polls of 25 s, up to 3 minutes on a loaded machine) for `state`; a finished state on the way fails. */
async function untilState(t: TestApp, key: string, id: string, state: "running" | "stopped"): Promise<void> {
  const deadline = Date.now() + 180_000;
  for (;;) {
    const res = await t.request("GET", `/v1/sandboxes/${id}`, {
      key,
      query: { wait_state: state, wait_timeout_seconds: "25" },
    });
    const seen = (res.body.sandbox as SandboxJson | undefined)?.state;
    if (seen === state) return;
    assert.ok(seen && !["failed", "terminated"].includes(seen), res.raw);
    assert.ok(Date.now() < deadline, `sandbox ${id} still ${seen}`);
  }
}

const untilRunning = (t: TestApp, key: string, id: string) => untilState(t, key, id, "running");

async function deleteAll(t: TestApp, made: { key: string; id: string }[]): Promise<void> {
  for (const { key, id } of made.splice(0)) await t.request("DELETE", `/v1/sandboxes/${id}`, { key });
}

describe("host admission is a reservation: storage", () => {
  let fixture: RuntimeFixture;

  before(async () => {
    // ~9 GiB free, 1.5 reserved, nothing overcommitted: three 2 GiB sandboxes (1 GiB root, 1 GiB workspace).
    fixture = await startRuntimeFixture(
      "admission-storage",
      { rootLayerGiB: 1, standardWorkspaceGiB: 1, storageReserveGiB: 1.5, storageOvercommit: 1 },
      { tmpfsMiB: 9 * 1024 },
    );
  });
  after(async () => {
    await fixture?.cleanup();
  });

  /** An app over the fixture's driver with a running reconciler; cleans up whatever `work` made. */
  async function withApp(
    store: StoreKind,
    work: (t: TestApp, made: { key: string; id: string }[]) => Promise<void>,
  ): Promise<void> {
    const t = await startTestApp(store, {
      overrides: { runtime: fixture.driver },
      config: { sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128 } },
    });
    const reconciler = new SandboxReconciler(t.c, fixture.driver, { pids: 128, retentionSeconds: 60 });
    const made: { key: string; id: string }[] = [];
    try {
      await reconciler.start();
      await work(t, made);
    } finally {
      await deleteAll(t, made);
      await reconciler.idle();
      await reconciler.stop();
      for (const id of await fixture.driver.list()) await fixture.driver.destroy(id).catch(() => undefined);
      await t.close();
    }
  }

  /** What the host backs, in 2 GiB sandboxes (the pool is made first). */
  async function sandboxesTheHostBacks(): Promise<number> {
    await fixture.driver.admitStorage({ storageClass: "standard" });
    const report = await fixture.driver.storageReport();
    assert.ok(report, "the pool exists");
    const fits = Math.floor(report.backableBytes / (2 * GIB));
    assert.ok(fits >= 2 && fits < 6, `the host backs ${report.backableBytes} bytes`);
    return fits;
  }

  const body = { command: ["sleep", "3600"], network_access: "none" };

  for (const store of STORE_KINDS) {
    it(`[${store}] concurrent creates are admitted and run, or refused at create; none fails later`, () =>
      withApp(store, async (t, made) => {
        const fits = await sandboxesTheHostBacks();
        const keys = await ownerKeys(t, 8);
        made.push(...(await createAtOnce(t, keys, body)));
        // Every admitted create runs: the host's own check at provisioning never refuses it.
        for (const { key, id } of made) await untilRunning(t, key, id);
        assert.ok(made.length >= 1 && made.length <= fits, `${made.length} admitted; the host backs ${fits}`);

        // A sandbox deleted gives its storage back by its state: a create fits again once it is gone.
        const gone = made.shift() as { key: string; id: string };
        await t.request("DELETE", `/v1/sandboxes/${gone.id}`, { key: gone.key });
        const again = await eventually(
          "a create admitted once a sandbox is gone",
          async () => {
            const res = await t.request("POST", "/v1/sandboxes", { key: gone.key, body });
            if (res.status !== 200) refusedForNow(res);
            return res.status === 200 ? (res.body.id as string) : null;
          },
          120_000,
        );
        made.push({ key: gone.key, id: again });
        await untilRunning(t, gone.key, again);
      }));

    it(`[${store}] a growth and concurrent creates reserve against each other; what is admitted is made`, () =>
      withApp(store, async (t, made) => {
        await sandboxesTheHostBacks();
        const keys = await ownerKeys(t, 4);
        const owner = keys[0] as string;
        const durable = await t.request("POST", "/v1/sandboxes", {
          key: owner,
          body: { ...body, storage_class: "durable", workspace_capacity_gib: 1 },
        });
        assert.equal(durable.status, 200, durable.raw);
        const id = durable.body.id as string;
        made.push({ key: owner, id });
        await untilRunning(t, owner, id);
        // Its workspace grown by 3 GiB beside four 2 GiB creates: not all of it fits.
        const [grow, ...creates] = await Promise.all([
          t.request("PATCH", `/v1/sandboxes/${id}`, { key: owner, body: { workspace_capacity_gib: 4 } }),
          ...keys.slice(1).map((key) => t.request("POST", "/v1/sandboxes", { key, body })),
        ]);
        creates.forEach((res, i) => {
          if (res.status === 200) made.push({ key: keys[i + 1] as string, id: res.body.id as string });
          else refusedForNow(res);
        });
        for (const sandbox of made) await untilRunning(t, sandbox.key, sandbox.id);
        assert.ok(grow, "the growth answered");
        if (grow.status !== 200) refusedForNow(grow);
        const df = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
          key: owner,
          body: { cmd: ["sh", "-c", "df -k /workspace | tail -1"] },
        });
        const kib = Number(String(df.body.stdout).trim().split(/\s+/)[1]);
        // Admitted, the host grew it (to about 4 GiB); refused, it kept its 1 GiB.
        if (grow.status === 200) assert.ok(kib > 3 * 1024 * 1024, df.raw);
        else assert.ok(kib <= 1024 * 1024, df.raw);
        assert.ok(made.length < 5 || grow.status !== 200, "not everything fits");
        const report = await fixture.driver.storageReport();
        assert.ok(report && report.mayStillWriteBytes <= report.backableBytes, JSON.stringify(report));
      }));
  }
});

describe("host admission is a reservation: compute", () => {
  let fixture: RuntimeFixture;

  before(async () => {
    fixture = await startRuntimeFixture("admission-compute", { rootLayerGiB: 1, standardWorkspaceGiB: 1 });
  });
  after(async () => {
    await fixture?.cleanup();
  });

  for (const store of STORE_KINDS as StoreKind[]) {
    it(`[${store}] the memory of concurrent creates admitted never adds up past the host's`, async () => {
      const t = await startTestApp(store, {
        overrides: { runtime: fixture.driver },
        config: {
          sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryOvercommit: 1 },
        },
      });
      const made: { key: string; id: string }[] = [];
      try {
        // No reconciler: every admitted create stays `requested`, and still holds its memory.
        const host = fixture.driver.hostCompute();
        const memory = Math.floor(host.memoryMiB / 3) + 1;
        const keys = await ownerKeys(t, 8);
        const body = { command: ["sleep", "3600"], network_access: "none", resources: { memory_mb: memory } };
        made.push(...(await createAtOnce(t, keys, body)));
        assert.ok(
          made.length >= 1 && made.length * memory <= host.memoryMiB,
          `${made.length} admitted of ${memory} MiB each; the host has ${host.memoryMiB}`,
        );
        // Deleted, a sandbox's memory is free again at once.
        const gone = made.shift() as { key: string; id: string };
        assert.equal((await t.request("DELETE", `/v1/sandboxes/${gone.id}`, { key: gone.key })).status, 202);
        const again = await t.request("POST", "/v1/sandboxes", { key: gone.key, body });
        assert.equal(again.status, 200, again.raw);
        made.push({ key: gone.key, id: again.body.id as string });
      } finally {
        await deleteAll(t, made);
        await t.close();
      }
    });

    it(`[${store}] concurrent wakes are admitted against each other: a wake not yet started holds its memory`, async () => {
      const t = await startTestApp(store, {
        overrides: { runtime: fixture.driver },
        config: {
          sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryOvercommit: 1 },
        },
      });
      const reconciler = new SandboxReconciler(t.c, fixture.driver, { pids: 128, retentionSeconds: 60 });
      const made: { key: string; id: string }[] = [];
      try {
        await reconciler.start();
        // Three sandboxes of a third of the host and a bit, one organization each, made and stopped one by one.
        const memory = Math.floor(fixture.driver.hostCompute().memoryMiB / 3) + 1;
        const body = { command: ["sleep", "3600"], network_access: "none", resources: { memory_mb: memory } };
        for (const key of await ownerKeys(t, 1)) {
          const res = await t.request("POST", "/v1/sandboxes", { key, body });
          assert.equal(res.status, 200, res.raw);
          const id = res.body.id as string;
          made.push({ key, id });
          await untilRunning(t, key, id);
          const stop = await t.request("PATCH", `/v1/sandboxes/${id}`, { key, body: { state: "stopped" } });
          assert.equal(stop.status, 200, stop.raw);
          await untilState(t, key, id, "stopped");
        }
        // All three woken at once: two fit the host's memory, the third is refused for now.
        const wakes = await Promise.all(
          made.map(({ key, id }) => t.request("PATCH", `/v1/sandboxes/${id}`, { key, body: { state: "running" } })),
        );
        const woken = made.filter((_, i) => wakes[i]?.status === 200);
        for (const res of wakes) if (res.status !== 200) refusedForNow(res);
        assert.equal(woken.length, 2, wakes.map((res) => res.raw).join("\n"));
        for (const { key, id } of woken) await untilRunning(t, key, id);
      } finally {
        await deleteAll(t, made);
        await reconciler.idle();
        await reconciler.stop();
        for (const id of await fixture.driver.list()) await fixture.driver.destroy(id).catch(() => undefined);
        await t.close();
      }
    });
  }
});
