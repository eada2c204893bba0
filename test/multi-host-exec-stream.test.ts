// The streaming exec through a server that does not own the sandbox (docs/hosts.md "Routing"):
// two hosts (A, B) and an `api` replica over one PostgreSQL (test/support/multi-host.ts). A owns
// the sandbox; a stream through B and one through the replica run in it on A (stdin in, output
// back as it comes, a terminal's size, the exit code), over A's internal API session.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Warren } from "../packages/sdk/src/index.js";
import { type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";

describe("streaming exec through any server reaches the owner [postgres, s3]", () => {
  let cluster: MultiHost | undefined;
  let a: Host;
  let b: Host;
  let api: Host;
  let id = "";

  before(async () => {
    cluster = await startMultiHost("exec-stream", { hosts: 2, env: { WARREN_SSH_HOST: "ssh.warren.test" } });
    [a, b] = cluster.hosts as [Host, Host];
    api = await cluster.addApiReplica();
    id = await a.createSandbox();
    await a.waitFor(id, "running");
    const marker = await a.exec(id, ["sh", "-c", "echo only-in-this-sandbox > /tmp/marker"]);
    assert.equal(marker.status, 200, marker.raw);
    assert.ok(
      (await a.containers()).some((c) => c.id === id),
      "A owns the sandbox",
    );
    assert.ok(!(await b.containers()).some((c) => c.id === id));
  });

  after(async () => {
    await cluster?.cleanup();
  });

  for (const edge of ["B", "the api replica"] as const) {
    it(`streams a command through ${edge} into the sandbox on A`, async () => {
      const server = edge === "B" ? b : api;
      const sandbox = await new Warren({
        baseUrl: server.url,
        apiKey: cluster?.apiKey ?? "",
        maxRetries: 0,
      }).sandboxes.get(id);
      const stream = sandbox.execStream([
        "sh",
        "-c",
        'cat /tmp/marker; read line; echo "got $line"; echo err >&2; exit 3',
      ]);
      const reader = stream.stdout[Symbol.asyncIterator]();
      const first = await reader.next();
      // The command waits on stdin until this write: its output crossed before its end.
      assert.equal(first.value?.toString(), "only-in-this-sandbox\n");
      await stream.write("through\n");
      stream.closeStdin();
      let rest = "";
      for (let next = await reader.next(); !next.done; next = await reader.next()) rest += next.value.toString();
      const err: Buffer[] = [];
      for await (const chunk of stream.stderr) err.push(chunk);
      assert.equal(rest, "got through\n");
      assert.equal(Buffer.concat(err).toString(), "err\n");
      assert.deepEqual(await stream.wait(), { kind: "completed", exit: 3, truncated: false });

      const tty = sandbox.execStream(["sh", "-c", "stty size"], { tty: { rows: 33, cols: 99 } });
      let out = "";
      for await (const chunk of tty.stdout) out += chunk.toString();
      assert.match(out, /33 99/);
      assert.deepEqual(await tty.wait(), { kind: "completed", exit: 0, truncated: false });
    });
  }
});
