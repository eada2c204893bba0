// warren sandbox cp SRC DST: one side `<sandbox>:/absolute/path`, the other a local path.
// A file goes as itself (PUT .../files, GET .../files); a directory as a tar stream made or
// unpacked by the local `tar` (POST .../files:upload, GET .../files of a directory). Like cp:
// a destination ending in `/` or naming an existing directory receives the source under its
// own name; otherwise the destination is the new name. A progress line is drawn on a terminal.
import { spawn } from "node:child_process";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, stat } from "node:fs/promises";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import type { Command } from "commander";
import type { Sandbox, TransferProgress } from "../../../sdk/src/index.js";
import { client, type GlobalOptions, mib, output, UsageError } from "../context.js";
import { type Action, example } from "../program.js";

const REMOTE = /^([A-Za-z0-9][A-Za-z0-9_.-]*):(\/.*)$/;

interface Remote {
  ref: string;
  path: string;
}

function remoteOf(arg: string): Remote | null {
  const match = REMOTE.exec(arg);
  return match ? { ref: match[1] as string, path: match[2] as string } : null;
}

const baseName = (p: string) => path.posix.basename(p.replace(/\/+$/, "")) || "/";
const joinRemote = (dir: string, name: string) => `${dir.replace(/\/+$/, "")}/${name}`;

export function registerCp(sandbox: Command, action: (fn: Action) => (...args: unknown[]) => void): void {
  example(
    sandbox
      .command("cp <source> <destination>")
      .description("copy a file or directory into or out of a sandbox (<sandbox>:/path on one side)"),
    "warren sandbox cp ./dir dev:/workspace/ && warren sandbox cp dev:/workspace/out.txt ./",
  ).action(
    action(async (g: GlobalOptions, source: string, destination: string) => {
      const from = remoteOf(source);
      const to = remoteOf(destination);
      if ((from === null) === (to === null)) {
        throw new UsageError("exactly one of source and destination must be <sandbox>:/absolute/path");
      }
      const warren = await client(g);
      const out = output(g);
      const progress = (label: string) => (p: TransferProgress) =>
        out.progress(p.total ? `${label} ${mib(p.bytes)} of ${mib(p.total)}` : `${label} ${mib(p.bytes)}`);
      let result: { from: string; to: string; kind: string };
      if (to) {
        const s = await warren.sandboxes.get(to.ref);
        result = await upload(s, source, to, progress(`uploading ${source}`));
      } else {
        const remote = from as Remote;
        const s = await warren.sandboxes.get(remote.ref);
        result = await download(s, remote, destination, progress(`downloading ${remote.path}`));
      }
      out.done();
      out.print(result, (r: typeof result) => `copied ${r.kind} ${r.from} -> ${r.to}\n`);
    }),
  );
}

async function upload(
  s: Sandbox,
  local: string,
  to: Remote,
  onProgress: (p: TransferProgress) => void,
): Promise<{ from: string; to: string; kind: string }> {
  const info = await stat(local).catch(() => null);
  if (!info) throw new UsageError(`no such local file: ${local}`);
  const into = to.path.endsWith("/");
  const target = into ? joinRemote(to.path, path.basename(path.resolve(local))) : to.path;
  if (info.isDirectory()) {
    const tar = spawn("tar", ["-c", "-C", local, "."], { stdio: ["ignore", "pipe", "inherit"] });
    const exited = new Promise<number | null>((resolve) => tar.once("close", resolve));
    await s.files.uploadTar(target, tar.stdout, { onProgress });
    if ((await exited) !== 0) throw new Error("the local tar failed");
    return { from: local, to: `${to.ref}:${target}`, kind: "directory" };
  }
  if (!info.isFile()) throw new UsageError(`not a regular file or directory: ${local}`);
  const mode = (info.mode & 0o7777).toString(8);
  let sent = 0;
  await s.files.upload(target, createReadStream(local), {
    mode,
    onProgress: (p) => {
      sent = p.bytes;
      onProgress({ bytes: sent, total: info.size });
    },
  });
  return { from: local, to: `${to.ref}:${target}`, kind: "file" };
}

async function download(
  s: Sandbox,
  from: Remote,
  local: string,
  onProgress: (p: TransferProgress) => void,
): Promise<{ from: string; to: string; kind: string }> {
  const existing = await stat(local).catch(() => null);
  const into = local.endsWith("/") || existing?.isDirectory() === true;
  const target = into ? path.join(local, baseName(from.path)) : local;
  const got = await s.files.download(from.path, { onProgress });
  if (got.kind === "file") {
    if (into) await mkdir(local, { recursive: true });
    await pipeline(got.stream, createWriteStream(target));
    return { from: `${from.ref}:${from.path}`, to: target, kind: "file" };
  }
  await mkdir(target, { recursive: true });
  const tar = spawn("tar", ["-x", "-C", target, "-f", "-"], { stdio: ["pipe", "inherit", "inherit"] });
  const exited = new Promise<number | null>((resolve) => tar.once("close", resolve));
  await pipeline(got.stream, tar.stdin);
  if ((await exited) !== 0) throw new Error("the local tar failed");
  return { from: `${from.ref}:${from.path}`, to: target, kind: "directory" };
}
