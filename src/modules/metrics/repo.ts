// The one query of the metrics module: sandboxes per stored state, across organizations.
import type { Queryable } from "../../store/db.js";

export async function countSandboxesByState(q: Queryable): Promise<Record<string, number>> {
  const { rows } = await q.query<{ state: string; n: string | number }>(
    "SELECT state, count(*) AS n FROM sandboxes GROUP BY state",
  );
  return Object.fromEntries(rows.map((row) => [row.state, Number(row.n)]));
}
