// The writer thread's failure paths (its successful writes run through every annotation
// test on PostgreSQL): a store error comes back as that write's error, a thread that dies
// fails what it held as unavailable, and the next write starts a new thread.
import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { after, describe, it } from "node:test";
import type { Worker } from "node:worker_threads";
import { freePort } from "../../../test/support/ports.js";
import { AppError } from "../../http/errors.js";
import { encodeWrite } from "./annotation-repo.js";
import { WorkerWriter } from "./worker-writer.js";

const WRITE = encodeWrite({
  guard: "run",
  schemaId: "sch_1",
  row: {
    orgId: "org_1",
    eventId: "01JAAAAAAAAAAAAAAAAAAAAAAA",
    projectId: "prj_1",
    runId: "run_1",
    lineagePath: "run_1",
    tsWallNs: 1_700_000_000_000_000_000n,
    schemaName: "s",
    principal: "p",
    payloadText: '{"a":1}',
    schemaVersion: 1,
    targetEventId: null,
    range: null,
    contentHash: "h",
    supersessionKey: "k",
    slots: {},
  },
});

const threadOf = (writer: WorkerWriter) => (writer as unknown as { worker: Worker | null }).worker;

describe("annotation writer thread", () => {
  const sockets = new Set<Socket>();
  let silent: Server | null = null;
  after(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => (silent ? silent.close(resolve) : resolve(undefined)));
  });

  it("answers a write the store cannot take with that write's error, then stops on close", async () => {
    const writer = new WorkerWriter(`postgres://nobody@127.0.0.1:${await freePort()}/none`);
    await assert.rejects(writer.write(WRITE), /ECONNREFUSED/);
    const thread = threadOf(writer);
    assert.ok(thread);
    const exited = new Promise((resolve) => thread.once("exit", resolve));
    await writer.close();
    await exited;
  });

  it("fails the writes a dead thread held as unavailable, and starts a new one for the next", async () => {
    // A server that accepts connections and never answers: the write stays in flight.
    const port = await freePort();
    silent = createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => silent?.listen(port, "127.0.0.1", resolve));
    const writer = new WorkerWriter(`postgres://nobody@127.0.0.1:${port}/none`);
    const held = writer.write(WRITE);
    const first = threadOf(writer);
    assert.ok(first);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await first.terminate();
    await assert.rejects(held, (error: unknown) => error instanceof AppError && error.code === "unavailable");

    const next = writer.write(WRITE);
    const second = threadOf(writer);
    assert.ok(second && second !== first, "a new thread");
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent?.close(resolve));
    silent = null;
    await assert.rejects(next, /ECONNRESET|ECONNREFUSED|Connection terminated/);
    await writer.close();
  });
});
