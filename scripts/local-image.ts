// `make offline-image`: a first sandbox with no internet. Starts Debian's docker-registry on
// loopback (WARREN_LOCAL_REGISTRY, default 127.0.0.1:5050; storage and pid under
// <WARREN_DATA_DIR>/local-registry), or reuses a registry already answering there, and pushes
// `warren/busybox:latest`, an image built here from busybox-static (every applet, /bin/sh).
// Prints the reference; `make run OFFLINE=1` makes it the default image. Loopback registries
// are pulled over plain HTTP (src/drivers/runtime/image/reference.ts).
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { encodeTar, type TarWriteEntry } from "../src/drivers/runtime/image/tar.js";
import { ensureDebianPackage, pushImage } from "../test/support/registry.js";

const address = process.env.WARREN_LOCAL_REGISTRY || "127.0.0.1:5050";
const dir = path.resolve(process.env.WARREN_DATA_DIR || "./data", "local-registry");
const url = `http://${address}`;
const REPOSITORY = "warren/busybox";

async function answers(): Promise<boolean> {
  const res = await fetch(`${url}/v2/`, { signal: AbortSignal.timeout(2000) }).catch(() => null);
  return res?.status === 200;
}

async function startRegistry(): Promise<void> {
  if (await answers()) return;
  ensureDebianPackage("/usr/bin/docker-registry", "docker-registry");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const config = path.join(dir, "config.yml");
  writeFileSync(
    config,
    [
      "version: 0.1",
      "log:",
      "  level: error",
      "  accesslog:",
      "    disabled: true",
      "storage:",
      "  filesystem:",
      `    rootdirectory: ${path.join(dir, "storage")}`,
      "http:",
      `  addr: ${address}`,
      "",
    ].join("\n"),
  );
  const log = openSync(path.join(dir, "registry.log"), "a");
  const child = spawn("/usr/bin/docker-registry", ["serve", config], { detached: true, stdio: ["ignore", log, log] });
  child.unref();
  writeFileSync(path.join(dir, "registry.pid"), String(child.pid));
  const deadline = Date.now() + 30_000;
  while (!(await answers())) {
    if (child.exitCode !== null || Date.now() > deadline) {
      const tail = readFileSync(path.join(dir, "registry.log"), "utf8").slice(-2000);
      throw new Error(`the local registry did not start on ${address} (in use? set WARREN_LOCAL_REGISTRY):\n${tail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** busybox-static with a symlink per applet, the files a shell expects, and empty mount points. */
function busyboxRootfs(): Buffer {
  ensureDebianPackage("/usr/bin/busybox", "busybox-static");
  const listed = spawnSync("/usr/bin/busybox", ["--list"], { encoding: "utf8" }).stdout;
  const applets = listed.split("\n").filter((name) => /^[a-z0-9_.[-]+$/.test(name) && name !== "busybox");
  const entries: TarWriteEntry[] = [
    { name: "./", type: "dir", mode: 0o755 },
    { name: "bin", type: "dir" },
    { name: "bin/busybox", type: "file", mode: 0o755, data: readFileSync("/usr/bin/busybox") },
    ...applets.map((applet): TarWriteEntry => ({ name: `bin/${applet}`, type: "symlink", linkname: "busybox" })),
    { name: "etc", type: "dir" },
    {
      name: "etc/passwd",
      type: "file",
      data: "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    },
    { name: "etc/group", type: "file", data: "root:x:0:\nnogroup:x:65534:\n" },
    { name: "tmp", type: "dir", mode: 0o1777 },
    { name: "root", type: "dir", mode: 0o700 },
    { name: "dev", type: "dir" },
    { name: "proc", type: "dir" },
    { name: "sys", type: "dir" },
  ];
  return encodeTar(entries);
}

await startRegistry();
const arch = process.arch === "x64" ? "amd64" : process.arch;
const image = await pushImage(url, REPOSITORY, "latest", {
  layers: [busyboxRootfs()],
  architecture: arch,
  config: { Cmd: ["/bin/sh"], Env: ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"] },
});
const reference = `${address}/${REPOSITORY}:latest`;
process.stdout.write(
  `${reference} (${image.digest}) is in the local registry on ${address}\n` +
    `use it: WARREN_DEFAULT_IMAGE=${reference} (make run OFFLINE=1 sets it), or --image ${reference}\n`,
);
