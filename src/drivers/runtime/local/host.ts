// The host tools the local driver shells out to, installed from Debian when absent, and the
// one way to run them (argv, optional stdin, stderr kept for the error message).
import { execFile, spawn } from "node:child_process";
import { access, constants } from "node:fs/promises";
import { RuntimeError } from "../interface.js";
import { SpawnerUnavailable, type SpawnResult, spawner } from "./spawner.js";

export const TOOLS = {
  runc: "/usr/sbin/runc",
  tini: "/usr/bin/tini-static",
  nft: "/usr/sbin/nft",
  ip: "/usr/sbin/ip",
  mount: "/usr/bin/mount",
  umount: "/usr/bin/umount",
  losetup: "/usr/sbin/losetup",
  mkfsXfs: "/usr/sbin/mkfs.xfs",
  xfsGrowfs: "/usr/sbin/xfs_growfs",
  fsfreeze: "/usr/sbin/fsfreeze",
  setfattr: "/usr/bin/setfattr",
  xfsIo: "/usr/sbin/xfs_io",
  sh: "/bin/sh",
  cp: "/usr/bin/cp",
  head: "/usr/bin/head",
  cat: "/usr/bin/cat",
  gcc: "/usr/bin/gcc",
} as const;

/** glibc's static archive, which `gcc -static` links the exec agent against. */
export const STATIC_LIBC = `/usr/lib/${process.arch === "arm64" ? "aarch64" : "x86_64"}-linux-gnu/libc.a`;

/** Debian package per binary the driver needs at run time. */
const RUNTIME_PACKAGES: [binary: string, pkg: string][] = [
  [TOOLS.runc, "runc"],
  [TOOLS.tini, "tini"],
  [TOOLS.nft, "nftables"],
  [TOOLS.ip, "iproute2"],
  [TOOLS.mount, "mount"],
  [TOOLS.losetup, "mount"],
  [TOOLS.mkfsXfs, "xfsprogs"],
  [TOOLS.xfsGrowfs, "xfsprogs"],
  [TOOLS.fsfreeze, "util-linux"],
  [TOOLS.setfattr, "attr"],
  [TOOLS.xfsIo, "xfsprogs"],
  // The exec agent (exec-agent.c) is compiled on the host, statically.
  [TOOLS.gcc, "gcc"],
  [STATIC_LIBC, "libc6-dev"],
];

/** Only the tests need these: a registry to pull from and a busybox to build images of. */
const TEST_PACKAGES: [binary: string, pkg: string][] = [
  ["/usr/bin/docker-registry", "docker-registry"],
  ["/usr/bin/busybox", "busybox-static"],
];

async function present(file: string): Promise<boolean> {
  // Archives (libc.a) only need to be there; binaries need to be executable.
  return access(file, file.endsWith(".a") ? constants.R_OK : constants.X_OK).then(
    () => true,
    () => false,
  );
}

function aptGet(args: string[]): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn("apt-get", args, {
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    });
    child.stderr.resume();
    child.on("error", () => resolve(false));
    child.on("exit", (code) => resolve(code === 0));
  });
}

let installing: Promise<void> | null = null;
let installingTests: Promise<void> | null = null;

async function install(wanted: [string, string][]): Promise<void> {
  const missing: string[] = [];
  for (const [binary, pkg] of wanted) if (!(await present(binary)) && !missing.includes(pkg)) missing.push(pkg);
  if (missing.length === 0) return;
  // Two test files may install at once: wait for dpkg's lock instead of failing on it.
  const args = ["-o", "DPkg::Lock::Timeout=300", "install", "-y", "--no-install-recommends", ...missing];
  if (!(await aptGet(args))) {
    await aptGet(["-o", "DPkg::Lock::Timeout=300", "update", "-q"]);
    if (!(await aptGet(args))) {
      throw new RuntimeError("host_failure", `could not install the Debian packages ${missing.join(", ")}`);
    }
  }
  for (const [binary, pkg] of wanted) {
    if (!(await present(binary)))
      throw new RuntimeError("host_failure", `${pkg} is installed but ${binary} is missing`);
  }
}

/**
 * Installs (as root, from Debian) whatever the local driver needs and the host lacks:
 * runc, tini, nftables, iproute2, xfsprogs, attr, gcc and libc6-dev; with `forTests`, docker-registry and
 * busybox-static too. Runs once per process; later calls share the first.
 */
export function ensureHostPackages(options: { forTests?: boolean } = {}): Promise<void> {
  installing ??= install(RUNTIME_PACKAGES).catch((error) => {
    installing = null;
    throw error;
  });
  if (!options.forTests) return installing;
  installingTests ??= installing
    .then(() => install(TEST_PACKAGES))
    .catch((error) => {
      installingTests = null;
      throw error;
    });
  return installingTests;
}

export class CommandError extends Error {
  readonly exitCode: number | null;
  readonly stderr: string;

  constructor(command: string, exitCode: number | null, stderr: string) {
    super(`${command} failed (exit ${exitCode}): ${stderr.trim() || "no message"}`);
    this.name = "CommandError";
    this.exitCode = exitCode;
    this.stderr = stderr;
  }
}

export interface RunOptions {
  input?: string;
  cwd?: string;
}

/** Runs a host tool (through the spawner process, see spawner.ts); resolves with stdout, rejects with a CommandError carrying stderr. */
export async function run(file: string, args: readonly string[], options: RunOptions = {}): Promise<string> {
  const name = `${file.split("/").pop()} ${args.slice(0, 3).join(" ")}`;
  let result: SpawnResult;
  try {
    result = await spawner.run(file, args, options);
  } catch (error) {
    if (error instanceof SpawnerUnavailable) return runHere(file, args, options);
    throw new CommandError(name, null, (error as Error).message);
  }
  if (result.code === 0) return result.stdout;
  const how = result.code === null ? ` killed by ${result.signal}` : "";
  throw new CommandError(name, result.code, `${result.stderr}${how}`);
}

/** run() from this process, when the spawner process cannot be used. */
function runHere(file: string, args: readonly string[], options: RunOptions): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      file,
      args,
      { cwd: options.cwd, maxBuffer: 64 * 1024 * 1024, encoding: "utf8" },
      (error, stdout, stderr) => {
        if (!error) {
          resolve(stdout);
          return;
        }
        const code = typeof error.code === "number" ? error.code : null;
        const name = `${file.split("/").pop()} ${args.slice(0, 3).join(" ")}`;
        reject(new CommandError(name, code, `${stderr}${code === null ? ` ${error.message}` : ""}`));
      },
    );
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
}

/** Like run(), but a failure becomes a RuntimeError("host_failure") naming what was being done. */
export async function runOrFail(
  what: string,
  file: string,
  args: readonly string[],
  options: RunOptions = {},
): Promise<string> {
  try {
    return await run(file, args, options);
  } catch (error) {
    throw new RuntimeError("host_failure", `${what}: ${(error as Error).message}`, { cause: error });
  }
}
