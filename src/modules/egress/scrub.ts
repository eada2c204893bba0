// Removes a secret's bytes from a stream the sandbox will read (an upstream that echoes the
// injected header). A match may straddle two chunks, so the last (needle - 1) bytes of each
// chunk are held back until the next one or the end. Every match becomes a run of one byte
// the needle does not contain, of the same length: a Content-Length stays true, and the
// replacement can never complete a new match with the bytes around it.

export class Scrubber {
  private tail: Buffer = Buffer.alloc(0);
  private readonly mask: Buffer;
  /** Matches replaced so far. */
  matches = 0;

  constructor(private readonly needle: Buffer) {
    if (needle.length === 0) throw new Error("an empty needle matches everywhere");
    const byte = [0x2a, 0x23, 0x78, 0x30, 0x5f].find((b) => !needle.includes(b)) ?? 0x00;
    this.mask = Buffer.alloc(needle.length, byte);
  }

  /** The scrubbed bytes that can be released now (possibly fewer than given). */
  push(chunk: Buffer): Buffer {
    const buf = this.tail.length ? Buffer.concat([this.tail, chunk]) : Buffer.from(chunk);
    this.replaceIn(buf);
    const keep = Math.min(buf.length, this.needle.length - 1);
    this.tail = Buffer.from(buf.subarray(buf.length - keep));
    return buf.subarray(0, buf.length - keep);
  }

  /** The bytes still held back (at the end of the stream). */
  flush(): Buffer {
    const rest = this.tail;
    this.tail = Buffer.alloc(0);
    return rest;
  }

  /** Scrubs a complete buffer in place (a response head). */
  scrubWhole(buf: Buffer): Buffer {
    this.replaceIn(buf);
    return buf;
  }

  private replaceIn(buf: Buffer): void {
    let at = buf.indexOf(this.needle);
    while (at !== -1) {
      this.mask.copy(buf, at);
      this.matches += 1;
      at = buf.indexOf(this.needle, at + this.needle.length);
    }
  }
}
