import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { ensureDebianPackage } from "../../../../test/support/registry.js";
import { ImageError } from "./errors.js";
import { encodeTar, type TarWriteEntry } from "./tar.js";
import { unpackLayer } from "./unpack.js";

const isRoot = process.getuid?.() === 0;

async function* once(bytes: Buffer): AsyncGenerator<Buffer> {
  for (let i = 0; i < bytes.length; i += 3000) yield bytes.subarray(i, i + 3000);
}

function xattrsOf(file: string): Map<string, string> {
  const out = execFileSync("getfattr", ["-h", "-d", "-m", "-", "-e", "hex", "--absolute-names", file]).toString();
  const map = new Map<string, string>();
  for (const line of out.split("\n")) {
    const match = /^([^#=][^=]*)=0x([0-9a-f]*)$/.exec(line);
    if (match) map.set(match[1] as string, match[2] as string);
  }
  return map;
}

// cap_net_raw+ep as a VFS_CAP_REVISION_2 struct: binary, with NUL and high bytes.
const NET_RAW_CAP = Buffer.from([0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);

describe("unpackLayer", () => {
  const work = mkdtempSync(path.join(os.tmpdir(), "warren-unpack-test-"));
  let counter = 0;
  const freshDir = () => {
    const dir = path.join(work, `t${counter++}`, "rootfs");
    mkdirSync(dir, { recursive: true });
    return dir;
  };

  before(() => ensureDebianPackage("/usr/bin/setfattr", "attr"));
  after(() => rmSync(work, { recursive: true, force: true }));

  it("keeps modes, owners, mtimes, xattrs, links, devices and long names", async () => {
    const longName = `${"deep/".repeat(30)}file`;
    const entries: TarWriteEntry[] = [
      { name: "./", type: "dir", mode: 0o755, mtime: 1_500_000_000 },
      { name: "bin", type: "dir", mode: 0o751, uid: 0, gid: 0, mtime: 1_600_000_000 },
      { name: "bin/tool", type: "file", mode: 0o4755, uid: 0, gid: 0, data: "#!/bin/sh\n", mtime: 1_600_000_001 },
      { name: "bin/ping", type: "file", mode: 0o755, data: "ping", xattrs: { "security.capability": NET_RAW_CAP } },
      { name: "bin/alias", type: "hardlink", linkname: "bin/tool" },
      { name: "bin/sh", type: "symlink", linkname: "/bin/busybox", uid: 1000, gid: 1001, mtime: 1_400_000_000 },
      { name: "home/u", type: "dir", mode: 0o700, uid: 1000, gid: 1000 },
      {
        name: "home/u/secret",
        type: "file",
        mode: 0o640,
        uid: 1000,
        gid: 3_000_000,
        data: "s",
        xattrs: { "user.note": "hi" },
      },
      { name: "home/u/sneaky", type: "file", data: "x", xattrs: { "trusted.overlay.redirect": "/etc" } },
      { name: "dev/null", type: "char-device", devmajor: 1, devminor: 3, mode: 0o666 },
      { name: "dev/loop0", type: "block-device", devmajor: 7, devminor: 0, mode: 0o660, gid: 6 },
      { name: "run/pipe", type: "fifo", mode: 0o620 },
      { name: longName, type: "file", data: "pax" },
      { name: `gnu/${longName}`, type: "file", data: "gnu", longNames: "gnu" },
      { name: "hl-long", type: "hardlink", linkname: longName, longNames: "gnu" },
    ];
    const tar = encodeTar(entries);
    const dir = freshDir();
    const umask = process.umask(0o077);
    const result = await unpackLayer(once(tar), dir).finally(() => process.umask(umask));
    assert.equal(
      lstatSync(path.join(dir, "home")).mode & 0o7777,
      0o755,
      "implicit parents are 0755 whatever the umask",
    );
    assert.equal(result.diffId, `sha256:${createHash("sha256").update(tar).digest("hex")}`);
    assert.equal(result.entries, entries.length);

    const tool = lstatSync(path.join(dir, "bin/tool"));
    assert.equal(tool.mode & 0o7777, 0o4755);
    assert.equal(Math.floor(tool.mtimeMs / 1000), 1_600_000_001);
    assert.equal(lstatSync(path.join(dir, "bin/alias")).ino, tool.ino);
    assert.equal(tool.nlink, 2);
    const bin = lstatSync(path.join(dir, "bin"));
    assert.equal(bin.mode & 0o7777, 0o751);
    assert.equal(Math.floor(bin.mtimeMs / 1000), 1_600_000_000, "directory mtimes are set after their contents");
    assert.equal(Math.floor(lstatSync(dir).mtimeMs / 1000), 1_500_000_000);
    assert.equal(readlinkSync(path.join(dir, "bin/sh")), "/bin/busybox");
    const sh = lstatSync(path.join(dir, "bin/sh"));
    assert.equal(Math.floor(sh.mtimeMs / 1000), 1_400_000_000);
    const secret = lstatSync(path.join(dir, "home/u/secret"));
    assert.equal(secret.mode & 0o7777, 0o640);
    assert.equal(lstatSync(path.join(dir, "home/u")).mode & 0o7777, 0o700);
    if (isRoot) {
      assert.deepEqual([sh.uid, sh.gid], [1000, 1001]);
      assert.deepEqual([secret.uid, secret.gid], [1000, 3_000_000]);
      assert.equal(lstatSync(path.join(dir, "dev/loop0")).gid, 6);
    }
    assert.equal(xattrsOf(path.join(dir, "home/u/secret")).get("user.note"), Buffer.from("hi").toString("hex"));
    assert.equal(xattrsOf(path.join(dir, "bin/ping")).get("security.capability"), NET_RAW_CAP.toString("hex"));
    assert.equal(xattrsOf(path.join(dir, "home/u/sneaky")).size, 0, "overlay xattrs from a layer are dropped");
    assert.ok(result.notes.some((note) => note.includes("trusted.overlay.redirect")));

    const devNull = lstatSync(path.join(dir, "dev/null"));
    if (devNull.isCharacterDevice()) {
      assert.equal(devNull.rdev, (1 << 8) | 3);
      assert.equal(devNull.mode & 0o777, 0o666);
      assert.ok(lstatSync(path.join(dir, "dev/loop0")).isBlockDevice());
    }
    const pipe = lstatSync(path.join(dir, "run/pipe"));
    assert.ok(pipe.isFIFO());
    assert.equal(pipe.mode & 0o777, 0o620);
    assert.equal(readFileSync(path.join(dir, longName), "utf8"), "pax");
    assert.equal(readFileSync(path.join(dir, "gnu", longName), "utf8"), "gnu");
    assert.equal(lstatSync(path.join(dir, "hl-long")).ino, lstatSync(path.join(dir, longName)).ino);
  });

  it("turns whiteouts and opaque markers into their overlayfs form", async () => {
    const base = encodeTar([
      { name: "etc/motd", type: "file", data: "motd" },
      { name: "etc/keep", type: "file", data: "keep" },
      { name: "opt/data/a", type: "file", data: "a" },
      { name: "opt/data/sub/b", type: "file", data: "b" },
      { name: "var/old/x", type: "file", data: "x" },
    ]);
    const changes = encodeTar([
      { name: "etc/.wh.motd", type: "file" },
      { name: "opt/data/.wh..wh..opq", type: "file" },
      { name: "opt/data/c", type: "file", data: "c" },
      { name: "var/.wh.old", type: "file" },
      { name: "var/old/", type: "dir" },
      { name: "var/old/y", type: "file", data: "y" },
      { name: "new/.wh.ghost", type: "file" },
    ]);
    const lower = freshDir();
    const upper = freshDir();
    await unpackLayer(once(gzipSync(base)), lower);
    const result = await unpackLayer(once(gzipSync(changes)), upper);
    assert.equal(result.diffId, `sha256:${createHash("sha256").update(changes).digest("hex")}`);

    const whiteout = lstatSync(path.join(upper, "etc/motd"));
    assert.ok(whiteout.isCharacterDevice());
    assert.equal(whiteout.rdev, 0);
    assert.ok(lstatSync(path.join(upper, "new/ghost")).isCharacterDevice());
    assert.equal(xattrsOf(path.join(upper, "opt/data")).get("trusted.overlay.opaque"), "79");
    assert.equal(
      xattrsOf(path.join(upper, "var/old")).get("trusted.overlay.opaque"),
      "79",
      "a dir replacing a whiteout is opaque",
    );
    assert.equal(existsSync(path.join(upper, "etc/.wh.motd")), false);
    assert.equal(existsSync(path.join(upper, "opt/data/.wh..wh..opq")), false);

    // The real test of the form: what overlayfs shows when both are lower dirs.
    const mountPoint = path.join(work, `mnt${counter++}`);
    mkdirSync(mountPoint);
    const mount = spawnSync("mount", ["-t", "overlay", "overlay", "-o", `lowerdir=${upper}:${lower}`, mountPoint]);
    if (mount.status !== 0) {
      assert.ok(true, `overlay mount unavailable here: ${mount.stderr}`);
      return;
    }
    try {
      assert.deepEqual(readdirSync(path.join(mountPoint, "etc")), ["keep"]);
      assert.deepEqual(readdirSync(path.join(mountPoint, "opt/data")), ["c"]);
      assert.deepEqual(readdirSync(path.join(mountPoint, "var/old")), ["y"]);
      // In a directory no lower layer has, overlayfs lists a whiteout but never resolves it.
      assert.equal(existsSync(path.join(mountPoint, "new/ghost")), false);
    } finally {
      execFileSync("umount", [mountPoint]);
    }
  });

  it("replaces entries the way tar does", async () => {
    const dir = freshDir();
    await unpackLayer(
      once(
        encodeTar([
          { name: "x", type: "file", data: "first" },
          { name: "x", type: "file", data: "second" },
          { name: "d/inner", type: "file", data: "i" },
          { name: "d", type: "file", data: "now a file" },
          { name: "f", type: "file", data: "f" },
          { name: "f/", type: "dir" },
          { name: "f/g", type: "file", data: "g" },
          { name: "s", type: "symlink", linkname: "/etc" },
          { name: "s", type: "file", data: "not a link" },
        ]),
      ),
      dir,
    );
    assert.equal(readFileSync(path.join(dir, "x"), "utf8"), "second");
    assert.equal(readFileSync(path.join(dir, "d"), "utf8"), "now a file");
    assert.equal(readFileSync(path.join(dir, "f/g"), "utf8"), "g");
    assert.equal(readFileSync(path.join(dir, "s"), "utf8"), "not a link");
    assert.ok(lstatSync(path.join(dir, "s")).isFile());
  });

  const hostile: [string, TarWriteEntry[]][] = [
    ["a dot-dot path", [{ name: "../escaped", type: "file", data: "x" }]],
    ["a nested dot-dot path", [{ name: "a/b/../../../escaped", type: "file", data: "x" }]],
    ["an absolute path", [{ name: "/tmp/escaped", type: "file", data: "x" }]],
    [
      "a file written through a symlink to outside",
      [
        { name: "link", type: "symlink", linkname: "OUTSIDE" },
        { name: "link/escaped", type: "file", data: "x" },
      ],
    ],
    [
      "a file written through a relative symlink going up",
      [
        { name: "up", type: "symlink", linkname: "../../.." },
        { name: "up/escaped", type: "file", data: "x" },
      ],
    ],
    [
      "a dir made through a symlink",
      [
        { name: "link", type: "symlink", linkname: "OUTSIDE" },
        { name: "link/sub/", type: "dir" },
      ],
    ],
    [
      "a symlink made through a symlink",
      [
        { name: "link", type: "symlink", linkname: "OUTSIDE" },
        { name: "link/evil", type: "symlink", linkname: "/" },
      ],
    ],
    [
      "a whiteout made through a symlink",
      [
        { name: "link", type: "symlink", linkname: "OUTSIDE" },
        { name: "link/.wh.sentinel", type: "file" },
      ],
    ],
    [
      "an opaque marker through a symlink",
      [
        { name: "link", type: "symlink", linkname: "OUTSIDE" },
        { name: "link/.wh..wh..opq", type: "file" },
      ],
    ],
    ["a hardlink to a file outside", [{ name: "h", type: "hardlink", linkname: "../OUTSIDE_BASENAME/sentinel" }]],
    ["a hardlink to an absolute path", [{ name: "h", type: "hardlink", linkname: "/etc/passwd" }]],
    [
      "a hardlink through a symlink",
      [
        { name: "link", type: "symlink", linkname: "OUTSIDE" },
        { name: "h", type: "hardlink", linkname: "link/sentinel" },
      ],
    ],
    [
      "a dot-dot long name",
      [{ name: `${"a/".repeat(60)}../../../../${"../".repeat(60)}escaped`, type: "file", data: "x" }],
    ],
    ["a dot-dot GNU long name", [{ name: `${"../".repeat(50)}escaped`, type: "file", data: "x", longNames: "gnu" }]],
  ];

  for (const [title, entries] of hostile) {
    it(`rejects ${title}`, async () => {
      const outside = mkdtempSync(path.join(work, "outside-"));
      execFileSync("sh", ["-c", `echo sentinel > ${outside}/sentinel`]);
      const dir = freshDir();
      const resolved = entries.map((entry) => ({
        ...entry,
        ...(entry.linkname
          ? { linkname: entry.linkname.replace("OUTSIDE_BASENAME", path.basename(outside)).replace("OUTSIDE", outside) }
          : {}),
      }));
      await assert.rejects(
        unpackLayer(once(encodeTar(resolved)), dir),
        (error: unknown) => error instanceof ImageError && error.code === "unsafe_layer",
      );
      assert.deepEqual(readdirSync(outside), ["sentinel"], "nothing was written outside the layer");
      assert.equal(readFileSync(path.join(outside, "sentinel"), "utf8"), "sentinel\n");
      assert.equal(existsSync(path.join(path.dirname(dir), "escaped")), false);
      assert.equal(existsSync(path.join(work, "escaped")), false);
      assert.equal(existsSync("/tmp/escaped"), false);
    });
  }

  it("checks the diff ID and refuses what it cannot unpack", async () => {
    const tar = encodeTar([{ name: "a", type: "file", data: "a" }]);
    await assert.rejects(
      unpackLayer(once(gzipSync(tar)), freshDir(), { expectedDiffId: `sha256:${"0".repeat(64)}` }),
      (error: unknown) => error instanceof ImageError && error.code === "digest_mismatch",
    );
    const zstd = Buffer.concat([Buffer.from([0x28, 0xb5, 0x2f, 0xfd]), Buffer.alloc(100)]);
    await assert.rejects(
      unpackLayer(once(zstd), freshDir()),
      (error: unknown) => error instanceof ImageError && error.code === "unsupported",
    );
    await assert.rejects(
      unpackLayer(once(gzipSync(Buffer.from("garbage".repeat(100)))), freshDir()),
      (error: unknown) => error instanceof ImageError && error.code === "unsafe_layer",
    );
    await assert.rejects(
      unpackLayer(once(gzipSync(tar).subarray(0, 20)), freshDir()),
      /unexpected end of file|unexpected end/,
    );
    const busy = freshDir();
    mkdirSync(path.join(busy, "x"));
    await assert.rejects(unpackLayer(once(tar), busy), /not empty/);
  });

  it("unpacks a layer GNU tar wrote, without a footer too", async () => {
    const src = path.join(work, "gnu-src");
    mkdirSync(path.join(src, "a/b"), { recursive: true });
    execFileSync("sh", ["-c", `echo hi > ${src}/a/b/c && ln -s b/c ${src}/a/l && chmod 0600 ${src}/a/b/c`]);
    const tar = execFileSync("tar", ["--format=posix", "--numeric-owner", "-C", src, "-cf", "-", "."]);
    const footerless = tar.subarray(0, tar.length - 1024);
    for (const bytes of [tar, footerless]) {
      const dir = freshDir();
      await unpackLayer(once(bytes), dir);
      assert.equal(readFileSync(path.join(dir, "a/l"), "utf8"), "hi\n");
      assert.equal(lstatSync(path.join(dir, "a/b/c")).mode & 0o777, 0o600);
    }
  });
});
