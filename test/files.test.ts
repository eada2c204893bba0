// The file API on one host, on real sandboxes (docs/api-decisions.md "Files"): upload (a file,
// a tar), download (a file raw, a directory as tar), stat, list, mkdir, remove, rename and
// watch, over a listening server; hostile paths and files inside the sandbox (symlinks out,
// `..`, FIFOs, devices, a full filesystem); another organization, a sandbox-scoped credential,
// a stopped and a quarantined sandbox; an image with no shell.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { encodeTar } from "../src/drivers/runtime/image/tar.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import type { TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";
import { freePort } from "./support/ports.js";
import { pushImage } from "./support/registry.js";
import { startRuntimeApp } from "./support/runtime-app.js";

const run = promisify(execFile);
type Json = Record<string, unknown>;

describe("sandbox files", () => {
  let fixture: RuntimeFixture;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let base: string;
  let id: string;
  let scratch: string;
  const owner = () => t.orgA.keys.owner;

  const call = async (
    method: string,
    route: string,
    options: { key?: string; query?: Record<string, string>; body?: Buffer | string; json?: unknown } = {},
  ) => {
    const query = options.query ? `?${new URLSearchParams(options.query).toString()}` : "";
    const headers: Record<string, string> = { authorization: `Bearer ${options.key ?? owner()}` };
    let body: Buffer | string | undefined = options.body;
    if (options.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.json);
    } else if (body !== undefined) headers["content-type"] = "application/octet-stream";
    const res = await fetch(`${base}${route}${query}`, {
      method,
      headers,
      ...(body !== undefined ? { body: typeof body === "string" ? body : new Uint8Array(body) } : {}),
    });
    const bytes = Buffer.from(await res.arrayBuffer());
    let json: Json = {};
    try {
      json = JSON.parse(bytes.toString()) as Json;
    } catch {}
    return { status: res.status, headers: res.headers, bytes, json };
  };
  const files = (sandbox = id) => `/v1/sandboxes/${sandbox}/files`;
  const exec = async (cmd: string, sandbox = id) => {
    const res = await t.request("POST", `/v1/sandboxes/${sandbox}:exec`, {
      key: owner(),
      body: { cmd: ["sh", "-c", cmd] },
    });
    assert.equal(res.status, 200, res.raw);
    return res.body as { exit: number; stdout: string; stderr: string };
  };
  const expectError = (res: { status: number; json: Json }, status: number, code: string) => {
    assert.equal(res.status, status, JSON.stringify(res.json));
    assert.equal(res.json.code, code, JSON.stringify(res.json));
  };
  const createRunning = async (body: Json = {}) => {
    const res = await t.request("POST", "/v1/sandboxes", {
      key: owner(),
      body: { command: ["sleep", "3600"], network_access: "none", ...body },
    });
    assert.equal(res.status, 200, res.raw);
    const created = res.body.id as string;
    await eventually(
      `sandbox ${created} running`,
      async () => {
        const got = await t.request("GET", `/v1/sandboxes/${created}`, { key: owner() });
        return (got.body.sandbox as { state: string }).state === "running";
      },
      90_000,
    );
    return created;
  };

  before(async () => {
    fixture = await startRuntimeFixture("files");
    ({ t, reconciler } = await startRuntimeApp("pglite", fixture));
    const port = await freePort();
    await t.app.listen({ host: "127.0.0.1", port });
    base = `http://127.0.0.1:${port}`;
    scratch = await mkdtemp(path.join(os.tmpdir(), "warren-files-"));
    id = await createRunning();
  });

  after(async () => {
    await reconciler?.stop();
    await t?.close();
    await fixture?.cleanup();
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  it("writes a file (parents created, mode kept), stats, lists, downloads, renames and removes it", async () => {
    const data = Buffer.alloc(3 * 1024 * 1024 + 17, 7);
    const put = await call("PUT", files(), { query: { path: "/workspace/a/b/c.bin", mode: "0750" }, body: data });
    assert.equal(put.status, 200, put.bytes.toString());
    assert.equal(put.json.type, "file");
    assert.equal(put.json.size, String(data.length));
    assert.equal(put.json.mode, "0750");
    assert.equal(put.json.path, "/workspace/a/b/c.bin");
    // No temporary file is left beside it.
    const listed = await call("GET", `${files()}:list`, { query: { path: "/workspace/a/b" } });
    assert.equal(listed.status, 200);
    assert.deepEqual(
      (listed.json.entries as Json[]).map((e) => e.name),
      ["c.bin"],
    );
    assert.equal(listed.json.truncated, false);
    const got = await call("GET", files(), { query: { path: "/workspace/a/b/c.bin" } });
    assert.equal(got.status, 200);
    assert.equal(got.headers.get("x-warren-file-type"), "file");
    assert.ok(got.bytes.equals(data));
    const stat = await call("GET", `${files()}:stat`, { query: { path: "/workspace/a" } });
    assert.equal(stat.json.type, "directory");
    const moved = await call("POST", `${files()}:rename`, {
      json: { from: "/workspace/a/b/c.bin", to: "/workspace/moved/c.bin" },
    });
    assert.equal(moved.status, 200, moved.bytes.toString());
    assert.equal(moved.json.size, String(data.length));
    expectError(
      await call("POST", `${files()}:rename`, { json: { from: "/workspace/nothing", to: "/workspace/x" } }),
      404,
      "not_found",
    );
    assert.equal((await call("POST", `${files()}:mkdir`, { json: { path: "/workspace/d1/d2" } })).status, 200);
    expectError(
      await call("POST", `${files()}:remove`, { json: { path: "/workspace/d1" } }),
      400,
      "failed_precondition",
    );
    assert.equal(
      (await call("POST", `${files()}:remove`, { json: { path: "/workspace/d1", recursive: true } })).status,
      204,
    );
    assert.equal((await call("POST", `${files()}:remove`, { json: { path: "/workspace/moved/c.bin" } })).status, 204);
    expectError(await call("GET", `${files()}:stat`, { query: { path: "/workspace/moved/c.bin" } }), 404, "not_found");
    // File operations are the sandbox's activity (source session), as an SSH session is.
    const got2 = await t.request("GET", `/v1/sandboxes/${id}`, { key: owner() });
    assert.equal(got2.status, 200, got2.raw);
    assert.equal((got2.body.sandbox as { last_activity?: { source: string } }).last_activity?.source, "session");
  });

  it("extracts a tar under a directory (modes kept) and downloads a directory as tar", async () => {
    const tar = encodeTar([
      { name: "src/", type: "dir", mode: 0o755 },
      { name: "src/run.sh", type: "file", mode: 0o755, data: "#!/bin/sh\necho ran\n" },
      { name: "src/notes.txt", type: "file", mode: 0o600, data: "notes\n" },
      { name: "src/link", type: "symlink", linkname: "notes.txt" },
    ]);
    const up = await call("POST", `${files()}:upload`, { query: { path: "/workspace/tree" }, body: tar });
    assert.equal(up.status, 200, up.bytes.toString());
    assert.equal(up.json.type, "directory");
    const ran = await exec("/workspace/tree/src/run.sh && stat -c %a /workspace/tree/src/notes.txt");
    assert.equal(ran.stdout, "ran\n600\n");
    const down = await call("GET", files(), { query: { path: "/workspace/tree" } });
    assert.equal(down.status, 200);
    assert.equal(down.headers.get("content-type"), "application/x-tar");
    const archive = path.join(scratch, "tree.tar");
    await writeFile(archive, down.bytes);
    const { stdout } = await run("tar", ["-tvf", archive]);
    assert.match(stdout, /-rwxr-xr-x .* \.\/src\/run\.sh/);
    assert.match(stdout, /\.\/src\/link -> notes\.txt/);
    const out = path.join(scratch, "out");
    await run("mkdir", ["-p", out]);
    await run("tar", ["-xf", archive, "-C", out]);
    assert.equal(await readFile(path.join(out, "src", "notes.txt"), "utf8"), "notes\n");
  });

  it("refuses bad paths: relative, `..`, NUL, longer than 4096 bytes, and the root itself", async () => {
    for (const bad of ["workspace/x", "/workspace/../etc/passwd", "/a/./b", "/a\0b", `/${"x".repeat(4096)}`]) {
      expectError(await call("GET", `${files()}:stat`, { query: { path: bad } }), 400, "invalid_argument");
      expectError(await call("PUT", files(), { query: { path: bad }, body: "x" }), 400, "invalid_argument");
    }
    // 4096 bytes exactly is a path (not found), one more is refused.
    const longest = `/${"y".repeat(4095)}`;
    assert.notEqual((await call("GET", `${files()}:stat`, { query: { path: longest } })).status, 400);
    expectError(await call("POST", `${files()}:remove`, { json: { path: "/" } }), 400, "invalid_argument");
    expectError(
      await call("PUT", files(), { query: { path: "/workspace/m", mode: "9999" }, body: "x" }),
      400,
      "invalid_argument",
    );
  });

  it("resolves symlinks inside the sandbox: a link to the host's /etc/shadow or ../../.. reads the sandbox's own", async () => {
    await exec(
      "mkdir -p /workspace/hostile && echo sandbox-shadow > /tmp/shadow-marker && " +
        "ln -sf /etc/shadow /workspace/hostile/shadow && ln -sf ../../../../../../etc /workspace/hostile/up && " +
        "ln -sf /tmp/shadow-marker /workspace/hostile/marker",
    );
    const shadow = await call("GET", files(), { query: { path: "/workspace/hostile/shadow" } });
    // The test image has no /etc/shadow: the link dangles inside the sandbox.
    expectError(shadow, 404, "not_found");
    const up = await call("GET", files(), { query: { path: "/workspace/hostile/up/passwd" } });
    assert.equal(up.status, 200);
    assert.equal(up.bytes.toString(), (await exec("cat /etc/passwd")).stdout);
    assert.notEqual(up.bytes.toString(), await readFile("/etc/passwd", "utf8"));
    const stat = await call("GET", `${files()}:stat`, { query: { path: "/workspace/hostile/shadow" } });
    assert.equal(stat.json.type, "symlink");
    assert.equal(stat.json.link_target, "/etc/shadow");
    // Writing through a link out lands inside the sandbox; the host's file is untouched.
    const hostPasswd = await readFile("/etc/passwd", "utf8");
    assert.equal(
      (await call("PUT", files(), { query: { path: "/workspace/hostile/up/warren-test" }, body: "in" })).status,
      200,
    );
    assert.equal((await exec("cat /etc/warren-test")).stdout, "in");
    assert.equal(await readFile("/etc/passwd", "utf8"), hostPasswd);
  });

  it("refuses a FIFO, /dev/zero and a socket-like target as a file download, at once", async () => {
    await exec("mkfifo /workspace/fifo && ln -sf /dev/zero /workspace/zero");
    const started = Date.now();
    for (const target of ["/workspace/fifo", "/dev/zero", "/workspace/zero", "/dev/null"]) {
      expectError(await call("GET", files(), { query: { path: target } }), 400, "failed_precondition");
    }
    assert.ok(Date.now() - started < 10_000, "refused without waiting on the FIFO");
    // A directory holding them downloads as a tar of entries (none read).
    const dir = await call("GET", files(), { query: { path: "/workspace" } });
    assert.equal(dir.status, 200);
  });

  it("answers a full filesystem as payload_too_large (no_space), leaving no partial file", async () => {
    // /dev/shm is a 64 MiB tmpfs in every sandbox.
    const res = await call("PUT", files(), { query: { path: "/dev/shm/big" }, body: Buffer.alloc(80 * 1024 * 1024) });
    expectError(res, 413, "payload_too_large");
    assert.match(res.json.message as string, /filesystem is full/);
    const listed = await call("GET", `${files()}:list`, { query: { path: "/dev/shm" } });
    assert.deepEqual(listed.json.entries, []);
  });

  it("lists at most limit entries, with truncated", async () => {
    await exec("mkdir -p /workspace/many && cd /workspace/many && for i in $(seq 1 30); do : > f$i; done");
    const some = await call("GET", `${files()}:list`, { query: { path: "/workspace/many", limit: "10" } });
    assert.equal(some.status, 200);
    assert.equal((some.json.entries as Json[]).length, 10);
    assert.equal(some.json.truncated, true);
    const all = await call("GET", `${files()}:list`, { query: { path: "/workspace/many", limit: "30" } });
    assert.equal((all.json.entries as Json[]).length, 30);
    assert.equal(all.json.truncated, false);
    expectError(
      await call("GET", `${files()}:list`, { query: { path: "/workspace/many", limit: "10001" } }),
      400,
      "invalid_argument",
    );
    expectError(
      await call("GET", `${files()}:list`, { query: { path: "/workspace/many/f1" } }),
      400,
      "failed_precondition",
    );
  });

  it("watches a directory: ready, then created, modified and deleted", async () => {
    await exec("mkdir -p /workspace/watched && echo one > /workspace/watched/keep");
    const abort = new AbortController();
    const res = await fetch(`${base}${files()}:watch?path=/workspace/watched`, {
      headers: { authorization: `Bearer ${owner()}` },
      signal: abort.signal,
    });
    assert.equal(res.status, 200);
    const reader = res.body?.getReader();
    assert.ok(reader);
    let text = "";
    const decoder = new TextDecoder();
    const until = async (pattern: RegExp) => {
      const deadline = Date.now() + 30_000;
      while (!pattern.test(text)) {
        if (Date.now() > deadline) throw new Error(`no ${pattern} in ${text}`);
        const { value, done } = await reader.read();
        if (done) throw new Error(`the watch ended: ${text}`);
        text += decoder.decode(value, { stream: true });
      }
    };
    await until(/event: ready\ndata: \{"path":"\/workspace\/watched","entries":1\}/);
    await exec("echo new > /workspace/watched/new && rm /workspace/watched/keep");
    await until(/event: created\ndata: [^\n]*"name":"new"/);
    await until(/event: deleted\ndata: [^\n]*"name":"keep"/);
    await exec("echo longer-content > /workspace/watched/new");
    await until(/event: modified\ndata: [^\n]*"name":"new"/);
    abort.abort();
  });

  it("lists names holding a newline or bytes that are not UTF-8 as entries of their own", async () => {
    await exec(
      "mkdir -p /workspace/names && cd /workspace/names && : > \"$(printf 'a\\nb')\" && : > \"$(printf 'x\\377y')\" && : > plain",
    );
    const listed = await call("GET", `${files()}:list`, { query: { path: "/workspace/names" } });
    assert.equal(listed.status, 200, listed.bytes.toString());
    const names = (listed.json.entries as Json[]).map((e) => e.name);
    assert.equal(names.length, 3, JSON.stringify(names));
    assert.ok(names.includes("a\nb"));
    assert.ok(names.includes("plain"));
  });

  it("a download whose reader does not read holds the sandbox's reader back, then completes", async () => {
    await exec("head -c 48m /dev/urandom > /workspace/big.bin");
    const expected = (await exec("md5sum < /workspace/big.bin")).stdout.split(" ")[0];
    const { request } = await import("node:http");
    const res = await new Promise<import("node:http").IncomingMessage>((resolve, reject) => {
      const req = request(`${base}${files()}?path=/workspace/big.bin`, {
        headers: { authorization: `Bearer ${owner()}` },
      });
      req.once("response", resolve);
      req.once("error", reject);
      req.end();
    });
    assert.equal(res.statusCode, 200);
    res.pause();
    // The sandbox's `dd` still runs while nobody reads: the server took no more than its
    // socket and one chunk (a sleep that only proves an absence: a buffering server would
    // have drained 48 MiB long before).
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const ps = await exec("ps -o args | grep -c '[b]usybox dd' || true");
    assert.equal(ps.stdout.trim(), "1", "the reader in the sandbox is held");
    const { createHash } = await import("node:crypto");
    const hash = createHash("md5");
    let bytes = 0;
    res.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
      hash.update(chunk);
    });
    res.resume();
    await new Promise((resolve) => res.once("end", resolve));
    assert.equal(bytes, 48 * 1024 * 1024);
    assert.equal(hash.digest("hex"), expected);
    await exec("rm /workspace/big.bin");
  });

  it("an upload cut off midway leaves neither the file nor its temporary copy", async () => {
    const { request } = await import("node:http");
    const req = request(`${base}${files()}?path=/workspace/cut/file.bin`, {
      method: "PUT",
      headers: {
        authorization: `Bearer ${owner()}`,
        "content-type": "application/octet-stream",
        "content-length": String(8 << 20),
      },
    });
    req.on("error", () => undefined);
    req.write(Buffer.alloc(1 << 20));
    await eventually("the partial upload in the sandbox", async () => {
      const listed = await call("GET", `${files()}:list`, { query: { path: "/workspace/cut" } });
      return listed.status === 200 && (listed.json.entries as Json[]).length === 1;
    });
    req.destroy();
    await eventually("the temporary file removed", async () => {
      const listed = await call("GET", `${files()}:list`, { query: { path: "/workspace/cut" } });
      return listed.status === 200 && (listed.json.entries as Json[]).length === 0;
    });
  });

  it("is not_found for another organization, and a sandbox-scoped key of another sandbox", async () => {
    const other = await t.request("POST", "/v1/sandboxes", {
      key: owner(),
      body: { command: ["sleep", "3600"], network_access: "none" },
    });
    const otherId = other.body.id as string;
    const scoped = await t.issueKey(t.orgA, { sandbox: { sandboxId: otherId, lineagePath: "/" } });
    const orgB = t.orgB.keys.owner;
    for (const key of [orgB, scoped.key]) {
      expectError(await call("GET", `${files()}:stat`, { key, query: { path: "/workspace" } }), 404, "not_found");
      expectError(await call("PUT", files(), { key, query: { path: "/workspace/x" }, body: "x" }), 404, "not_found");
      expectError(await call("GET", files(), { key, query: { path: "/etc/passwd" } }), 404, "not_found");
      expectError(await call("POST", `${files()}:mkdir`, { key, json: { path: "/workspace/y" } }), 404, "not_found");
    }
    // The sandbox's own scoped key may.
    const own = await t.issueKey(t.orgA, { sandbox: { sandboxId: id, lineagePath: "/" } });
    assert.equal((await call("GET", `${files()}:stat`, { key: own.key, query: { path: "/workspace" } })).status, 200);
  });

  it("runs in an image with no shell, and refuses a stopped and a quarantined sandbox", async () => {
    const ref = `${fixture.registry.host}/test/noshell:latest`;
    await pushImage(fixture.registry.url, "test/noshell", "latest", {
      layers: [
        encodeTar([
          { name: "./", type: "dir", mode: 0o755 },
          { name: "sleep", type: "file", mode: 0o755, data: await readFile("/usr/bin/busybox") },
          { name: "workspace", type: "dir", mode: 0o755 },
        ]),
      ],
      config: { Entrypoint: ["/sleep"], Cmd: ["3600"], WorkingDir: "/" },
    });
    const bare = await createRunning({ image: ref, command: ["/sleep", "3600"] });
    const put = await call("PUT", files(bare), { query: { path: "/workspace/n/f.txt" }, body: "no shell" });
    assert.equal(put.status, 200, put.bytes.toString());
    assert.equal(
      (await call("GET", files(bare), { query: { path: "/workspace/n/f.txt" } })).bytes.toString(),
      "no shell",
    );

    const stopped = await t.request("PATCH", `/v1/sandboxes/${bare}`, { key: owner(), body: { state: "stopped" } });
    assert.equal(stopped.status, 200, stopped.raw);
    expectError(await call("GET", `${files(bare)}:stat`, { query: { path: "/" } }), 409, "sandbox_not_running");

    await t.c.admin.quarantine(id, true, "looking");
    expectError(await call("GET", `${files()}:stat`, { query: { path: "/" } }), 409, "quarantined");
    expectError(await call("PUT", files(), { query: { path: "/workspace/q" }, body: "x" }), 409, "quarantined");
    await t.c.admin.quarantine(id, false, "done");
  });
});
