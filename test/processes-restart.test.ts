// Background processes outlive the server (docs/api-decisions.md "Processes"): the real server
// bundle as a child process is killed with SIGKILL while processes run, one of them exits
// while no server is up, and the server is started again on the same data dir and runtime root.
// The restarted server re-adopts the running processes from the sandboxes' kept agents (their
// output read on from the offset reached before, no byte lost or repeated; stdin still fed),
// records the exit it missed, and marks lost the processes whose agent is gone (those are
// killed with their agent, so nothing runs on without a row that owns it).
//
// PGlite only: the server under test uses its default embedded store in its data dir.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readlink } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { run, TOOLS } from "../src/drivers/runtime/local/host.js";
import { Layout } from "../src/drivers/runtime/local/layout.js";
import {
  type CrashRig,
  eventually,
  type Json,
  processesMentioning,
  type ServerProcess,
  startCrashRig,
} from "./support/server-process.js";

describe("processes across a server restart [pglite]", () => {
  let rig: CrashRig | undefined;
  let server: ServerProcess;
  let root = "";
  const apiKey = `wrn_${randomBytes(32).toString("base64url")}`;

  before(async () => {
    rig = await startCrashRig("procs-restart", apiKey, (busyboxRef) => ({
      WARREN_DEFAULT_IMAGE: busyboxRef,
      WARREN_SANDBOX_MEMORY_MB: "128",
      WARREN_SANDBOX_POOL_SIZE: "0",
      WARREN_SHUTDOWN_TIMEOUT_MS: "180000",
    }));
    ({ server, root } = rig);
  });
  after(async () => {
    await rig?.cleanup();
  });

  const api = (method: string, url: string, body?: unknown) => server.api(method, url, body);
  /** A command in the sandbox through runc itself (no server needed). */
  const runcExec = async (id: string, argv: string[]) => {
    const layout = new Layout(root);
    return run(TOOLS.runc, ["--root", layout.runcRoot, "exec", id, ...argv]).then(
      (stdout) => ({ stdout: String(stdout), failed: false }),
      () => ({ stdout: "", failed: true }),
    );
  };
  const createRunning = async () => {
    const res = await api("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none" });
    assert.equal(res.status, 200, res.raw);
    const id = res.body.id as string;
    await server.waitFor(id, "running");
    return id;
  };
  const startProcess = async (id: string, body: Json) => {
    const res = await api("POST", `/v1/sandboxes/${id}/processes`, body);
    assert.equal(res.status, 201, res.raw);
    return res.body.id as string;
  };
  const readAll = async (id: string, pid: string, offset: number, until: (text: string) => boolean) => {
    let text = "";
    let at = offset;
    await eventually(
      "output",
      async () => {
        const res = await api("GET", `/v1/sandboxes/${id}/processes/${pid}/output?offset=${at}&wait_seconds=5`);
        assert.equal(res.status, 200, res.raw);
        assert.equal(res.body.dropped_bytes, 0, res.raw);
        for (const chunk of res.body.chunks as { offset: number; data: string }[]) {
          assert.equal(chunk.offset, at, "no byte lost or repeated");
          const data = Buffer.from(chunk.data, "base64");
          text += data.toString();
          at += data.length;
        }
        return until(text);
      },
      120_000,
    );
    return { text, offset: at };
  };

  it("re-adopts running processes, records a missed exit and marks lost the ones whose agent died", async () => {
    await server.start();
    const id = await createRunning();
    const doomed = await createRunning();
    const ticker = await startProcess(id, {
      cmd: ["sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done"],
    });
    const late = await startProcess(id, {
      cmd: ["sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo late; touch /tmp/late-done; exit 5"],
    });
    const cat = await startProcess(id, { cmd: ["cat"], stdin: true });
    const orphan = await startProcess(doomed, { cmd: ["sleep", "3601"] });
    const before = await readAll(id, ticker, 0, (text) => text.includes("tick 3\n"));

    assert.equal(await server.stop("SIGKILL"), null);
    // While no server runs: the ticker keeps ticking, `late` exits, and the other sandbox's agent dies.
    await runcExec(id, ["touch", "/tmp/go"]);
    await eventually("late to end", async () => !(await runcExec(id, ["test", "-e", "/tmp/late-done"])).failed);
    const agents = (await processesMentioning(".warren-exec"))
      .filter((line) => line.includes("--kept"))
      .map((line) => Number(line.split(":")[0]));
    assert.ok(agents.length >= 2, "each sandbox has a kept agent");
    // The agent of `doomed` is the one in its init's PID namespace.
    const state = JSON.parse(await run(TOOLS.runc, ["--root", new Layout(root).runcRoot, "state", doomed])) as {
      pid: number;
    };
    const initNs = await readlink(`/proc/${state.pid}/ns/pid`);
    let killedAgent = false;
    for (const pid of agents) {
      if ((await readlink(`/proc/${pid}/ns/pid`).catch(() => "")) !== initNs) continue;
      process.kill(pid, "SIGKILL");
      killedAgent = true;
    }
    assert.ok(killedAgent);
    // Its process ended with it: nothing of it runs on without its keeper.
    await eventually(
      "the orphan's sleep to end",
      async () => !(await runcExec(doomed, ["sh", "-c", "ps -o args | grep -q '^sleep 3601$'"]).then((r) => !r.failed)),
    );

    await server.start();
    const shown = async (sandbox: string, pid: string) => {
      const res = await api("GET", `/v1/sandboxes/${sandbox}/processes/${pid}`);
      assert.equal(res.status, 200, res.raw);
      return res.body;
    };
    await eventually("late's exit to be recorded", async () => (await shown(id, late)).state === "exited", 120_000);
    const lateRow = await shown(id, late);
    assert.equal(lateRow.exit_code, 5);
    assert.equal(lateRow.end_reason, "exited");
    await eventually("the orphan to be lost", async () => (await shown(doomed, orphan)).state === "lost", 120_000);
    assert.equal((await shown(id, ticker)).state, "running");
    // The ticker's output goes on from where it was read: every tick, in order, none twice.
    const afterRestart = await readAll(
      id,
      ticker,
      before.offset,
      (text) => /tick (\d+)\n$/.test(text) && text.split("\n").length > 20,
    );
    const ticks = (before.text + afterRestart.text).trim().split("\n");
    for (const [i, line] of ticks.entries()) assert.equal(line, `tick ${i}`);
    // Stdin of the re-adopted cat still works.
    const wrote = await api("POST", `/v1/sandboxes/${id}/processes/${cat}:stdin`, { data: "again\n", close: true });
    assert.equal(wrote.status, 200, wrote.raw);
    const echoed = await readAll(id, cat, 0, (text) => text === "again\n");
    assert.equal(echoed.text, "again\n");
    const waited = await api("POST", `/v1/sandboxes/${id}/processes/${cat}:wait`, { timeout_seconds: 30 });
    assert.equal(waited.body.exit_code, 0, waited.raw);
    const killed = await api("POST", `/v1/sandboxes/${id}/processes/${ticker}:kill`);
    assert.equal(killed.status, 200, killed.raw);
    await eventually("the ticker to end", async () => (await shown(id, ticker)).state === "exited");
    // A clean stop leaves the sandboxes to the sweep of the rig.
    await server.stop("SIGTERM");
  });
});
