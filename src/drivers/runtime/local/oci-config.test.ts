import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RuntimeError } from "../interface.js";
import {
  type BundleInput,
  buildBundleConfig,
  cgroupResources,
  DEFAULT_PATH,
  DOCKER_DEFAULT_CAPABILITIES,
  execProcessSpec,
  hostsFile,
  INIT_PATH,
  MASKED_PATHS,
  mergeEnv,
  type ProcessIdentity,
  READONLY_PATHS,
  resolveArgv,
  sandboxEnv,
  validateResources,
} from "./oci-config.js";
import { DENIED_SYSCALLS, seccompProfile } from "./seccomp.js";

const invalid = (error: unknown) => error instanceof RuntimeError && error.code === "invalid_spec";

const identity: ProcessIdentity = {
  env: ["PATH=/bin", "A=1"],
  cwd: "/tmp",
  uid: 1000,
  gid: 1000,
  additionalGids: [27],
  maxOpenFiles: 20_000,
};

const input: BundleInput = {
  hostname: "sbx-1",
  rootfs: "/r/sandboxes/sbx-1/rootfs",
  args: ["python", "-m", "http.server"],
  identity,
  resources: { memoryMiB: 512, cpuMillis: 1500, pids: 128 },
  netnsPath: "/run/netns/warren-abc123-sbx-1",
  cgroupsPath: "/warren/abc123/sbx-1",
  workspaceSource: "/r/sandboxes/sbx-1/workspace",
  hostsFile: "/r/sandboxes/sbx-1/hosts",
  hostnameFile: "/r/sandboxes/sbx-1/hostname",
  tiniPath: "/usr/bin/tini-static",
  swapAccounting: true,
  arch: "x64",
};

describe("resolveArgv", () => {
  it("runs ENTRYPOINT + CMD, or the given command in their place", () => {
    assert.deepEqual(resolveArgv({ entrypoint: ["/bin/sh", "-c"], cmd: ["echo hi"] }), ["/bin/sh", "-c", "echo hi"]);
    assert.deepEqual(resolveArgv({ entrypoint: null, cmd: ["sh"] }), ["sh"]);
    assert.deepEqual(resolveArgv({ entrypoint: ["/entry"], cmd: null }), ["/entry"]);
    assert.deepEqual(resolveArgv({ entrypoint: ["/entry"], cmd: ["x"] }, ["sleep", "1"]), ["sleep", "1"]);
  });

  it("refuses an empty command", () => {
    assert.throws(() => resolveArgv({ entrypoint: null, cmd: null }), invalid);
    assert.throws(() => resolveArgv({ entrypoint: null, cmd: [] }), invalid);
    assert.throws(() => resolveArgv({ entrypoint: ["/x"], cmd: null }, []), invalid);
    assert.throws(() => resolveArgv({ entrypoint: ["/x"], cmd: null }, [""]), invalid);
  });
});

describe("environment", () => {
  it("lets later layers replace earlier keys, keeping first-seen order", () => {
    assert.deepEqual(mergeEnv(["A=1", "B=2"], { A: "3", C: "4" }, ["B=5"]), ["A=3", "B=5", "C=4"]);
    assert.deepEqual(mergeEnv(["A=x=y"], undefined), ["A=x=y"]);
    assert.throws(() => mergeEnv(["=1"]), invalid);
    assert.throws(() => mergeEnv({ A: "a\0b" }), invalid);
  });

  it("puts Docker's defaults under the image's env, under the sandbox's", () => {
    const env = sandboxEnv({
      imageEnv: ["PATH=/bin", "GREETING=hi"],
      specEnv: { GREETING: "hello", TOKEN: "t" },
      hostname: "sbx-1",
      home: "/root",
    });
    assert.deepEqual(env, ["PATH=/bin", "HOSTNAME=sbx-1", "HOME=/root", "GREETING=hello", "TOKEN=t"]);
    assert.ok(sandboxEnv({ imageEnv: [], hostname: "h", home: "/" }).includes(`PATH=${DEFAULT_PATH}`));
  });
});

