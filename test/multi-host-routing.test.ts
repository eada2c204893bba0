// Routing to a sandbox's owner across real processes (docs/hosts.md "Routing"): two hosts
// (test/support/multi-host.ts), each in its own network namespace with its internal API and
// SSH gateway on its bridge address. A owns the sandbox; exec, a keyed exec retried through
// the other host, a snapshot, a network switch and an SSH session (the stock ssh client)
// through B all reach the sandbox on A, and B's runtime never holds a container of it.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { HOST_SSH_PORT, type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";
import { stockSshArgs } from "./support/ssh-client.js";

const SSH = "/usr/bin/ssh";

describe("routing to the owner across hosts [postgres, s3]", () => {
  let cluster: MultiHost | undefined;
  let a: Host;
  let b: Host;
  let id = "";
  let dir = "";

  before(async () => {
    cluster = await startMultiHost("routing", { hosts: 2 });
    [a, b] = cluster.hosts as [Host, Host];
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-routing-ssh-"));
    const askpass = path.join(dir, "askpass");
    await writeFile(askpass, '#!/bin/sh\nprintf "%s\\n" "$WARREN_SSH_TEST_SECRET"\n');
    await chmod(askpass, 0o700);
    id = await a.createSandbox();
    await a.waitFor(id, "running");
    const marker = await a.exec(id, ["sh", "-c", "echo only-in-this-sandbox > /tmp/marker"]);
    assert.equal(marker.status, 200, marker.raw);
  });

  after(async () => {
    await cluster?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const containerIds = async (host: Host) => (await host.containers()).map((c) => c.id);

  it("an exec through B runs in the sandbox on A (A's runc runs it, B's has none)", async () => {
    const res = await b.exec(id, ["sh", "-c", "cat /tmp/marker; hostname"]);
    assert.equal(res.status, 200, res.raw);
    const direct = await a.exec(id, ["hostname"]);
    assert.equal(res.body.stdout, `only-in-this-sandbox\n${direct.body.stdout}`, res.raw);
    assert.ok((await containerIds(a)).includes(id));
    assert.ok(!(await containerIds(b)).includes(id));
  });

  it("execs through B right after one it routed to A: the owner's row decides (a quarantine, another organization)", async () => {
    // B remembers A as the owner for a second (known-owners.ts) and sends the next unkeyed
    // exec straight there; A reads the row itself, so what was written since is seen at once.
    const warm = await b.exec(id, ["true"]);
    assert.equal(warm.status, 200, warm.raw);
    const quarantine = await a.api("POST", `/v1/admin/sandboxes/${id}:quarantine`, { reason: "routing test" });
    assert.equal(quarantine.status, 200, quarantine.raw);
    const refused = await b.exec(id, ["true"]);
    assert.equal(refused.status, 409, refused.raw);
    assert.equal(refused.body.code, "quarantined", refused.raw);
    const release = await a.api("POST", `/v1/admin/sandboxes/${id}:release`, {});
    assert.equal(release.status, 200, release.raw);
    const again = await b.exec(id, ["echo", "released"]);
    assert.equal(again.status, 200, again.raw);
    assert.equal(again.body.stdout, "released\n");
    const org = await a.api("POST", "/v1/admin/organizations", { slug: "routing-other" });
    assert.equal(org.status, 200, org.raw);
    const other = await a.api("POST", "/v1/admin/api-keys", {
      organization: "routing-other",
      name: "owner",
      kind: "user",
      role: "owner",
      email: "owner@routing-other.test",
    });
    assert.equal(other.status, 200, other.raw);
    assert.equal((await b.exec(id, ["true"])).status, 200);
    const foreign = await b.exec(id, ["true"], { authorization: `Bearer ${other.body.api_key}` });
    assert.equal(foreign.status, 404, foreign.raw);
    assert.equal(foreign.body.code, "not_found", foreign.raw);
  });

  it("an exec through B whose remembered owner no longer owns the row: refused not_owner there, answered from the row here, never run", async () => {
    const warm = await b.exec(id, ["true"]);
    assert.equal(warm.status, 200, warm.raw);
    const [owner] = await (cluster as MultiHost).query<{ host_id: string }>(
      "SELECT host_id FROM sandboxes WHERE id = $1",
      [id],
    );
    // For a moment the row names a host that has no row (no server acts on it: the sweeper
    // judges hosts rows, and A's reconciler only the rows that name A).
    await (cluster as MultiHost).query("UPDATE sandboxes SET host_id = $2 WHERE id = $1", [
      id,
      "h_gone000000000000000000000",
    ]);
    let moved: Awaited<ReturnType<Host["exec"]>>;
    try {
      moved = await b.exec(id, ["sh", "-c", "echo ran >> /tmp/not-owner"]);
    } finally {
      await (cluster as MultiHost).query("UPDATE sandboxes SET host_id = $2 WHERE id = $1", [id, owner?.host_id]);
    }
    assert.equal(moved.status, 503, moved.raw);
    assert.equal(moved.body.code, "host_unavailable", moved.raw);
    const ran = await a.exec(id, ["sh", "-c", "cat /tmp/not-owner 2>/dev/null || echo none"]);
    assert.equal(ran.body.stdout, "none\n", "the refused exec never ran");
    assert.equal((await b.exec(id, ["true"])).status, 200, "B routes to A again once the row names it");
  });

  it("a keyed exec through A, retried through B, replays A's outcome (it ran once)", async () => {
    const cmd = ["sh", "-c", "echo ran >> /tmp/keyed; echo ok"];
    const key = { "idempotency-key": "through-a-then-b" };
    const first = await a.exec(id, cmd, key);
    assert.equal(first.status, 200, first.raw);
    const again = await b.exec(id, cmd, key);
    assert.equal(again.status, 200, again.raw);
    assert.equal(again.body.stdout, "ok\n");
    const throughB = await b.exec(id, cmd, { "idempotency-key": "through-b-then-a" });
    assert.equal(throughB.status, 200, throughB.raw);
    const replayA = await a.exec(id, cmd, { "idempotency-key": "through-b-then-a" });
    assert.equal(replayA.body.stdout, "ok\n", replayA.raw);
    const runs = await a.exec(id, ["cat", "/tmp/keyed"]);
    assert.equal(runs.body.stdout, "ran\nran\n", "each key's command ran exactly once");
  });

  it("a snapshot and a network switch through B are taken and applied on A", async () => {
    const snapshot = await b.api("POST", `/v1/sandboxes/${id}:snapshot`, {});
    assert.equal(snapshot.status, 200, snapshot.raw);
    const rows = await cluster?.query<{ state: string; host_id: string }>(
      "SELECT state, host_id FROM sandbox_snapshots WHERE id = $1",
      [snapshot.body.snapshot_id],
    );
    const owner = await cluster?.query<{ host_id: string }>("SELECT host_id FROM sandboxes WHERE id = $1", [id]);
    assert.deepEqual(rows, [{ state: "sealed", host_id: owner?.[0]?.host_id }]);
    const network = await b.api("PATCH", `/v1/sandboxes/${id}`, { network_access: "public" });
    assert.equal(network.status, 200, network.raw);
    const shown = await b.api("GET", `/v1/sandboxes/${id}`);
    assert.equal((shown.body.sandbox as { network_access: string }).network_access, "public", shown.raw);
  });

  it("an SSH session through B's gateway reaches the sandbox on A", async () => {
    const child: ChildProcess = spawn(
      SSH,
      [...stockSshArgs(HOST_SSH_PORT, `${id}@${b.address}`), "cat /tmp/marker; read line; echo got $line; exit 7"],
      {
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          SSH_ASKPASS: path.join(dir, "askpass"),
          SSH_ASKPASS_REQUIRE: "force",
          WARREN_SSH_TEST_SECRET: cluster?.apiKey ?? "",
        },
        stdio: ["pipe", "pipe", "pipe"],
      },
    );
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.stdin?.end("through-b\n");
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    assert.equal(stdout, "only-in-this-sandbox\ngot through-b\n", `stderr: ${stderr}`);
    assert.equal(code, 7, `stderr: ${stderr}`);
  });
});
