// Bytes in both runtimes: Node's Buffer where there is one (a Buffer is a Uint8Array), the
// Web platform's TextEncoder, btoa and atob in a browser (the browser entry's bundle names no
// Node global; test/sdk-package.test.ts checks it).
type NodeBufferClass = {
  from(data: string | Uint8Array, encoding?: string): Uint8Array & { toString(encoding?: string): string };
};
const nodeBuffer = (): NodeBufferClass | undefined => (globalThis as { Buffer?: NodeBufferClass }).Buffer;

/** A string's UTF-8 bytes, or a copy of `data`. */
export function bytesOf(data: string | Uint8Array): Uint8Array {
  const NodeBuffer = nodeBuffer();
  if (NodeBuffer) return NodeBuffer.from(data);
  return typeof data === "string" ? new TextEncoder().encode(data) : new Uint8Array(data);
}

export function toBase64(bytes: Uint8Array): string {
  const NodeBuffer = nodeBuffer();
  if (NodeBuffer) return NodeBuffer.from(bytes).toString("base64");
  let binary = "";
  for (let at = 0; at < bytes.length; at += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(at, at + 0x8000));
  }
  return btoa(binary);
}

/** The bytes of base64 text (a Buffer in Node). */
export function fromBase64(text: string): Uint8Array {
  const NodeBuffer = nodeBuffer();
  if (NodeBuffer) return NodeBuffer.from(text, "base64");
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let at = 0; at < binary.length; at++) out[at] = binary.charCodeAt(at);
  return out;
}
