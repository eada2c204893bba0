// A throwaway CNCF distribution registry (Debian's `docker-registry`) on a free loopback
// port with temp storage, and helpers that build test images from node-written tar layers
// (busybox-static for a runnable base) and push them through the registry HTTP API.
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { encodeTar, type TarWriteEntry } from "../../src/drivers/runtime/image/tar.js";
import { freePort, waitForExit } from "./ports.js";

export interface TestRegistry {
  /** `127.0.0.1:<port>`, as written in image references. */
  host: string;
  /** `http://127.0.0.1:<port>`. */
  url: string;
  storageDir: string;
  /** Where the registry keeps a blob's bytes (to corrupt it on purpose). */
  blobDataPath(digest: string): string;
  stop(): Promise<void>;
}

/** Installs a Debian package when `binary` is missing (we run as root; see AGENTS.md). */
export function ensureDebianPackage(binary: string, pkg: string): void {
  if (existsSync(binary)) return;
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  const install = () =>
    spawnSync("apt-get", ["install", "-y", "--no-install-recommends", pkg], { stdio: "inherit", env }).status === 0;
  if (!install()) {
    spawnSync("apt-get", ["update"], { stdio: "inherit", env });
    if (!install()) throw new Error(`could not install the Debian package ${pkg}`);
  }
  if (!existsSync(binary)) throw new Error(`${pkg} installed but ${binary} is missing`);
}

/** What the image tests need on the host: the registry, busybox, setfattr. */
export function ensureImageTestTools(): void {
  ensureDebianPackage("/usr/bin/docker-registry", "docker-registry");
  ensureDebianPackage("/usr/bin/busybox", "busybox-static");
  ensureDebianPackage("/usr/bin/setfattr", "attr");
}

