// The file API against the raw floor (issue 26: "upload and download of a 1 GiB file and of a
// 10,000-file tree: within 1.5x of `tar | runc exec tar -x` of the same data"), on one real
// sandbox of an in-process server (test/support/runtime-app.ts over a listening port), the
// two sides alternated per repetition:
//   file up:    PUT .../files from the local file          vs  tar -c FILE | runc exec -i busybox tar -x
//   file down:  GET .../files to a local file               vs  runc exec busybox tar -c FILE | tar -x
//   tree up:    tar -c TREE | POST .../files:upload         vs  tar -c TREE | runc exec -i busybox tar -x
//   tree down:  GET .../files (a directory) | tar -x        vs  runc exec busybox tar -c TREE | tar -x
// The raw side runs the same busybox in the same sandbox (`runc --root <driver's> exec`), so
// the difference is Warren's path: HTTP, the session's frames and acknowledgements.
// Usage: node --import tsx bench/files.ts [--reps 3] [--mib 1024] [--files 10000]
import { execFile, spawn } from "node:child_process";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import { promisify } from "node:util";
import { startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { eventually } from "../test/support/eventually.js";
import { freePort } from "../test/support/ports.js";
import { startRuntimeApp } from "../test/support/runtime-app.js";
import { benchArgs } from "./lib/args.js";
import { recordResults } from "./lib/results.js";

const run = promisify(execFile);
const args = benchArgs();
const REPS = Number(args.get("reps") ?? 3);
const MIB = Number(args.get("mib") ?? 1024);
const FILES = Number(args.get("files") ?? 10_000);
const BB = "/dev/.warren-tools/busybox";

/** Runs `argv`, optionally feeding `stdin` (a file) and sending stdout to `stdout` (a file or a process). */
function pipeRun(
  argv: string[],
  io: { stdinFile?: string; stdinFrom?: string[]; stdoutFile?: string; stdoutTo?: string[] },
) {
  return new Promise<void>((resolve, reject) => {
    const first = io.stdinFrom
      ? spawn(io.stdinFrom[0] as string, io.stdinFrom.slice(1), { stdio: ["ignore", "pipe", "inherit"] })
      : null;
    const main = spawn(argv[0] as string, argv.slice(1), {
      stdio: [first || io.stdinFile ? "pipe" : "ignore", io.stdoutFile || io.stdoutTo ? "pipe" : "ignore", "inherit"],
    });
    const last = io.stdoutTo
      ? spawn(io.stdoutTo[0] as string, io.stdoutTo.slice(1), { stdio: ["pipe", "ignore", "inherit"] })
      : null;
    main.stdin?.on("error", (error) => reject(new Error(`${argv.join(" ")}: ${error.message}`)));
    if (first?.stdout && main.stdin) first.stdout.pipe(main.stdin);
    if (io.stdinFile && main.stdin) createReadStream(io.stdinFile).pipe(main.stdin);
    if (last?.stdin && main.stdout) main.stdout.pipe(last.stdin);
    if (io.stdoutFile && main.stdout) main.stdout.pipe(createWriteStream(io.stdoutFile));
    const procs = [first, main, last].filter((p) => p !== null);
    let left = procs.length;
    for (const p of procs) {
      p.once("error", reject);
      p.once("close", (code) => {
        if (code !== 0) reject(new Error(`${p.spawnargs.join(" ")} exited ${code}`));
        else if (--left === 0) resolve();
      });
    }
  });
}

async function timed(work: () => Promise<void>): Promise<number> {
  const started = performance.now();
  await work();
  return performance.now() - started;
}

const fixture = await startRuntimeFixture("bench-files");
const { t, reconciler } = await startRuntimeApp("pglite", fixture, { sandbox: { memoryMiB: 512 } });
const port = await freePort();
await t.app.listen({ host: "127.0.0.1", port });
const base = `http://127.0.0.1:${port}`;
const key = t.orgA.keys.owner;
const scratch = await mkdtemp(path.join(os.tmpdir(), "warren-bench-files-"));
const results: Record<string, unknown> = {};
try {
  const created = await t.request("POST", "/v1/sandboxes", {
    key,
    body: { command: ["sleep", "infinity"], network_access: "none" },
  });
  const id = created.body.id as string;
  await eventually(
    "running",
    async () =>
      ((await t.request("GET", `/v1/sandboxes/${id}`, { key })).body.sandbox as { state: string }).state === "running",
    120_000,
  );
  const runc = (...rest: string[]) => ["runc", "--root", fixture.driver.layout.runcRoot, "exec", ...rest];
  const inSandbox = async (script: string) =>
    run("runc", ["--root", fixture.driver.layout.runcRoot, "exec", id, BB, "sh", "-c", script]);

  // The data: one file of MIB MiB, and a tree of FILES files of 1 KiB in 100 directories.
  const big = path.join(scratch, "big.bin");
  await run("sh", ["-c", `head -c ${MIB}m /dev/urandom > ${big}`]);
  const tree = path.join(scratch, "tree");
  for (let d = 0; d < 100; d++) {
    await mkdir(path.join(tree, `d${d}`), { recursive: true });
    for (let f = 0; f < FILES / 100; f++) await writeFile(path.join(tree, `d${d}`, `f${f}`), Buffer.alloc(1024, f));
  }

  const put = (route: string, file: string | null, source: string[] | null) =>
    new Promise<void>((resolve, reject) => {
      const req = http.request(`${base}${route}`, {
        method: route.includes(":upload") ? "POST" : "PUT",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/octet-stream" },
      });
      req.once("response", (res) => {
        let text = "";
        res.on("data", (chunk: Buffer) => {
          if (text.length < 2000) text += chunk.toString();
        });
        res.once("end", () =>
          res.statusCode === 200 ? resolve() : reject(new Error(`${route}: ${res.statusCode} ${text}`)),
        );
      });
      req.once("error", reject);
      req.on("close", () => undefined);
      if (file) createReadStream(file).pipe(req);
      else if (source) {
        const tar = spawn(source[0] as string, source.slice(1), { stdio: ["ignore", "pipe", "ignore"] });
        tar.stdout.on("error", () => undefined);
        tar.stdout.pipe(req);
      }
    });
  const get = (route: string, sink: string | string[]) =>
    new Promise<void>((resolve, reject) => {
      http
        .get(`${base}${route}`, { headers: { authorization: `Bearer ${key}` } }, (res) => {
          if (res.statusCode !== 200) return reject(new Error(`status ${res.statusCode}`));
          if (typeof sink === "string") pipeline(res, createWriteStream(sink)).then(resolve, reject);
          else {
            const tar = spawn(sink[0] as string, sink.slice(1), { stdio: ["pipe", "ignore", "inherit"] });
            res.pipe(tar.stdin);
            tar.once("close", (code) => (code === 0 ? resolve() : reject(new Error(`tar ${code}`))));
          }
        })
        .once("error", reject);
    });

  const cases: Record<string, { warren: () => Promise<void>; raw: () => Promise<void>; reset: () => Promise<void> }> = {
    [`file up (${MIB} MiB)`]: {
      warren: () => put(`/v1/sandboxes/${id}/files?path=/workspace/w/big.bin`, big, null),
      raw: () =>
        pipeRun(runc(id, BB, "sh", "-c", `${BB} mkdir -p /workspace/r && exec ${BB} tar -x -C /workspace/r`), {
          stdinFrom: ["tar", "-c", "-C", scratch, "big.bin"],
        }),
      reset: async () => void (await inSandbox(`${BB} rm -rf /workspace/w /workspace/r`)),
    },
    [`file down (${MIB} MiB)`]: {
      warren: () => get(`/v1/sandboxes/${id}/files?path=/workspace/src/big.bin`, path.join(scratch, "down.bin")),
      raw: () =>
        pipeRun(runc(id, BB, "tar", "-c", "-C", "/workspace/src", "big.bin"), {
          stdoutTo: ["tar", "-x", "-C", path.join(scratch, "rawdown")],
        }),
      reset: async () => {
        await rm(path.join(scratch, "down.bin"), { force: true });
        await rm(path.join(scratch, "rawdown"), { recursive: true, force: true });
        await mkdir(path.join(scratch, "rawdown"));
      },
    },
    [`tree up (${FILES} files)`]: {
      warren: () => put(`/v1/sandboxes/${id}/files:upload?path=/workspace/wt`, null, ["tar", "-c", "-C", tree, "."]),
      raw: () =>
        pipeRun(runc(id, BB, "sh", "-c", `${BB} mkdir -p /workspace/rt && exec ${BB} tar -x -C /workspace/rt`), {
          stdinFrom: ["tar", "-c", "-C", tree, "."],
        }),
      reset: async () => void (await inSandbox(`${BB} rm -rf /workspace/wt /workspace/rt`)),
    },
    [`tree down (${FILES} files)`]: {
      warren: () =>
        get(`/v1/sandboxes/${id}/files?path=/workspace/srctree`, ["tar", "-x", "-C", path.join(scratch, "wtdown")]),
      raw: () =>
        pipeRun(runc(id, BB, "tar", "-c", "-C", "/workspace/srctree", "."), {
          stdoutTo: ["tar", "-x", "-C", path.join(scratch, "rtdown")],
        }),
      reset: async () => {
        for (const dir of ["wtdown", "rtdown"]) {
          await rm(path.join(scratch, dir), { recursive: true, force: true });
          await mkdir(path.join(scratch, dir));
        }
      },
    },
  };
  // Sources of the downloads, put in place once.
  await put(`/v1/sandboxes/${id}/files?path=/workspace/src/big.bin`, big, null);
  await put(`/v1/sandboxes/${id}/files:upload?path=/workspace/srctree`, null, ["tar", "-c", "-C", tree, "."]);

  for (const [name, c] of Object.entries(cases)) {
    const times = { warren: [] as number[], raw: [] as number[] };
    for (let rep = 0; rep < REPS; rep++) {
      const order: ("warren" | "raw")[] = rep % 2 === 0 ? ["warren", "raw"] : ["raw", "warren"];
      for (const side of order) {
        await c.reset();
        await inSandbox("sync");
        process.stderr.write(`${name} ${side}\n`);
        times[side].push(await timed(c[side]));
      }
    }
    await c.reset();
    const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)] as number;
    const row = {
      warren_ms: Math.round(median(times.warren)),
      raw_ms: Math.round(median(times.raw)),
      ratio: Math.round((median(times.warren) / median(times.raw)) * 100) / 100,
      samples: times,
    };
    results[name] = row;
    process.stdout.write(`${name.padEnd(24)} warren ${row.warren_ms} ms  raw ${row.raw_ms} ms  ratio ${row.ratio}\n`);
  }
  await recordResults("files.json", { reps: REPS, mib: MIB, files: FILES, results });
} finally {
  await reconciler.stop();
  await t.close();
  await fixture.cleanup();
  await rm(scratch, { recursive: true, force: true });
}
