// Blob keys as both drivers accept them: `/`-separated segments of [A-Za-z0-9._:-], none
// empty, `.` or `..`, bounded so a key fits a file name and an S3 key with a prefix.
import { BlobError } from "./interface.js";

const SEGMENT = /^[A-Za-z0-9._:-]+$/;
/** Longest segment (a file name is at most 255 bytes; the fs driver adds a suffix). */
export const MAX_SEGMENT_LENGTH = 200;
/** Longest key (S3 allows 1024 bytes, which leaves room for a deployment's prefix). */
export const MAX_KEY_LENGTH = 512;

/** Why `key` is not a valid blob key, or null when it is. */
export function keyProblem(key: string): string | null {
  if (typeof key !== "string" || key.length === 0) return "a key must not be empty";
  if (key.length > MAX_KEY_LENGTH) return `a key must be at most ${MAX_KEY_LENGTH} characters`;
  for (const segment of key.split("/")) {
    if (segment.length === 0) return "a key must not have empty segments (leading, trailing or doubled /)";
    if (segment === "." || segment === "..") return "a key must not have . or .. segments";
    if (segment.length > MAX_SEGMENT_LENGTH) return `a key segment must be at most ${MAX_SEGMENT_LENGTH} characters`;
    if (!SEGMENT.test(segment)) return "a key segment may hold only A-Z a-z 0-9 . _ : -";
  }
  return null;
}

export function checkKey(key: string): void {
  const problem = keyProblem(key);
  // The key itself is Warren's, but a malformed one may hold anything: it is not echoed.
  if (problem) throw new BlobError("invalid_key", `invalid blob key: ${problem}`);
}