export async function startTestRegistry(): Promise<TestRegistry> {
  ensureDebianPackage("/usr/bin/docker-registry", "docker-registry");
  const dir = mkdtempSync(path.join(os.tmpdir(), "warren-registry-"));
  const storageDir = path.join(dir, "storage");
  const port = await freePort();
  const configPath = path.join(dir, "config.yml");
  writeFileSync(
    configPath,
    [
      "version: 0.1",
      "log:",
      "  level: error",
      "  accesslog:",
      "    disabled: true",
      "storage:",
      "  filesystem:",
      `    rootdirectory: ${storageDir}`,
      "  delete:",
      "    enabled: true",
      "http:",
      `  addr: 127.0.0.1:${port}`,
      "",
    ].join("\n"),
  );
  // setpriv --pdeathsig: the registry dies with this process even when it is SIGKILLed (the
  // "exit" listener below covers only an orderly exit).
  const child = spawn("/usr/bin/setpriv", ["--pdeathsig", "KILL", "/usr/bin/docker-registry", "serve", configPath], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  child.stdout?.on("data", (chunk) => {
    log += String(chunk);
  });
  child.stderr?.on("data", (chunk) => {
    log += String(chunk);
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    process.removeListener("exit", killOnExit);
    child.kill("SIGTERM");
    if (!(await waitForExit(child, 5000))) {
      child.kill("SIGKILL");
      await waitForExit(child, 5000);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`docker-registry exited with ${child.exitCode}: ${log}`);
    }
    const ok = await fetch(`${url}/v2/`).then(
      (response) => response.ok,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`docker-registry did not answer on ${url}: ${log}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }

  return {
    host: `127.0.0.1:${port}`,
    url,
    storageDir,
    blobDataPath: (digest) => {
      const hex = digest.replace(/^sha256:/, "");
      return path.join(storageDir, "docker", "registry", "v2", "blobs", "sha256", hex.slice(0, 2), hex, "data");
    },
    stop,
  };
}

export function sha256(bytes: Buffer): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

async function checked(response: Response, what: string): Promise<Response> {
  if (!response.ok) throw new Error(`${what}: HTTP ${response.status} ${await response.text()}`);
  return response;
}

/** Monolithic blob upload: POST to open an upload, PUT the bytes with their digest. */
export async function pushBlob(registryUrl: string, repository: string, bytes: Buffer): Promise<string> {
  const digest = sha256(bytes);
  const head = await fetch(`${registryUrl}/v2/${repository}/blobs/${digest}`, { method: "HEAD" });
  if (head.ok) return digest;
  const start = await checked(
    await fetch(`${registryUrl}/v2/${repository}/blobs/uploads/`, { method: "POST" }),
    `start upload to ${repository}`,
  );
  const location = new URL(start.headers.get("location") ?? "", registryUrl);
  location.searchParams.set("digest", digest);
  await checked(
    await fetch(location, {
      method: "PUT",
      headers: { "content-type": "application/octet-stream", "content-length": String(bytes.length) },
      body: new Uint8Array(bytes),
    }),
    `upload blob ${digest}`,
  );
  return digest;
}

export async function pushManifest(
  registryUrl: string,
  repository: string,
  reference: string,
  mediaType: string,
  bytes: Buffer,
): Promise<string> {
  await checked(
    await fetch(`${registryUrl}/v2/${repository}/manifests/${reference}`, {
      method: "PUT",
      headers: { "content-type": mediaType },
      body: new Uint8Array(bytes),
    }),
    `put manifest ${repository}:${reference}`,
  );
  return sha256(bytes);
}

export interface ImageSpec {
  /** Uncompressed layer tarballs, bottom first. */
  layers: Buffer[];
  compression?: "gzip" | "none";
  /** Docker v2 media types, or OCI ones. */
  format?: "docker" | "oci";
  architecture?: string;
  config?: { Entrypoint?: string[]; Cmd?: string[]; Env?: string[]; WorkingDir?: string; User?: string };
}

export interface PushedLayer {
  digest: string;
  diffId: string;
  size: number;
  mediaType: string;
}

export interface PushedImage {
  repository: string;
  digest: string;
  mediaType: string;
  manifestBytes: Buffer;
  configDigest: string;
  layers: PushedLayer[];
}

/** Pushes layers, config and manifest; tags the manifest when `tag` is given. */
export async function pushImage(
  registryUrl: string,
  repository: string,
  tag: string | null,
  spec: ImageSpec,
): Promise<PushedImage> {
  const oci = spec.format === "oci";
  const gzip = spec.compression !== "none";
  const layerType = oci
    ? gzip
      ? "application/vnd.oci.image.layer.v1.tar+gzip"
      : "application/vnd.oci.image.layer.v1.tar"
    : "application/vnd.docker.image.rootfs.diff.tar.gzip";
  if (!oci && !gzip) throw new Error("Docker v2 manifests only carry gzip layers");
  const layers: PushedLayer[] = [];
  for (const tar of spec.layers) {
    const blob = gzip ? gzipSync(tar) : tar;
    const digest = await pushBlob(registryUrl, repository, blob);
    layers.push({ digest, diffId: sha256(tar), size: blob.length, mediaType: layerType });
  }
  const config = Buffer.from(
    JSON.stringify({
      architecture: spec.architecture ?? "amd64",
      os: "linux",
      config: spec.config ?? { Cmd: ["/bin/sh"], Env: ["PATH=/bin"] },
      rootfs: { type: "layers", diff_ids: layers.map((layer) => layer.diffId) },
      history: [],
    }),
  );
  const configDigest = await pushBlob(registryUrl, repository, config);
  const mediaType = oci
    ? "application/vnd.oci.image.manifest.v1+json"
    : "application/vnd.docker.distribution.manifest.v2+json";
  const manifestBytes = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType,
      config: {
        mediaType: oci ? "application/vnd.oci.image.config.v1+json" : "application/vnd.docker.container.image.v1+json",
        digest: configDigest,
        size: config.length,
      },
      layers: layers.map((layer) => ({ mediaType: layer.mediaType, digest: layer.digest, size: layer.size })),
    }),
  );
  const digest = sha256(manifestBytes);
  await pushManifest(registryUrl, repository, tag ?? digest, mediaType, manifestBytes);
  return { repository, digest, mediaType, manifestBytes, configDigest, layers };
}

/** Pushes an OCI image index over images already in `repository`. */
export async function pushIndex(
  registryUrl: string,
  repository: string,
  tag: string,
  entries: { image: PushedImage; platform: { os: string; architecture: string; variant?: string } }[],
): Promise<{ digest: string; bytes: Buffer }> {
  const mediaType = "application/vnd.oci.image.index.v1+json";
  const bytes = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType,
      manifests: entries.map(({ image, platform }) => ({
        mediaType: image.mediaType,
        digest: image.digest,
        size: image.manifestBytes.length,
        platform,
      })),
    }),
  );
  const digest = await pushManifest(registryUrl, repository, tag, mediaType, bytes);
  return { digest, bytes };
}

export const BUSYBOX_APPLETS = [
  "sh",
  "ash",
  "echo",
  "cat",
  "ls",
  "sleep",
  "nc",
  "env",
  "id",
  "true",
  "false",
  "test",
  "printf",
  "pwd",
  "mkdir",
  "rm",
  "touch",
  "cp",
  "mv",
  "ln",
  "chmod",
  "wc",
  "head",
  "tail",
  "grep",
  "sed",
  "ps",
  "kill",
  "hostname",
  "whoami",
  "uname",
  "date",
  "stat",
  "du",
  "df",
];

/** A runnable base layer: busybox-static with applet symlinks, /etc/passwd, /tmp, and a few test files. */
export function busyboxLayer(): Buffer {
  ensureDebianPackage("/usr/bin/busybox", "busybox-static");
  const entries: TarWriteEntry[] = [
    { name: "./", type: "dir", mode: 0o755 },
    { name: "bin", type: "dir" },
    { name: "bin/busybox", type: "file", mode: 0o755, data: readFileSync("/usr/bin/busybox") },
    ...BUSYBOX_APPLETS.map(
      (applet): TarWriteEntry => ({ name: `bin/${applet}`, type: "symlink", linkname: "busybox" }),
    ),
    { name: "etc", type: "dir" },
    {
      name: "etc/passwd",
      type: "file",
      data: "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    },
    { name: "etc/group", type: "file", data: "root:x:0:\nnogroup:x:65534:\n" },
    { name: "etc/motd", type: "file", data: "hello from the base layer\n" },
    { name: "opt", type: "dir" },
    { name: "opt/data", type: "dir" },
    { name: "opt/data/a", type: "file", data: "a\n" },
    { name: "opt/data/b", type: "file", data: "b\n" },
    { name: "tmp", type: "dir", mode: 0o1777 },
    { name: "root", type: "dir", mode: 0o700 },
    { name: "dev", type: "dir" },
    { name: "proc", type: "dir" },
    { name: "sys", type: "dir" },
  ];
  return encodeTar(entries);
}

/** A second layer: a whiteout (/etc/motd), an opaque dir (/opt/data), owners, modes and an xattr. */
export function changesLayer(): Buffer {
  return encodeTar([
    { name: "etc", type: "dir" },
    { name: "etc/.wh.motd", type: "file" },
    { name: "opt/data", type: "dir" },
    { name: "opt/data/.wh..wh..opq", type: "file" },
    { name: "opt/data/c", type: "file", data: "c\n" },
    { name: "home", type: "dir" },
    { name: "home/user", type: "dir", uid: 1000, gid: 1000, mode: 0o750 },
    {
      name: "home/user/notes",
      type: "file",
      uid: 1000,
      gid: 1000,
      mode: 0o640,
      mtime: 1_700_000_000,
      data: "notes\n",
      xattrs: { "user.warren.test": "kept" },
    },
  ]);
}

export interface TestImages {
  /** `test/busybox:latest`: Docker v2 manifest, gzip layers [busybox, changes]. */
  busybox: PushedImage;
  /** `test/multi:latest`: an OCI index of linux/arm64 and linux/amd64 images. */
  multi: { digest: string; amd64: PushedImage; arm64: PushedImage };
}

export async function pushTestImages(registry: TestRegistry): Promise<TestImages> {
  const base = busyboxLayer();
  const busybox = await pushImage(registry.url, "test/busybox", "latest", {
    layers: [base, changesLayer()],
    config: { Entrypoint: ["/bin/sh", "-c"], Cmd: ["echo hi"], Env: ["PATH=/bin", "GREETING=hi"], WorkingDir: "/tmp" },
  });
  const amd64 = await pushImage(registry.url, "test/multi", null, {
    format: "oci",
    compression: "none",
    layers: [base, encodeTar([{ name: "etc/arch", type: "file", data: "amd64\n" }])],
  });
  const arm64 = await pushImage(registry.url, "test/multi", "arm64-only", {
    format: "oci",
    architecture: "arm64",
    layers: [encodeTar([{ name: "etc/arch", type: "file", data: "arm64\n" }])],
  });
  const index = await pushIndex(registry.url, "test/multi", "latest", [
    { image: arm64, platform: { os: "linux", architecture: "arm64", variant: "v8" } },
    { image: amd64, platform: { os: "linux", architecture: "amd64" } },
  ]);
  return { busybox, multi: { digest: index.digest, amd64, arm64 } };
}

/**
 * Pushes `repository:latest`: the busybox base layer and a layer with `/etc/image` holding
 * `marker`, its config setting `IMAGE_MARKER=<marker>` (a second image for the warm pool's
 * tests and benchmark; pushing again with another marker moves the tag to a new digest).
 */
export async function pushMarkedImage(
  registry: TestRegistry,
  repository: string,
  marker: string,
): Promise<PushedImage> {
  return pushImage(registry.url, repository, "latest", {
    layers: [busyboxLayer(), encodeTar([{ name: "etc/image", type: "file", data: `${marker}\n` }])],
    config: { Cmd: ["/bin/sh"], Env: ["PATH=/bin", `IMAGE_MARKER=${marker}`] },
  });
}
