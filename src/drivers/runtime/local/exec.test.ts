import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { OutputCollector, utf8SafeLength } from "./exec.js";

describe("OutputCollector", () => {
  it("keeps both streams apart while under the cap", () => {
    const output = new OutputCollector(100);
    output.push("stdout", Buffer.from("out1 "));
    output.push("stderr", Buffer.from("err"));
    output.push("stdout", Buffer.from("out2"));
    assert.deepEqual(output.result(), { stdout: "out1 out2", stderr: "err", truncated: false });
  });

  it("caps stdout and stderr together, keeping half for the head and half for the tail", () => {
    const output = new OutputCollector(10);
    output.push("stdout", Buffer.from("123456"));
    output.push("stderr", Buffer.from("abcdef"));
    output.push("stdout", Buffer.from("789"));
    assert.deepEqual(output.result(), { stdout: "12345789", stderr: "ef", truncated: true });
  });

  it("keeps the last line of stderr written after a large stdout", () => {
    const output = new OutputCollector(1000);
    for (let i = 0; i < 100; i++) output.push("stdout", Buffer.alloc(100, "o"));
    output.push("stderr", Buffer.from("Traceback: boom\n"));
    const result = output.result();
    assert.equal(result.stderr, "Traceback: boom\n");
    assert.equal(Buffer.byteLength(result.stdout) + Buffer.byteLength(result.stderr), 1000);
    assert.equal(result.truncated, true);
  });

  it("is not truncated at exactly the cap", () => {
    const output = new OutputCollector(4);
    output.push("stdout", Buffer.from("1234"));
    output.push("stdout", Buffer.alloc(0));
    assert.deepEqual(output.result(), { stdout: "1234", stderr: "", truncated: false });
    output.push("stderr", Buffer.from("x"));
    assert.equal(output.result().truncated, true);
  });

  it("drops a character the cut split in two instead of showing U+FFFD", () => {
    const output = new OutputCollector(5);
    output.push("stdout", Buffer.from("abcé€")); // é is 2 bytes, € 3: the head ends in é, the tail starts inside €
    assert.deepEqual(output.result(), { stdout: "abc", stderr: "", truncated: true });
    const edges = new OutputCollector(8);
    edges.push("stdout", Buffer.from("ab€cd€ef")); // 12 bytes: head "ab€" minus a byte, tail "€ef" minus a byte
    assert.deepEqual(edges.result(), { stdout: "abef", stderr: "", truncated: true });
  });

  it("reports loss with a zero cap", () => {
    const output = new OutputCollector(0);
    output.push("stderr", Buffer.from("x"));
    assert.deepEqual(output.result(), { stdout: "", stderr: "", truncated: true });
  });
});

describe("utf8SafeLength", () => {
  it("backs off an incomplete trailing sequence only", () => {
    const bytes = Buffer.from("a€😀");
    assert.equal(bytes.length, 8);
    assert.equal(utf8SafeLength(bytes), 8);
    assert.equal(utf8SafeLength(bytes, 7), 4);
    assert.equal(utf8SafeLength(bytes, 5), 4);
    assert.equal(utf8SafeLength(bytes, 4), 4);
    assert.equal(utf8SafeLength(bytes, 3), 1);
    assert.equal(utf8SafeLength(bytes, 2), 1);
    assert.equal(utf8SafeLength(bytes, 1), 1);
    assert.equal(utf8SafeLength(Buffer.from([0x80, 0x80]), 2), 2);
  });
});
