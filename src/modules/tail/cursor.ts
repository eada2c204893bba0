// The tail's resume point: the (txid, seq) of the last event delivered, written as
// "<txid>-<seq>" in decimal (the SSE `id`). See repo.ts for why this order cannot skip.

export interface TailCursor {
  /** The writing transaction's 64-bit id (xid8), decimal. */
  txid: string;
  /** The row's insertion number within the events table, decimal. */
  seq: string;
}

/** Before every event: a tail without a cursor replays the run from its start. */
export const START: TailCursor = { txid: "0", seq: "0" };

const XID8_MAX = (1n << 64n) - 1n;
const BIGINT_MAX = (1n << 63n) - 1n;

export function formatCursor(cursor: TailCursor): string {
  return `${cursor.txid}-${cursor.seq}`;
}

/** The cursor a client sent, or null when it is not one Warren writes. */
export function parseCursor(text: string): TailCursor | null {
  const match = /^(\d{1,20})-(\d{1,19})$/.exec(text);
  if (!match) return null;
  const txid = BigInt(match[1] as string);
  const seq = BigInt(match[2] as string);
  if (txid > XID8_MAX || seq > BIGINT_MAX) return null;
  return { txid: txid.toString(), seq: seq.toString() };
}
