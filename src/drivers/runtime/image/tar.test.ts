import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ensureDebianPackage } from "../../../../test/support/registry.js";
import { encodeTar, parsePaxRecords, readTar, TarFormatError, type TarHeader } from "./tar.js";

interface ReadEntry {
  header: TarHeader;
  data: Buffer;
}

async function* chunked(bytes: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
}

async function readAll(bytes: Buffer, chunkSize = 4096): Promise<ReadEntry[]> {
  const entries: ReadEntry[] = [];
  for await (const entry of readTar(chunked(bytes, chunkSize))) {
    const chunks: Buffer[] = [];
    for await (const chunk of entry.body()) chunks.push(chunk);
    entries.push({ header: entry.header, data: Buffer.concat(chunks) });
  }
  return entries;
}

const longName = `${"dir-with-a-long-name/".repeat(8)}file-${"x".repeat(40)}`;

describe("tar reader and writer", () => {
  const work = mkdtempSync(path.join(os.tmpdir(), "warren-tar-test-"));
  before(() => ensureDebianPackage("/usr/bin/setfattr", "attr"));
  after(() => rmSync(work, { recursive: true, force: true }));

  it("round-trips every entry type, in any chunking", async () => {
    const binary = Buffer.from([0x01, 0x00, 0x00, 0x02, 0xff, 0xfe, 0x0a, 0x3d]);
    const archive = encodeTar([
      { name: "dir", type: "dir", mode: 0o750, uid: 1, gid: 2, mtime: 1_600_000_000 },
      { name: "dir/file", type: "file", mode: 0o4755, data: "x".repeat(1000), uid: 3_000_000, gid: 7 },
      { name: "dir/empty", type: "file" },
      { name: "dir/link", type: "symlink", linkname: "../elsewhere" },
      { name: "dir/hard", type: "hardlink", linkname: "dir/file" },
      { name: "dev/null", type: "char-device", devmajor: 1, devminor: 3, mode: 0o666 },
      { name: "dev/sda", type: "block-device", devmajor: 8, devminor: 0 },
      { name: "pipe", type: "fifo" },
      { name: longName, type: "file", data: "long" },
      { name: "long-link", type: "symlink", linkname: longName },
      { name: `gnu/${longName}`, type: "symlink", linkname: `gnu/${longName}`, longNames: "gnu" },
      { name: "caps", type: "file", xattrs: { "security.capability": binary, "user.text": "héllo" } },
    ]);
    for (const chunkSize of [1, 7, 512, 100_000]) {
      const entries = await readAll(archive, chunkSize);
      assert.deepEqual(
        entries.map((e) => [e.header.name, e.header.type]),
        [
          ["dir/", "dir"],
          ["dir/file", "file"],
          ["dir/empty", "file"],
          ["dir/link", "symlink"],
          ["dir/hard", "hardlink"],
          ["dev/null", "char-device"],
          ["dev/sda", "block-device"],
          ["pipe", "fifo"],
          [longName, "file"],
          ["long-link", "symlink"],
          [`gnu/${longName}`, "symlink"],
          ["caps", "file"],
        ],
      );
      const [dir, file, , link, hard, devNull, sda, , long, longLink, gnu, caps] = entries as ReadEntry[] & {
        length: 12;
      };
      assert.deepEqual(
        [dir?.header.mode, dir?.header.uid, dir?.header.gid, dir?.header.mtime],
        [0o750, 1, 2, 1_600_000_000],
      );
      assert.equal(file?.data.toString(), "x".repeat(1000));
      assert.equal(file?.header.mode, 0o4755);
      assert.equal(file?.header.uid, 3_000_000);
      assert.equal(link?.header.linkname, "../elsewhere");
      assert.equal(hard?.header.linkname, "dir/file");
      assert.deepEqual([devNull?.header.devmajor, devNull?.header.devminor, devNull?.header.mode], [1, 3, 0o666]);
      assert.deepEqual([sda?.header.devmajor, sda?.header.devminor], [8, 0]);
      assert.equal(long?.data.toString(), "long");
      assert.equal(longLink?.header.linkname, longName);
      assert.equal(gnu?.header.linkname, `gnu/${longName}`);
      assert.deepEqual(caps?.header.xattrs.get("security.capability"), binary);
      assert.equal(caps?.header.xattrs.get("user.text")?.toString(), "héllo");
    }
  });

  it("skips bodies the reader does not consume and reads archives without a footer", async () => {
    const archive = encodeTar(
      [
        { name: "a", type: "file", data: "a".repeat(700) },
        { name: "b", type: "file", data: "b" },
      ],
      { footer: false },
    );
    const names: string[] = [];
    for await (const entry of readTar(chunked(archive, 100))) names.push(entry.header.name);
    assert.deepEqual(names, ["a", "b"]);
  });

  it("reads what GNU tar writes: gnu and posix formats, long names, xattrs, hardlinks", async () => {
    const src = path.join(work, "src");
    mkdirSync(path.join(src, "sub"), { recursive: true });
    writeFileSync(path.join(src, "sub", "file"), "content");
    writeFileSync(path.join(src, longName.replaceAll("/", "_")), "long");
    symlinkSync("sub/file", path.join(src, "link"));
    execFileSync("ln", [path.join(src, "sub", "file"), path.join(src, "hard")]);
    execFileSync("setfattr", ["-n", "user.origin", "-v", "gnu-tar", path.join(src, "sub", "file")]);
    for (const format of ["gnu", "posix"]) {
      const archive = execFileSync(
        "tar",
        [`--format=${format}`, "--xattrs", "--xattrs-include=*", "-C", src, "-cf", "-", "."],
        {
          maxBuffer: 1 << 24,
        },
      );
      const entries = await readAll(archive);
      const byName = new Map(entries.map((e) => [e.header.name.replace(/^\.\//, ""), e]));
      assert.equal(byName.get(longName.replaceAll("/", "_"))?.data.toString(), "long", format);
      assert.equal(byName.get("link")?.header.linkname, "sub/file");
      const file = byName.get("sub/file") ?? byName.get("hard");
      assert.equal(file?.data.toString(), "content");
      const other = file === byName.get("sub/file") ? byName.get("hard") : byName.get("sub/file");
      assert.equal(other?.header.type, "hardlink");
      if (format === "posix") assert.equal(file?.header.xattrs.get("user.origin")?.toString(), "gnu-tar");
    }
  });

  it("applies PAX uid, gid, mtime and size over the ustar fields", async () => {
    const records = Buffer.concat(
      ["uid=4000000000", "gid=5", "mtime=1700000000.5", "GNU.sparse.major=1"].map((record) => {
        const body = ` ${record}\n`;
        let length = body.length + 2;
        if (String(length).length + body.length !== length) length = String(length).length + body.length;
        return Buffer.from(`${length}${body}`);
      }),
    );
    const pax = encodeTar([{ name: "PaxHeader", type: "file", data: records }], { footer: false });
    pax[156] = "x".charCodeAt(0);
    // Recompute the checksum after changing the type flag.
    pax.fill(0x20, 148, 156);
    let sum = 0;
    for (const byte of pax.subarray(0, 512)) sum += byte;
    pax.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8, "latin1");
    const archive = Buffer.concat([pax, encodeTar([{ name: "f", type: "file", data: "z" }])]);
    const [entry] = await readAll(archive);
    assert.equal(entry?.header.uid, 4_000_000_000);
    assert.equal(entry?.header.gid, 5);
    assert.equal(entry?.header.mtime, 1_700_000_000.5);
    assert.equal(entry?.header.otherPax.get("GNU.sparse.major")?.toString(), "1");
  });

  it("parses PAX records byte for byte", () => {
    const value = Buffer.from([0, 10, 61, 255]);
    const body = Buffer.concat([Buffer.from(" SCHILY.xattr.a="), value, Buffer.from("\n")]);
    const record = Buffer.concat([Buffer.from(String(body.length + 2)), body]);
    assert.deepEqual(parsePaxRecords(record).get("SCHILY.xattr.a"), value);
    assert.throws(() => parsePaxRecords(Buffer.from("99 path=x\n")), TarFormatError);
  });

  it("rejects corrupt headers and truncated archives", async () => {
    const archive = encodeTar([{ name: "a", type: "file", data: "abc" }]);
    const corrupt = Buffer.from(archive);
    corrupt[0] = "b".charCodeAt(0);
    await assert.rejects(readAll(corrupt), /checksum/);
    await assert.rejects(readAll(archive.subarray(0, 600)), /unexpected end/);
    await assert.rejects(readAll(Buffer.from("not a tar at all".repeat(40))), /checksum|malformed/);
  });
});
