// What a sandbox prints for the file API is hostile: every malformed or oversized record is an
// error of its own operation (records.ts), never a crash or an unbounded buffer.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { AppError } from "../../lib/errors.js";
import { MAX_PATH_BYTES, MAX_RECORD_LINE, parseStatLine, RecordSplitter } from "./records.js";

const malformed = (error: unknown) => error instanceof AppError && error.code === "failed_precondition";

describe("file records", () => {
  it("parses a stat record and refuses every malformed one", () => {
    const info = parseStatLine("81a4 1309 1796299883 1796299884 0 0 1", "/etc/passwd");
    assert.equal(info.type, "file");
    assert.equal(info.mode, "0644");
    assert.equal(info.name, "passwd");
    assert.equal(info.modified_at, new Date(1796299884 * 1000).toISOString());
    for (const bad of [
      "",
      "81a4 1309 1 1 0 0",
      "81a4 1309 1 1 0 0 1 extra",
      "zz 1 1 1 0 0 1",
      "81a4 -1 1 1 0 0 1",
      "f000 1 1 1 0 0 1",
      "81a4 1 99999999999999999999 1 0 0 1",
      `81a4 ${"9".repeat(MAX_RECORD_LINE)} 1 1 0 0 1`,
    ]) {
      assert.throws(() => parseStatLine(bad, "/x"), malformed, JSON.stringify(bad));
    }
  });

  it("splits listing records across chunks, names with newlines included", () => {
    const splitter = new RecordSplitter();
    const text = Buffer.from("81a4 1 1 1 0 0 1\n./a\nb\0" + "41ed 1 1 1 0 0 2\n./dir\0.\n.\0");
    const out = [...splitter.push(text.subarray(0, 7)), ...splitter.push(text.subarray(7))];
    assert.equal(out.length, 3);
    assert.deepEqual(
      out.map((r) => (r === "end" ? r : r.name.toString())),
      ["a\nb", "dir", "end"],
    );
    assert.equal(splitter.partial, false);
  });

  it("refuses a record line, a name or a path past its bound, and a name with a slash", () => {
    assert.throws(() => new RecordSplitter().push(Buffer.alloc(MAX_RECORD_LINE + 1, 0x61)), malformed);
    assert.throws(
      () =>
        new RecordSplitter().push(
          Buffer.concat([Buffer.from("81a4 1 1 1 0 0 1\n./"), Buffer.alloc(MAX_PATH_BYTES + 8, 0x61)]),
        ),
      malformed,
    );
    assert.throws(() => new RecordSplitter().push(Buffer.from("81a4 1 1 1 0 0 1\n./a/b\0")), malformed);
    assert.throws(() => new RecordSplitter().push(Buffer.from("81a4 1 1 1 0 0 1\nname\0")), malformed);
  });
});
