// Parsers of host state: mountinfo, /proc/<pid>/stat, cgroup hierarchies and counters, runc's log.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { cgroupHierarchies, parseOomKills, superOptionsByMountPoint } from "./cgroups.js";
import { assertSandboxId, isSandboxId } from "./layout.js";
import { mountsUnder, overlayOptions, parseMountInfo, readOnlyViewOptions } from "./mounts.js";
import { parseProcStat } from "./runc.js";
import { firstRuncError } from "./supervisor.js";

const MOUNTINFO = [
  "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
  "30 22 0:25 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755",
  "31 30 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
  "32 30 0:27 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids",
  "33 30 0:28 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd",
  "34 30 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
  "40 22 0:40 / /r/sandboxes/a/rootfs rw,relatime - overlay overlay rw,lowerdir=x,upperdir=y,workdir=z",
  "41 22 7:0 / /r/sandboxes/a/workspace rw,nosuid - ext4 /dev/loop0 rw",
  "42 22 7:1 / /r/sandboxes/ab/workspace rw - ext4 /dev/loop1 rw",
  "43 22 0:41 / /r/with\\040space rw - tmpfs tmpfs rw",
  "44 40 0:4 net:[4026532177] /run/netns/x rw - nsfs nsfs rw",
  "",
].join("\n");

describe("mountinfo", () => {
  it("parses mount points, types and sources, unescaping octal escapes", () => {
    const mounts = parseMountInfo(MOUNTINFO);
    assert.equal(mounts.length, 11);
    assert.deepEqual(mounts[6], {
      root: "/",
      mountPoint: "/r/sandboxes/a/rootfs",
      fsType: "overlay",
      source: "overlay",
    });
    assert.equal(mounts[9]?.mountPoint, "/r/with space");
    assert.equal(mounts[10]?.root, "net:[4026532177]");
  });

  it("lists the mounts under a dir deepest first, without prefix look-alikes", () => {
    const mounts = parseMountInfo(MOUNTINFO);
    assert.deepEqual(mountsUnder(mounts, "/r/sandboxes/a"), ["/r/sandboxes/a/workspace", "/r/sandboxes/a/rootfs"]);
    assert.deepEqual(mountsUnder(mounts, "/r/sandboxes/ab/workspace"), ["/r/sandboxes/ab/workspace"]);
    assert.deepEqual(mountsUnder(mounts, "/nothing"), []);
  });

  it("gives overlayfs only paths relative to the sandbox dir: layer dirs through short links", () => {
    const dirs = ["/c/layers/sha256/bb/rootfs", "/c/layers/sha256/aa/rootfs"];
    const base = { upper: "/r/s/a/layer/upper", work: "/r/s/a/layer/work", cwd: "/r/s/a", linkDirName: "lower" };
    assert.deepEqual(overlayOptions({ ...base, lowerDirs: dirs }), {
      options: "lowerdir=lower/0:lower/1,upperdir=layer/upper,workdir=layer/work",
      links: [
        { name: "0", target: dirs[0] },
        { name: "1", target: dirs[1] },
      ],
    });
    assert.throws(() => overlayOptions({ ...base, lowerDirs: [] }));
    assert.throws(() => overlayOptions({ ...base, lowerDirs: ["relative/rootfs"] }));
    assert.throws(() => overlayOptions({ ...base, lowerDirs: dirs, upper: "/elsewhere/upper" }));
    assert.throws(() => overlayOptions({ ...base, lowerDirs: dirs, work: "/r/s/a/layer/wo:rk" }));
  });

  it("gives a read-only view only its short relative links (a mount's source stays unnamed)", () => {
    assert.equal(readOnlyViewOptions("l0"), "ro,lowerdir=l0/0:l0/1");
    assert.throws(() => readOnlyViewOptions("../l0"));
    assert.throws(() => readOnlyViewOptions("l0,upperdir=x"));
  });
});

describe("cgroups", () => {
  it("finds v1 hierarchies with their controllers and the unified one", () => {
    const hierarchies = cgroupHierarchies(parseMountInfo(MOUNTINFO), superOptionsByMountPoint(MOUNTINFO));
    assert.deepEqual(hierarchies, [
      { mountPoint: "/sys/fs/cgroup/memory", controllers: ["memory"] },
      { mountPoint: "/sys/fs/cgroup/pids", controllers: ["pids"] },
      { mountPoint: "/sys/fs/cgroup/systemd", controllers: ["name=systemd"] },
      { mountPoint: "/sys/fs/cgroup/unified", controllers: ["unified"] },
    ]);
  });

  it("reads the OOM kill counter of v1 and v2 files", () => {
    assert.equal(parseOomKills("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 3);
    assert.equal(parseOomKills("low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\noom_group_kill 0\n"), 2);
    assert.equal(parseOomKills(""), 0);
  });
});

describe("/proc/<pid>/stat", () => {
  it("finds state and start time past a command name with spaces and parens", () => {
    const fields = Array.from({ length: 50 }, (_, i) => String(i + 3));
    fields[0] = "S";
    fields[19] = "292113";
    assert.deepEqual(parseProcStat(`3752 (my (odd) name) ${fields.join(" ")}`), { state: "S", startTime: 292113 });
    assert.equal(parseProcStat("garbage"), null);
  });
});

describe("runc's log", () => {
  it("finds the first error among JSON lines", () => {
    const log = [
      '{"level":"info","msg":"starting","time":"t"}',
      '{"level":"error","msg":"exec failed: unable to start container process: exec: \\"/nope\\": stat /nope: no such file or directory","time":"t"}',
      '{"level":"error","msg":"second","time":"t"}',
    ].join("\n");
    assert.match(firstRuncError(log) ?? "", /^exec failed: .*\/nope/);
    assert.equal(firstRuncError('{"level":"warning","msg":"w"}\n'), null);
    assert.equal(firstRuncError(""), null);
  });
});

describe("sandbox ids", () => {
  it("accepts what is safe in paths, netns names and cgroup paths", () => {
    for (const id of ["a", "sbx-0123456789abcdef0123456789abcdef01234567", "t-1", "x".repeat(64)]) {
      assert.ok(isSandboxId(id), id);
    }
    for (const id of ["", "-a", "a-", "A", "a/b", "..", "a_b", "x".repeat(65), "a b"]) {
      assert.ok(!isSandboxId(id), id);
      assert.throws(() => assertSandboxId(id));
    }
  });
});
