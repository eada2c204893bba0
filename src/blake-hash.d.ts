// @napi-rs/blake-hash is pinned to 1.3.4 (1.3.6 names platform packages that were never
// published, so `npm ci` refused its lock). 1.3.4 hashes any Uint8Array at run time (Node's
// napi_is_buffer accepts one) but its types name only Buffer; these overloads say what it takes.
import "@napi-rs/blake-hash";

declare module "@napi-rs/blake-hash" {
  export function blake3(input: string | Uint8Array): Buffer;
  interface Blake3Hasher {
    update(input: string | Uint8Array): this;
  }
}
