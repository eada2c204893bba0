// The test clusters of test/support/pg-cluster.ts: one left running by a test process that was
// SIGKILLed (its after hooks never ran) is stopped and removed by the next cluster's start.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { after, describe, it } from "node:test";
import pg from "pg";
import { type PgCluster, startPgCluster } from "./support/pg-cluster.js";

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query("SELECT 1");
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

describe("test PostgreSQL clusters", () => {
  let next: PgCluster | null = null;
  after(() => next?.stop());

  it("a cluster whose starting process was killed is stopped and removed when the next one starts", async () => {
    const script = `import("./test/support/pg-cluster.ts").then((m) => m.startPgCluster()).then((c) => {
      process.stdout.write(c.url + "\\n" + c.dir + "\\n");
      setInterval(() => {}, 1000);
    });`;
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on("data", (chunk: Buffer) => {
          out += chunk.toString();
          if (out.split("\n").length > 2) resolve();
        });
        child.on("exit", (code) => reject(new Error(`the starter exited (${code}) before its cluster was up`)));
      });
    } finally {
      child.kill("SIGKILL");
    }
    const [url = "", dir = ""] = out.trim().split("\n");
    await new Promise((resolve) => child.once("exit", resolve));
    assert.equal(await answers(url), true, "the orphan cluster is still running after its starter died");
    next = await startPgCluster();
    assert.equal(await answers(url), false, "the orphan cluster was stopped");
    assert.equal(existsSync(dir), false, "its temp dir was removed");
    assert.equal(await answers(next.url), true);
  });
});
