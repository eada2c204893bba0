// Reads of the run tail. The events repo stays the only writer; this module only reads,
// through the (txid, seq) columns and the events_tail index of migration 0013.
//
// Why a cursor cannot skip: a row's event id and time are minted before its transaction
// commits, and its seq when it is inserted, so rows become visible out of key order. Each
// row also records the top-level transaction that wrote it (txid). A read delivers only
// rows whose txid is below its own snapshot's xmin: every transaction below that horizon
// had finished when the snapshot was taken (committed, and therefore visible to it, or
// rolled back), and every transaction still to write gets a larger id. So once a read has
// delivered up to (txid, seq), every row that will ever exist at or below that point was
// already visible to it, and the next read resumes strictly after it. The horizon only
// moves forward, and the statement computes it from the same snapshot it scans with.
import type { Queryable } from "../../store/db.js";
import type { TailCursor } from "./cursor.js";

export interface TailRow {
  txid: string;
  seq: string;
  event_id: string;
  name: string;
  kind: string;
  project_id: string;
  run_id: string;
  lineage_path: string;
  ts_wall_ns: string;
  principal: string;
  payload: Record<string, unknown>;
  schema_name: string | null;
  schema_version: number | null;
  target_event_id: string | null;
}

export interface TailPage {
  /** The deliverable rows after the cursor, in (txid, seq) order. */
  rows: TailRow[];
  /** The run's status, or null when the run no longer exists. */
  status: string | null;
  /** Rows of the run are committed above the horizon: readable once older transactions end. */
  pending: boolean;
  /** The page was cut (by its row or byte bound): more deliverable rows follow it. */
  more: boolean;
  /** Bytes of the page's payloads (as JSON text): what holding the page costs, roughly. */
  bytes: number;
}

// A page is bounded twice: at most `limit` rows are scanned, and of those the first rows
// whose payloads (as JSON text) fit in `maxBytes` together are returned, the first one always (an event
// larger than the budget is read alone). A client that reads slowly so costs the server one
// bounded page at a time, whatever the size of the run's events.
const READ_SQL = `WITH horizon AS MATERIALIZED (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin),
     scanned AS MATERIALIZED (
       SELECT e.txid, e.seq, e.event_id, e.name, e.kind, e.project_id, e.run_id, e.lineage_path, e.ts_wall_ns,
              e.principal, e.payload, e.schema_name, e.schema_version, e.target_event_id,
              octet_length(e.payload::text) AS size
         FROM events e
        WHERE e.org_id = $1 AND e.run_id = $2
          AND e.txid < (SELECT xmin FROM horizon)
          AND (e.txid, e.seq) > ($3::xid8, $4::bigint)
          AND ($5::text = '' OR e.lineage_path = $5 OR left(e.lineage_path, length($5) + 1) = $5 || '.')
        ORDER BY e.txid, e.seq
        LIMIT $6
     ),
     page AS MATERIALIZED (
       SELECT * FROM (
         SELECT s.*, sum(s.size) OVER w AS upto, row_number() OVER w AS n
           FROM scanned s WINDOW w AS (ORDER BY s.txid, s.seq ROWS UNBOUNDED PRECEDING)
       ) sized
        WHERE sized.upto <= $7 OR sized.n = 1
     )
SELECT (SELECT r.status FROM runs r WHERE r.org_id = $1 AND r.id = $2) AS status,
       EXISTS (SELECT 1 FROM events e
                WHERE e.org_id = $1 AND e.run_id = $2 AND e.txid >= (SELECT xmin FROM horizon)) AS pending,
       (SELECT count(*) FROM scanned) = $6 OR (SELECT count(*) FROM page) < (SELECT count(*) FROM scanned) AS more,
       COALESCE((SELECT sum(p.size) FROM page p), 0)::float8 AS bytes,
       COALESCE((SELECT json_agg(json_build_object(
                  'txid', p.txid::text, 'seq', p.seq::text, 'event_id', p.event_id, 'name', p.name, 'kind', p.kind,
                  'project_id', p.project_id, 'run_id', p.run_id, 'lineage_path', p.lineage_path,
                  'ts_wall_ns', p.ts_wall_ns::text, 'principal', p.principal, 'payload', p.payload,
                  'schema_name', p.schema_name, 'schema_version', p.schema_version,
                  'target_event_id', p.target_event_id) ORDER BY p.txid, p.seq)
                   FROM page p), '[]'::json) AS rows`;

/** One consistent read: the next rows after `after` (at most `limit` rows and about `maxBytes`), the run's status and whether rows are pending. */
export async function readTail(
  q: Queryable,
  orgId: string,
  runId: string,
  after: TailCursor,
  lineagePath: string,
  limit: number,
  maxBytes: number,
): Promise<TailPage> {
  const { rows } = await q.query<{
    status: string | null;
    pending: boolean;
    more: boolean;
    bytes: number;
    rows: TailRow[] | string;
  }>(READ_SQL, [orgId, runId, after.txid, after.seq, lineagePath, limit, maxBytes]);
  const row = rows[0];
  if (!row) return { rows: [], status: null, pending: false, more: false, bytes: 0 };
  const page = typeof row.rows === "string" ? (JSON.parse(row.rows) as TailRow[]) : row.rows;
  return { rows: page, status: row.status, pending: row.pending, more: row.more, bytes: Number(row.bytes) };
}
