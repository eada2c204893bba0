// The file API's clients on a real sandbox: the SDK's sandbox.files (upload and download
// streamed with progress, a tar upload, stat, list, mkdir, rename, remove, watch) and the
// CLI's `warren sandbox cp` both ways, a file and a directory.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { type FileEvent, NotFoundError, type Sandbox, Warren } from "../packages/sdk/src/index.js";
import { encodeTar } from "../src/drivers/runtime/image/tar.js";
import { type CliResult, runCli } from "./support/cli.js";
import { type ApiServer, startApiServer } from "./support/sdk-server.js";

describe("file API clients [pglite, local runtime]", () => {
  let api: ApiServer;
  let warren: Warren;
  let sbx: Sandbox;
  let home: string;
  let scratch: string;
  const ok = (res: CliResult) => {
    assert.equal(res.code, 0, `exit ${res.code}\nstdout: ${res.stdout}\nstderr: ${res.stderr}`);
    return res;
  };

  before(async () => {
    api = await startApiServer("pglite", { runtime: "files-clients" });
    warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url, retryBaseDelayMs: 20 });
    sbx = await warren.sandboxes.create({ name: "files", command: ["sleep", "3600"], network_access: "none" });
    home = await mkdtemp(path.join(os.tmpdir(), "warren-files-cli-"));
    scratch = await mkdtemp(path.join(os.tmpdir(), "warren-files-local-"));
    ok(await runCli(["login", "--url", api.url, "--api-key-stdin"], { home, stdin: `${api.t.orgA.keys.owner}\n` }));
  });
  after(async () => {
    await api?.close();
    for (const dir of [home, scratch]) if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("uploads a stream and downloads it with progress; stat, list, mkdir, rename, remove", async () => {
    const data = randomBytes(5 * 1024 * 1024 + 3);
    async function* pieces() {
      for (let at = 0; at < data.length; at += 64 * 1024) yield data.subarray(at, at + 64 * 1024);
    }
    const up: number[] = [];
    const info = await sbx.files.upload("/workspace/sdk/deep/blob.bin", pieces(), {
      mode: 0o640,
      onProgress: (p) => up.push(p.bytes),
    });
    assert.equal(info.size, String(data.length));
    assert.equal(info.mode, "0640");
    assert.equal(up.at(-1), data.length);
    assert.ok(up.length > 1, "progress as it went");
    const down: number[] = [];
    const got = await sbx.files.download("/workspace/sdk/deep/blob.bin", { onProgress: (p) => down.push(p.bytes) });
    assert.equal(got.kind, "file");
    assert.equal(got.size, data.length);
    const chunks: Uint8Array[] = [];
    for await (const chunk of got.stream) chunks.push(chunk);
    assert.ok(Buffer.concat(chunks).equals(data));
    assert.equal(down.at(-1), data.length);

    await sbx.files.mkdir("/workspace/sdk/empty");
    const entries = await sbx.files.list("/workspace/sdk");
    assert.deepEqual(
      entries.map((e) => `${e.name}:${e.type}`),
      ["deep:dir", "empty:dir"],
    );
    assert.equal((await sbx.files.stat("/workspace/sdk/empty")).type, "directory");
    await sbx.files.rename("/workspace/sdk/deep/blob.bin", "/workspace/sdk/blob.bin");
    await sbx.files.remove("/workspace/sdk/deep");
    await sbx.files.remove("/workspace/sdk", { recursive: true });
    await assert.rejects(sbx.files.stat("/workspace/sdk"), NotFoundError);
  });

  it("uploads a tar under a directory and watches a directory as an async iterator", async () => {
    await sbx.files.uploadTar(
      "/workspace/w",
      encodeTar([{ name: "first.txt", type: "file", mode: 0o644, data: "1\n" }]),
    );
    const abort = new AbortController();
    const seen: FileEvent[] = [];
    const watching = (async () => {
      for await (const event of sbx.files.watch("/workspace/w", { signal: abort.signal })) {
        seen.push(event);
        if (event.type === "ready") await sbx.files.write("/workspace/w/second.txt", "2\n");
        if (event.type === "created" && event.entry.name === "second.txt") abort.abort();
      }
    })();
    await watching;
    assert.deepEqual(seen[0], { type: "ready", path: "/workspace/w", entries: 1 });
    assert.ok(seen.some((e) => e.type === "created" && e.entry.path === "/workspace/w/second.txt"));
  });

  it("warren sandbox cp copies a directory and a file in, and both back out", async () => {
    const tree = path.join(scratch, "proj");
    await mkdir(path.join(tree, "src"), { recursive: true });
    await writeFile(path.join(tree, "src", "main.sh"), "echo main\n", { mode: 0o755 });
    await writeFile(path.join(tree, "README"), "readme\n");
    const single = path.join(scratch, "single.bin");
    await writeFile(single, randomBytes(200_000));

    ok(await runCli(["sandbox", "cp", tree, "files:/workspace/"], { home }));
    ok(await runCli(["sandbox", "cp", single, "files:/workspace/in/one.bin"], { home }));
    const ran = await sbx.exec([
      "sh",
      "-c",
      "/workspace/proj/src/main.sh && cat /workspace/proj/README && wc -c < /workspace/in/one.bin",
    ]);
    assert.equal(ran.kind === "completed" && ran.stdout, "main\nreadme\n200000\n");

    const back = path.join(scratch, "back");
    await mkdir(back);
    ok(await runCli(["sandbox", "cp", "files:/workspace/proj", back], { home }));
    assert.equal(await readFile(path.join(back, "proj", "src", "main.sh"), "utf8"), "echo main\n");
    assert.equal((await stat(path.join(back, "proj", "src", "main.sh"))).mode & 0o777, 0o755);
    const res = ok(
      await runCli(["sandbox", "cp", "--json", "files:/workspace/in/one.bin", path.join(scratch, "copy.bin")], {
        home,
      }),
    );
    assert.equal((JSON.parse(res.stdout) as { kind: string }).kind, "file");
    assert.ok((await readFile(path.join(scratch, "copy.bin"))).equals(await readFile(single)));

    const usage = await runCli(["sandbox", "cp", single, path.join(scratch, "x")], { home });
    assert.notEqual(usage.code, 0);
    assert.match(usage.stderr, /exactly one of source and destination/);
  });
});