describe("buildBundleConfig", () => {
  const config = buildBundleConfig(input);

  it("puts tini in front as PID 1, with the sandbox's identity", () => {
    assert.deepEqual(config.process.args, [INIT_PATH, "-g", "--", "python", "-m", "http.server"]);
    assert.deepEqual(config.process.user, { uid: 1000, gid: 1000, additionalGids: [27] });
    assert.equal(config.process.cwd, "/tmp");
    assert.deepEqual(config.process.env, identity.env);
    assert.equal(config.process.terminal, false);
    assert.equal(config.process.noNewPrivileges, true);
    assert.deepEqual(config.process.rlimits, [{ type: "RLIMIT_NOFILE", hard: 20_000, soft: 20_000 }]);
    const init = config.mounts.find((m) => m.destination === INIT_PATH);
    assert.deepEqual(init?.options.includes("ro"), true);
    assert.equal(init?.source, "/usr/bin/tini-static");
  });

  it("grants Docker's default capabilities and nothing else", () => {
    assert.equal(DOCKER_DEFAULT_CAPABILITIES.length, 14);
    for (const set of ["bounding", "effective", "permitted"] as const) {
      assert.deepEqual(config.process.capabilities[set], DOCKER_DEFAULT_CAPABILITIES);
    }
    assert.ok(!DOCKER_DEFAULT_CAPABILITIES.includes("CAP_SYS_ADMIN"));
    assert.ok(!DOCKER_DEFAULT_CAPABILITIES.includes("CAP_NET_ADMIN"));
  });

  it("uses every namespace, the sandbox's own netns, and its cgroup", () => {
    assert.deepEqual(
      config.linux.namespaces.map((n) => n.type),
      ["pid", "ipc", "uts", "mount", "network", "cgroup"],
    );
    assert.equal(config.linux.namespaces.find((n) => n.type === "network")?.path, input.netnsPath);
    assert.equal(config.linux.cgroupsPath, "/warren/abc123/sbx-1");
    assert.equal(config.hostname, "sbx-1");
    assert.deepEqual(config.root, { path: input.rootfs, readonly: false });
  });

  it("masks and write-protects /proc paths as Docker does", () => {
    assert.deepEqual(config.linux.maskedPaths, MASKED_PATHS);
    assert.deepEqual(config.linux.readonlyPaths, READONLY_PATHS);
    assert.ok(config.linux.maskedPaths.includes("/proc/kcore"));
    assert.ok(config.linux.readonlyPaths.includes("/proc/sys"));
    const sys = config.mounts.find((m) => m.destination === "/sys");
    assert.ok(sys?.options.includes("ro"));
  });

  it("mounts the workspace, hosts and hostname from the sandbox dir", () => {
    const byDestination = new Map(config.mounts.map((m) => [m.destination, m]));
    assert.equal(byDestination.get("/workspace")?.source, input.workspaceSource);
    assert.equal(byDestination.get("/etc/hosts")?.source, input.hostsFile);
    assert.equal(byDestination.get("/etc/hostname")?.source, input.hostnameFile);
    for (const m of ["/workspace", "/etc/hosts"]) assert.ok(byDestination.get(m)?.options.includes("nosuid"));
    assert.ok(hostsFile("sbx-1").includes("127.0.1.1\tsbx-1"));
  });

  it("turns the ResourceSpec into cgroup limits", () => {
    assert.deepEqual(config.linux.resources.memory, { limit: 512 * 1024 * 1024, swap: 512 * 1024 * 1024 });
    assert.deepEqual(config.linux.resources.cpu, { quota: 150_000, period: 100_000, shares: 1536 });
    assert.deepEqual(config.linux.resources.pids, { limit: 128 });
    assert.deepEqual(config.linux.resources.devices, [{ allow: false, access: "rwm" }]);
    assert.deepEqual(cgroupResources({ memoryMiB: 64, cpuMillis: 50, pids: 8 }, false).memory, { limit: 64 << 20 });
    assert.equal(cgroupResources({ memoryMiB: 64, cpuMillis: 50, pids: 8 }, false).cpu.quota, 5000);
    // No more than the host's CPUs, in quota or weight.
    assert.deepEqual(cgroupResources({ memoryMiB: 64, cpuMillis: 128_000, pids: 8 }, false, 2000).cpu, {
      quota: 200_000,
      period: 100_000,
      shares: 2048,
    });
  });

  it("validates resources", () => {
    validateResources({ memoryMiB: 8, cpuMillis: 10, pids: 8 });
    for (const bad of [
      { memoryMiB: 0, cpuMillis: 1000, pids: 64 },
      { memoryMiB: 1.5, cpuMillis: 1000, pids: 64 },
      { memoryMiB: 64, cpuMillis: 5, pids: 64 },
      { memoryMiB: 64, cpuMillis: 1000, pids: 0 },
      { memoryMiB: 64, cpuMillis: Number.NaN, pids: 64 },
    ]) {
      assert.throws(() => validateResources(bad), invalid);
    }
  });

  it("filters syscalls for the host architecture", () => {
    assert.deepEqual(config.linux.seccomp.architectures, ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]);
    assert.deepEqual(seccompProfile("arm64").architectures, ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]);
    assert.equal(config.linux.seccomp.defaultAction, "SCMP_ACT_ALLOW");
    const denied = config.linux.seccomp.syscalls[0];
    assert.equal(denied?.action, "SCMP_ACT_ERRNO");
    for (const name of ["mount", "unshare", "setns", "init_module", "finit_module", "kexec_load", "bpf", "keyctl"]) {
      assert.ok(DENIED_SYSCALLS.includes(name), name);
    }
    const clone = config.linux.seccomp.syscalls.find((s) => s.names.includes("clone"));
    assert.deepEqual(clone?.args, [{ index: 0, value: 0x10000000, valueTwo: 0x10000000, op: "SCMP_CMP_MASKED_EQ" }]);
  });
});

