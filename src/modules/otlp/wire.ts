// The protocol buffers wire format, as much of it as OTLP needs: a reader that checks every
// length against what is left (a hostile body fails with MalformedBody, never reads past its
// end, never recurses on its own) and a writer for the small messages Warren answers with.
// https://protobuf.dev/programming-guides/encoding/

export class MalformedBody extends Error {}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

export const WIRE_VARINT = 0;
export const WIRE_I64 = 1;
export const WIRE_LEN = 2;
export const WIRE_I32 = 5;

export class WireReader {
  private at: number;
  private readonly view: DataView;

  constructor(
    private readonly bytes: Uint8Array,
    start = 0,
    private readonly end = bytes.length,
  ) {
    this.at = start;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get done(): boolean {
    return this.at >= this.end;
  }

  /** The next field's number and wire type. */
  tag(): { field: number; wire: number } {
    const byte = this.bytes[this.at];
    // One-byte tags (fields 1 to 15) are nearly all of them.
    let tag: number;
    if (byte !== undefined && byte < 0x80 && this.at < this.end) {
      tag = byte;
      this.at++;
    } else tag = this.wideTag();
    const field = Math.floor(tag / 8);
    if (field === 0 || field > 536_870_911) throw new MalformedBody("a field number is out of range");
    return { field, wire: tag % 8 };
  }

  private wideTag(): number {
    const tag = this.varint();
    if (tag > 0xffff_ffffn) throw new MalformedBody("a field number is out of range");
    return Number(tag);
  }

  /**
   * A varint's low 32 bits as a number (lengths, tags, enums, counts): the common one- to
   * four-byte case without a bigint; longer ones go through varint().
   */
  uint32(): number {
    let result = 0;
    for (let i = 0; i < 4; i++) {
      if (this.at >= this.end) throw new MalformedBody("a varint runs past the end of its message");
      const byte = this.bytes[this.at++] as number;
      result += (byte & 0x7f) * 2 ** (7 * i);
      if ((byte & 0x80) === 0) return result;
    }
    this.at -= 4;
    return Number(this.varint() & 0xffff_ffffn);
  }

  /** An unsigned varint of at most ten bytes, as a bigint. */
  varint(): bigint {
    let result = 0n;
    for (let i = 0; i < 10; i++) {
      if (this.at >= this.end) throw new MalformedBody("a varint runs past the end of its message");
      const byte = this.bytes[this.at++] as number;
      result |= BigInt(byte & 0x7f) << BigInt(7 * i);
      if ((byte & 0x80) === 0) return result & 0xffff_ffff_ffff_ffffn;
    }
    throw new MalformedBody("a varint is longer than ten bytes");
  }

  int64(): bigint {
    return BigInt.asIntN(64, this.varint());
  }

  fixed64(): bigint {
    this.need(8);
    const value = this.view.getBigUint64(this.at, true);
    this.at += 8;
    return value;
  }

  fixed32(): number {
    this.need(4);
    const value = this.view.getUint32(this.at, true);
    this.at += 4;
    return value;
  }

  double(): number {
    this.need(8);
    const value = this.view.getFloat64(this.at, true);
    this.at += 8;
    return value;
  }

  /** A length-delimited field's bounds, checked against the enclosing message. */
  span(): { start: number; end: number } {
    const start0 = this.at;
    const length = this.uint32();
    // A length of five or more varint bytes is at least 2^28: larger than any bounded body.
    if (this.at - start0 > 4 || length > this.end - this.at) {
      throw new MalformedBody("a length runs past the end of its message");
    }
    const start = this.at;
    this.at += length;
    return { start, end: this.at };
  }

  /** A nested message's reader. */
  message(): WireReader {
    const { start, end } = this.span();
    return new WireReader(this.bytes, start, end);
  }

  bytesField(): Uint8Array {
    const { start, end } = this.span();
    return this.bytes.subarray(start, end);
  }

  string(): string {
    try {
      return UTF8.decode(this.bytesField());
    } catch {
      throw new MalformedBody("a string field is not valid UTF-8");
    }
  }

  bool(): boolean {
    return this.varint() !== 0n;
  }

  /** Skips a field of a type or number this decoder does not read. */
  skip(wire: number): void {
    if (wire === WIRE_VARINT) this.varint();
    else if (wire === WIRE_I64) this.advance(8);
    else if (wire === WIRE_LEN) this.span();
    else if (wire === WIRE_I32) this.advance(4);
    else throw new MalformedBody(`wire type ${wire} is not supported (groups are not used by OTLP)`);
  }

  /** Checks that a field has the wire type its schema gives it. */
  expect(wire: number, wanted: number, what: string): void {
    if (wire !== wanted) throw new MalformedBody(`${what} has wire type ${wire}, not ${wanted}`);
  }

  private advance(bytes: number): void {
    this.need(bytes);
    this.at += bytes;
  }

  private need(bytes: number): void {
    if (this.end - this.at < bytes) throw new MalformedBody("a fixed-width field runs past the end of its message");
  }
}

/** A small protobuf writer: fields appended in order, nested messages as finished writers. */
export class WireWriter {
  private readonly chunks: Uint8Array[] = [];
  private length = 0;

  private push(bytes: Uint8Array): void {
    this.chunks.push(bytes);
    this.length += bytes.length;
  }

  private varintBytes(value: bigint): void {
    const out: number[] = [];
    let v = BigInt.asUintN(64, value);
    do {
      let byte = Number(v & 0x7fn);
      v >>= 7n;
      if (v !== 0n) byte |= 0x80;
      out.push(byte);
    } while (v !== 0n);
    this.push(Uint8Array.from(out));
  }

  private tag(field: number, wire: number): void {
    this.varintBytes(BigInt((field << 3) | wire));
  }

  varint(field: number, value: bigint | number): this {
    this.tag(field, WIRE_VARINT);
    this.varintBytes(BigInt(value));
    return this;
  }

  bytes(field: number, value: Uint8Array): this {
    this.tag(field, WIRE_LEN);
    this.varintBytes(BigInt(value.length));
    this.push(value);
    return this;
  }

  string(field: number, value: string): this {
    return this.bytes(field, new TextEncoder().encode(value));
  }

  message(field: number, inner: WireWriter): this {
    return this.bytes(field, inner.finish());
  }

  finish(): Uint8Array {
    const out = new Uint8Array(this.length);
    let at = 0;
    for (const chunk of this.chunks) {
      out.set(chunk, at);
      at += chunk.length;
    }
    return out;
  }
}
