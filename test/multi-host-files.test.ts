// The file API through servers that do not own the sandbox (docs/hosts.md "Routing"): two hosts
// and an `api` replica (no runtime) over one PostgreSQL (test/support/multi-host.ts). A owns the
// sandbox; an upload through B (streamed, larger than any one frame) and a tar upload through
// the replica land in it, a download, a directory's tar, a listing and a watch through them
// read it back, and B's runtime never holds a container of it.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { type FileEvent, Warren } from "../packages/sdk/src/index.js";
import { encodeTar } from "../src/drivers/runtime/image/tar.js";
import { type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";

describe("files through a non-owner host and an api replica [postgres, s3]", () => {
  let cluster: MultiHost | undefined;
  let a: Host;
  let b: Host;
  let api: Host;
  let id = "";
  const sdk = (host: Host) => new Warren({ apiKey: cluster?.apiKey ?? "", baseUrl: host.url, retryBaseDelayMs: 50 });

  before(async () => {
    cluster = await startMultiHost("files", { hosts: 2, env: { WARREN_SSH_HOST: "ssh.warren.test" } });
    [a, b] = cluster.hosts as [Host, Host];
    api = await cluster.addApiReplica();
    id = await a.createSandbox();
    await a.waitFor(id, "running");
  });

  after(async () => {
    await cluster?.cleanup();
  });

  it("uploads through B and downloads through the replica the bytes of the sandbox on A", async () => {
    const data = randomBytes(8 * 1024 * 1024 + 11);
    const throughB = await sdk(b).sandboxes.get(id);
    const info = await throughB.files.upload("/workspace/routed/blob.bin", data, { mode: "600" });
    assert.equal(info.size, String(data.length));
    const onA = await a.exec(id, [
      "sh",
      "-c",
      "wc -c < /workspace/routed/blob.bin; stat -c %a /workspace/routed/blob.bin",
    ]);
    assert.equal(onA.body.stdout, `${data.length}\n600\n`, onA.raw);
    const throughReplica = await sdk(api).sandboxes.get(id);
    assert.ok((await throughReplica.files.read("/workspace/routed/blob.bin")).equals(data));
    assert.ok(!(await b.containers()).some((c) => c.id === id), "B's runtime holds no container of it");
  });

  it("a tar upload, a directory download, a listing and a watch through the replica and B", async () => {
    const replica = await sdk(api).sandboxes.get(id);
    await replica.files.uploadTar(
      "/workspace/tree",
      encodeTar([
        { name: "a.txt", type: "file", mode: 0o644, data: "a\n" },
        { name: "sub/", type: "dir", mode: 0o755 },
        { name: "sub/b.txt", type: "file", mode: 0o600, data: "b\n" },
      ]),
    );
    const listed = await replica.files.list("/workspace/tree");
    assert.deepEqual(
      listed.map((e) => `${e.name}:${e.type}`),
      ["a.txt:file", "sub:dir"],
    );
    const tar = await (await sdk(b).sandboxes.get(id)).files.download("/workspace/tree");
    assert.equal(tar.kind, "directory");
    let bytes = 0;
    for await (const chunk of tar.stream) bytes += chunk.length;
    assert.ok(bytes >= 4 * 512, `a tar of the tree (${bytes} bytes)`);

    const abort = new AbortController();
    const seen: FileEvent[] = [];
    for await (const event of replica.files.watch("/workspace/tree", { signal: abort.signal })) {
      seen.push(event);
      if (event.type === "ready") await b.exec(id, ["sh", "-c", "echo c > /workspace/tree/c.txt"]);
      if (event.type === "created") abort.abort();
    }
    const last = seen.at(-1);
    assert.equal(last?.type === "created" ? last.entry.name : last?.type, "c.txt");
  });
});
