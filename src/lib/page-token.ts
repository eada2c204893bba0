// Keyset page tokens: an opaque, versioned encoding of the sort key of the last row served,
// so pages stay stable while rows are added and no OFFSET scan is needed.
import { AppError } from "./errors.js";

/** The position after which the next page starts: a timestamp then an id, both descending. */
export interface Cursor {
  at: Date;
  id: string;
}

/** A token carrying a list's name and the sort key (as strings) of the last row served. */
export function encodePageToken(kind: string, key: string[]): string {
  return Buffer.from(JSON.stringify([kind, ...key])).toString("base64url");
}

/** The sort key of a token this list issued; null for the first page; 400 for anything else. */
export function decodePageToken(kind: string, token: string | undefined, arity: number): string[] | null {
  if (!token) return null;
  try {
    const value: unknown = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
    if (
      Array.isArray(value) &&
      value.length === arity + 1 &&
      value[0] === kind &&
      value.every((part) => typeof part === "string")
    ) {
      return value.slice(1) as string[];
    }
  } catch {
    // fall through to the error below
  }
  throw new AppError("invalid_argument", "page_token is not a token this list issued");
}

export function encodeCursor(kind: string, cursor: Cursor): string {
  return encodePageToken(kind, [cursor.at.toISOString(), cursor.id]);
}

export function decodeCursor(kind: string, token: string | undefined): Cursor | null {
  const key = decodePageToken(kind, token, 2);
  if (!key) return null;
  const [at, id] = key as [string, string];
  const date = new Date(at);
  if (Number.isNaN(date.getTime()))
    throw new AppError("invalid_argument", "page_token is not a token this list issued");
  return { at: date, id };
}

/** Takes one row more than the page to learn whether another page follows. */
export function pageOf<T>(
  kind: string,
  rows: T[],
  pageSize: number,
  cursorOf: (row: T) => Cursor,
): { items: T[]; nextPageToken: string } {
  if (rows.length <= pageSize) return { items: rows, nextPageToken: "" };
  const items = rows.slice(0, pageSize);
  const last = items[items.length - 1] as T;
  return { items, nextPageToken: encodeCursor(kind, cursorOf(last)) };
}
