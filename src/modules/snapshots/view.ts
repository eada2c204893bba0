// The wire view of a snapshot row (contract 2.2).
import type { SnapshotRow } from "./repo.js";
import type { SnapshotJson } from "./schemas.js";

export function snapshotView(row: SnapshotRow): SnapshotJson {
  const view: SnapshotJson = {
    id: row.id,
    created_at: row.created_at.toISOString(),
    durability: row.durability === "replicated" ? "replicated" : "local",
    image: row.image,
    lineage_path: row.lineage_path,
    source_sandbox_id: row.source_sandbox_id,
  };
  if (row.name) view.name = row.name;
  if (row.parent_snapshot_id) view.parent_snapshot_id = row.parent_snapshot_id;
  return view;
}
