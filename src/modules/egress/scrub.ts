// Removes a secret's bytes from a stream the sandbox will read (an upstream that echoes the
// injected header). A match may straddle two chunks, so the last (longest needle - 1) bytes
// of each chunk are held back until the next one or the end. Every match becomes a run of one
// byte no needle contains, of the same length: a Content-Length stays true, and the
// replacement can never complete a new match with the bytes around it.
//
// An echo is not always byte for byte: a JSON API escapes `"`, `\` (and some `/`), a redirect
// percent-encodes, a page HTML-escapes. `secretForms` lists the spellings scrubbed besides
// the value itself (a sandbox could undo any of them).

/** The value and the encodings an echo of it commonly takes, each once, as bytes. */
export function secretForms(value: string): Buffer[] {
  const json = JSON.stringify(value).slice(1, -1);
  const percent = encodeURIComponent(value);
  const lowerHex = percent.replace(/%[0-9A-F]{2}/g, (hex) => hex.toLowerCase());
  const html = value
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#39;");
  const forms = new Set([
    value,
    json,
    json.replaceAll("/", "\\/"),
    json.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`),
    percent,
    lowerHex,
    percent.replaceAll("%20", "+"),
    lowerHex.replaceAll("%20", "+"),
    html,
    html.replaceAll("&#39;", "&#x27;"),
  ]);
  return [...forms].filter((form) => form.length > 0).map((form) => Buffer.from(form, "utf8"));
}

export class Scrubber {
  private tail: Buffer = Buffer.alloc(0);
  private readonly needles: { needle: Buffer; mask: Buffer }[];
  private readonly hold: number;
  /** Matches replaced so far. */
  matches = 0;

  constructor(needles: Buffer | readonly Buffer[]) {
    const list = Buffer.isBuffer(needles) ? [needles] : [...needles];
    if (list.length === 0 || list.some((needle) => needle.length === 0)) {
      throw new Error("an empty needle matches everywhere");
    }
    const byte = [0x2a, 0x23, 0x78, 0x30, 0x5f].find((b) => !list.some((needle) => needle.includes(b))) ?? 0x00;
    // Longest first: a longer spelling is masked whole before a shorter one could match inside it.
    this.needles = list
      .sort((a, b) => b.length - a.length)
      .map((needle) => ({ needle, mask: Buffer.alloc(needle.length, byte) }));
    this.hold = Math.max(...list.map((needle) => needle.length)) - 1;
  }

  /** The scrubbed bytes that can be released now (possibly fewer than given). */
  push(chunk: Buffer): Buffer {
    const buf = this.tail.length ? Buffer.concat([this.tail, chunk]) : Buffer.from(chunk);
    this.replaceIn(buf);
    const keep = Math.min(buf.length, this.hold);
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
    for (const { needle, mask } of this.needles) {
      let at = buf.indexOf(needle);
      while (at !== -1) {
        mask.copy(buf, at);
        this.matches += 1;
        at = buf.indexOf(needle, at + needle.length);
      }
    }
  }
}
