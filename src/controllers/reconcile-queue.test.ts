import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ReconcileQueue } from "./reconcile-queue.js";

const tick = () => new Promise((resolve) => setImmediate(resolve));

/** A worker whose passes the test releases one at a time. */
function gatedWorker() {
  const log: string[] = [];
  const gates: (() => void)[] = [];
  const worker = async (id: string) => {
    log.push(`start ${id}`);
    await new Promise<void>((resolve) => gates.push(resolve));
    log.push(`end ${id}`);
  };
  const release = async () => {
    await tick();
    for (const open of gates.splice(0)) open();
    await tick();
  };
  return { log, worker, release };
}

describe("ReconcileQueue", () => {
  it("drops kicks before it has a worker", async () => {
    const queue = new ReconcileQueue();
    queue.kick("a");
    await queue.idle();
  });

  it("runs one pass per id at a time; kicks during a pass coalesce into one more", async () => {
    const queue = new ReconcileQueue();
    const { log, worker, release } = gatedWorker();
    queue.setWorker(worker);
    queue.kick("a");
    queue.kick("a");
    queue.kick("a");
    queue.kick("b");
    await tick();
    assert.deepEqual(log, ["start a", "start b"], "different ids run side by side");
    await release();
    await release();
    await queue.idle();
    assert.deepEqual(
      log.filter((line) => line.endsWith(" a")),
      ["start a", "end a", "start a", "end a"],
    );
    assert.deepEqual(
      log.filter((line) => line.endsWith(" b")),
      ["start b", "end b"],
    );
  });

  it("a failing pass does not wedge its id", async () => {
    const queue = new ReconcileQueue();
    let calls = 0;
    queue.setWorker(async () => {
      calls++;
      throw new Error("boom");
    });
    queue.kick("a");
    await queue.idle();
    queue.kick("a");
    await queue.idle();
    assert.equal(calls, 2);
  });

  it("takes no new work once stopped, and stop waits for the running pass", async () => {
    const queue = new ReconcileQueue();
    const { log, worker, release } = gatedWorker();
    queue.setWorker(worker);
    queue.kick("a");
    await tick();
    const stopped = queue.stop();
    queue.kick("b");
    await release();
    await stopped;
    assert.deepEqual(log, ["start a", "end a"]);
  });
});
