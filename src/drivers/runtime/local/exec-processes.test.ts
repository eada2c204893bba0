// Background processes kept by the exec agent (exec-processes.ts, 'B'...'L' in exec-agent.c) on
// real sandboxes: output from an offset, stdin, signals, the ring's gap, and a reconnect through
// the keeper socket after the server's connection is gone (the processes keep running).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { ProcessReader, ProcessRef } from "../interface.js";
import { PROCESS_RING_BYTES } from "./exec-processes.js";
import type { ExecRunner } from "./exec-runner.js";
import { type RuntimeFixture, startRuntimeFixture, startSandbox } from "./test-support.js";

async function readUntil(reader: ProcessReader, from: number, done: (text: string) => boolean) {
  let offset = from;
  let text = "";
  const deadline = Date.now() + 60_000;
  while (!done(text)) {
    if (Date.now() > deadline) throw new Error(`timed out reading; got ${JSON.stringify(text.slice(-200))}`);
    const result = await reader.read(offset, 1 << 20);
    for (const chunk of result.chunks) text += chunk.data.toString();
    offset = result.next;
    if (result.complete) break;
  }
  return { text, offset };
}

describe("background processes kept by the exec agent", { timeout: 180_000 }, () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  let id: string;
  before(async () => {
    f = await startRuntimeFixture("procs");
    id = await startSandbox(f, made);
  });
  after(async () => {
    for (const sandbox of made) await f?.driver.destroy(sandbox).catch(() => undefined);
    await f?.cleanup();
  });

  it("streams output from an offset, takes stdin and reports the exit", async () => {
    const exits: { ref: ProcessRef; code: number }[] = [];
    f.driver.onProcessExit((sandbox, ref, code) => {
      if (sandbox === id) exits.push({ ref, code });
    });
    const started = await f.driver.startProcess(id, {
      argv: ["sh", "-c", "echo one; read line; echo got $line; echo err >&2; exit 3"],
      pty: null,
      stdin: true,
    });
    assert.ok(started.pid > 0 && started.agent.length === 16);
    const reader = await f.driver.openProcessReader(id, started);
    const first = await readUntil(reader, 0, (text) => text.includes("one\n"));
    assert.equal(first.text, "one\n");
    assert.equal(await f.driver.controlProcess(id, started, { kind: "stdin", data: Buffer.from("hi\n") }), 3);
    const rest = await readUntil(reader, first.offset, (text) => text.includes("err\n"));
    assert.equal(rest.text, "got hi\nerr\n");
    // From offset 4 again: the same bytes, none lost or repeated.
    const again = await readUntil(reader, 4, (text) => text.includes("err\n"));
    assert.equal(again.text, "got hi\nerr\n");
    reader.close();
    const deadline = Date.now() + 60_000;
    while (!exits.some((e) => e.ref.serial === started.serial)) {
      if (Date.now() > deadline) throw new Error("no exit reported");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.equal(exits.find((e) => e.ref.serial === started.serial)?.code, 3);
    const listed = await f.driver.listProcesses(id);
    const entry = listed?.processes.find((p) => p.serial === started.serial);
    assert.equal(entry?.exitCode, 3);
    assert.equal(await f.driver.controlProcess(id, started, { kind: "release" }), 0);
    assert.equal(
      (await f.driver.listProcesses(id))?.processes.some((p) => p.serial === started.serial),
      false,
    );
  });

  it("drops the oldest output beyond the ring when nobody reads, and says where it starts", async () => {
    const started = await f.driver.startProcess(id, {
      argv: ["sh", "-c", "head -c 3000000 /dev/zero; echo end"],
      pty: null,
      stdin: false,
    });
    const deadline = Date.now() + 60_000;
    for (;;) {
      const entry = (await f.driver.listProcesses(id))?.processes.find((p) => p.serial === started.serial);
      if (entry?.done) {
        assert.equal(entry.endOffset, 3_000_004);
        assert.ok(entry.firstOffset > 0 && entry.endOffset - entry.firstOffset <= PROCESS_RING_BYTES);
        break;
      }
      if (Date.now() > deadline) throw new Error("the process did not end");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const reader = await f.driver.openProcessReader(id, started);
    const result = await reader.read(0, 1 << 20);
    assert.ok((result.chunks[0]?.offset ?? 0) > 0, "the first chunk starts past the dropped bytes");
    reader.close();
    await f.driver.controlProcess(id, started, { kind: "release" });
  });

  it("keeps a reader's bytes: a held process waits instead of dropping them", async () => {
    const started = await f.driver.startProcess(id, {
      argv: ["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' a; echo end"],
      pty: null,
      stdin: false,
    });
    const reader = await f.driver.openProcessReader(id, started);
    // The reader holds offset 0 from its first read on: nothing may be dropped after it.
    let offset = 0;
    let total = 0;
    let text = "";
    for (;;) {
      const result = await reader.read(offset, 256 << 10);
      for (const chunk of result.chunks) {
        assert.equal(chunk.offset, offset, "no gap");
        offset += chunk.data.length;
        total += chunk.data.length;
        if (total > 4_999_000) text += chunk.data.toString();
      }
      offset = result.next;
      if (result.complete) break;
    }
    assert.equal(total, 5_000_004);
    assert.ok(text.endsWith("end\n"));
    reader.close();
    await f.driver.controlProcess(id, started, { kind: "release" });
  });

  it("keeps running when the server's connection goes, and is found again through the keeper", async () => {
    const started = await f.driver.startProcess(id, {
      argv: ["sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done"],
      pty: null,
      stdin: false,
    });
    const runner = (f.driver as unknown as { execs: ExecRunner }).execs;
    const firstPid = await f.driver.execAgentPid(id);
    runner.forgetAgent(id, true);
    // A new connection: the same agent (its boot id), the process still there and running.
    const deadline = Date.now() + 60_000;
    let listed = await f.driver.listProcesses(id);
    while (!listed) {
      if (Date.now() > deadline) throw new Error("no agent again");
      listed = await f.driver.listProcesses(id);
    }
    assert.equal(listed.agent, started.agent);
    const entry = listed.processes.find((p) => p.serial === started.serial);
    assert.ok(entry && !entry.exited);
    assert.ok(firstPid);
    const reader = await f.driver.openProcessReader(id, started);
    const { text } = await readUntil(reader, 0, (t) => t.includes("tick 3\n"));
    assert.ok(text.startsWith("tick 0\ntick 1\n"));
    reader.close();
    assert.equal(await f.driver.controlProcess(id, started, { kind: "signal", signal: 9 }), 0);
    for (;;) {
      const now = (await f.driver.listProcesses(id))?.processes.find((p) => p.serial === started.serial);
      if (now?.exited) {
        assert.equal(now.exitCode, 137);
        break;
      }
      if (Date.now() > deadline) throw new Error("the kill did not end it");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await f.driver.controlProcess(id, started, { kind: "release" });
  });

  it("refuses a missing executable and an unknown process", async () => {
    await assert.rejects(
      f.driver.startProcess(id, { argv: ["no-such-binary"], pty: null, stdin: false }),
      (error: Error & { code?: string }) => error.code === "start_failed",
    );
    const listed = await f.driver.listProcesses(id);
    assert.ok(listed);
    assert.equal(await f.driver.controlProcess(id, { agent: listed.agent, serial: 999_999 }, { kind: "close" }), -1);
    await assert.rejects(
      f.driver.openProcessReader(id, { agent: "0000000000000000", serial: 1 }),
      (error: Error & { code?: string }) => error.code === "not_found",
    );
  });
});
