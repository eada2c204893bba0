// Node-only modules of the SDK's volume push (node:fs, node:http, blake-hash, ...): the console
// never pushes a directory, so each name is a function that says so if it is ever called.
function unsupported(): never {
  throw new Error("not available in the browser console");
}
export const statSync = unsupported;
export const mkdir = unsupported;
export const open = unsupported;
export const readdir = unsupported;
export const readFile = unsupported;
export const rename = unsupported;
export const writeFile = unsupported;
export const pipeline = unsupported;
export const blake3 = unsupported;
export class Blake3Hasher {
  constructor() {
    unsupported();
  }
}
const stub = { request: unsupported, Agent: class {} };
export default stub;
