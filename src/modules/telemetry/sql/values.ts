// Result values as JSON, from PostgreSQL's text by type oid, the same on both stores:
// 16/32-bit integers and floats as numbers, 64-bit integers and numerics as decimal
// strings (contract 2), booleans, json/jsonb as JSON, timestamps as RFC 3339 (the reader
// session runs in UTC), everything else as PostgreSQL's text. Caps rows and bytes.
import type { RawResult } from "../../../store/db.js";

const BOOL = 16;
const NUMBERS = new Set([21, 23, 26, 700, 701]);
const JSON_TYPES = new Set([114, 3802]);
const TIMESTAMPTZ = 1184;
const TIMESTAMP = 1114;

export function decodeValue(text: string | null, typeId: number): unknown {
  if (text === null) return null;
  if (typeId === BOOL) return text === "t";
  if (NUMBERS.has(typeId)) {
    const n = Number(text);
    return Number.isFinite(n) ? n : text;
  }
  if (JSON_TYPES.has(typeId)) return JSON.parse(text) as unknown;
  if (typeId === TIMESTAMPTZ) {
    const m = /^(\d{4,}-\d\d-\d\d) (\d\d:\d\d:\d\d(?:\.\d+)?)\+00$/.exec(text);
    return m ? `${m[1]}T${m[2]}Z` : text;
  }
  if (typeId === TIMESTAMP) return text.replace(" ", "T");
  return text;
}

export interface EncodedRows {
  rows: unknown[][];
  truncated: "row_limit" | "byte_limit" | null;
}

/** At most maxRows rows whose JSON stays within maxBytes; says which cap cut the result. */
export function encodeRows(raw: RawResult, maxRows: number, maxBytes: number): EncodedRows {
  const rows: unknown[][] = [];
  let bytes = 0;
  for (const values of raw.rows) {
    if (rows.length >= maxRows) return { rows, truncated: "row_limit" };
    const row = values.map((text, i) => decodeValue(text, raw.fields[i]?.typeId ?? 25));
    bytes += Buffer.byteLength(JSON.stringify(row)) + 1;
    if (bytes > maxBytes) return { rows, truncated: "byte_limit" };
    rows.push(row);
  }
  return { rows, truncated: null };
}