describe("execProcessSpec", () => {
  it("adds the request's env and cwd to the sandbox's identity", () => {
    const spec = execProcessSpec(identity, { argv: ["ls", "-l"], env: { A: "2", B: "3" }, cwd: "/workspace" });
    assert.deepEqual(spec.args, ["ls", "-l"]);
    assert.deepEqual(spec.env, ["PATH=/bin", "A=2", "B=3"]);
    assert.equal(spec.cwd, "/workspace");
    assert.deepEqual(spec.user, { uid: 1000, gid: 1000, additionalGids: [27] });
    assert.equal(spec.noNewPrivileges, true);
    assert.deepEqual(spec.capabilities.bounding, DOCKER_DEFAULT_CAPABILITIES);
  });

  it("defaults to the sandbox's env and working dir, and needs a command", () => {
    const spec = execProcessSpec(identity, { argv: ["true"] });
    assert.deepEqual(spec.env, identity.env);
    assert.equal(spec.cwd, "/tmp");
    assert.throws(() => execProcessSpec(identity, { argv: [] }), invalid);
  });
});

describe("buildBundleConfig: user namespaces", () => {
  it("maps one to one by default, and 65536 ids from the block's first with id mapping", () => {
    const plain = buildBundleConfig({ ...input, userNamespacePath: "/r/sandboxes/sbx-1/userns" });
    assert.deepEqual(plain.linux.uidMappings, [{ containerID: 0, hostID: 0, size: 4_294_967_295 }]);
    assert.deepEqual(plain.process.rlimits, [{ type: "RLIMIT_NOFILE", hard: 20_000, soft: 20_000 }]);
    const mapped = buildBundleConfig({
      ...input,
      identity: { ...identity, inheritLimits: true },
      userNamespacePath: "/r/sandboxes/sbx-1/userns",
      mappedIdsFrom: 2 ** 31,
    });
    assert.deepEqual(mapped.linux.uidMappings, [{ containerID: 0, hostID: 2 ** 31, size: 65_536 }]);
    assert.deepEqual(mapped.linux.gidMappings, mapped.linux.uidMappings);
    assert.ok(mapped.linux.namespaces.some((ns) => ns.type === "user" && ns.path === "/r/sandboxes/sbx-1/userns"));
    // runc could not prlimit a process of another host uid here: it inherits runc's.
    assert.deepEqual(mapped.process.rlimits, []);
  });
});
