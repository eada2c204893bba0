// The baseline for the sandbox benchmark: plain runc on a busybox bundle whose config.json is
// built by Warren's own buildBundleConfig (same seccomp filter, capabilities, masked paths,
// cgroup limits, tini as PID 1, a network namespace made beforehand and joined, as Warren's
// `none` sandboxes do), so the difference to Warren is Warren's own work, not a lighter
// container. Everything it makes (containers, netns, cgroups, the temp dir) goes in close().
import { execFile, spawn } from "node:child_process";
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, rmdir, stat, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { cgroupDirs } from "../../src/drivers/runtime/local/cgroups.js";
import { TOOLS } from "../../src/drivers/runtime/local/host.js";
import { buildBundleConfig, DEFAULT_PATH, hostsFile } from "../../src/drivers/runtime/local/oci-config.js";

const exec = promisify(execFile);
// A plain directory rootfs of busybox applets, enough for `sleep` and `true`.
const BUSYBOX_APPLETS = ["sh", "sleep", "true", "cat", "ls", "echo"];

export interface RawRunc {
  /** `runc run -d` of a fresh container; resolves with the container id and the time runc took. */
  run(): Promise<{ id: string; ms: number }>;
  /** `runc exec <id> true`; the time runc took. */
  execTrue(id: string): Promise<number>;
  /** `runc delete --force`. */
  remove(id: string): Promise<void>;
  close(): Promise<void>;
}

export async function openRawRunc(resources: { memoryMiB: number; cpuMillis: number; pids: number }) {
  const dir = await mkdtemp(path.join(os.tmpdir(), "warren-bench-raw-"));
  const runcRoot = path.join(dir, "runc");
  const bundle = path.join(dir, "bundle");
  const rootfs = path.join(bundle, "rootfs");
  const tag = path
    .basename(dir)
    .replace(/[^a-zA-Z0-9]/g, "")
    .slice(-8)
    .toLowerCase();
  const netns = `warren-bench-raw-${tag}`;
  const cgroupParent = `/warren-bench-raw-${tag}`;
  for (const sub of ["bin", "proc", "sys", "dev", "tmp", "etc", "workspace"]) {
    await mkdir(path.join(rootfs, sub), { recursive: true });
  }
  await mkdir(runcRoot, { mode: 0o700 });
  await copyFile("/usr/bin/busybox", path.join(rootfs, "bin/busybox"));
  for (const applet of BUSYBOX_APPLETS) await symlink("busybox", path.join(rootfs, "bin", applet));
  await mkdir(path.join(dir, "workspace"));
  await writeFile(path.join(dir, "hosts"), hostsFile("raw"));
  await writeFile(path.join(dir, "hostname"), "raw\n");
  await exec(TOOLS.ip, ["netns", "add", netns]);
  await exec(TOOLS.ip, ["-n", netns, "link", "set", "lo", "up"]);
  const swapAccounting = await stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").then(
    () => true,
    () => false,
  );
  // As the driver does: RLIMIT_NOFILE as high as this process may grant.
  const limits = await readFile("/proc/self/limits", "utf8");
  const maxOpenFiles = Math.min(1_048_576, Number(/^Max open files\s+\S+\s+(\d+)/m.exec(limits)?.[1] ?? 1024));
  const live = new Set<string>();
  let next = 0;

  const writeConfig = async (id: string) => {
    const config = buildBundleConfig({
      hostname: "raw",
      rootfs,
      args: ["sleep", "3600"],
      identity: {
        env: [`PATH=${DEFAULT_PATH}`, "HOME=/root", "HOSTNAME=raw"],
        cwd: "/",
        uid: 0,
        gid: 0,
        additionalGids: [],
        maxOpenFiles,
      },
      resources,
      netnsPath: `/run/netns/${netns}`,
      cgroupsPath: `${cgroupParent}/${id}`,
      workspaceSource: path.join(dir, "workspace"),
      hostsFile: path.join(dir, "hosts"),
      hostnameFile: path.join(dir, "hostname"),
      tiniPath: TOOLS.tini,
      swapAccounting,
      arch: process.arch,
    });
    // One bundle and one rootfs for every container (they only sleep).
    await writeFile(path.join(bundle, "config.json"), JSON.stringify(config));
  };

  const raw: RawRunc = {
    async run() {
      const id = `raw-${tag}-${next++}`;
      await writeConfig(id);
      live.add(id);
      const started = performance.now();
      // No pipes: the detached container would hold them open after runc returns.
      const child = spawn(
        TOOLS.runc,
        ["--root", runcRoot, "run", "-d", "--bundle", bundle, "--pid-file", path.join(dir, `${id}.pid`), id],
        { stdio: "ignore" },
      );
      const code = await new Promise<number | null>((resolve, reject) => {
        child.on("error", reject);
        child.on("exit", resolve);
      });
      const ms = performance.now() - started;
      if (code !== 0) throw new Error(`runc run -d ${id} exited with ${code}`);
      return { id, ms };
    },
    async execTrue(id) {
      const started = performance.now();
      await exec(TOOLS.runc, ["--root", runcRoot, "exec", id, "true"]);
      return performance.now() - started;
    },
    async remove(id) {
      await exec(TOOLS.runc, ["--root", runcRoot, "delete", "--force", id]).catch(() => undefined);
      live.delete(id);
    },
    async close() {
      for (const id of [...live]) await raw.remove(id);
      await exec(TOOLS.ip, ["netns", "delete", netns]).catch(() => undefined);
      // Deepest first: the per-container cgroups, then the parent, in every hierarchy.
      const dirs = await cgroupDirs(cgroupParent).catch(() => [] as string[]);
      for (const parent of dirs) {
        const children = await readdir(parent).catch(() => [] as string[]);
        for (const child of children) {
          if (child.startsWith("raw-")) await rmdir(path.join(parent, child)).catch(() => undefined);
        }
        await rmdir(parent).catch(() => undefined);
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
  return raw;
}
