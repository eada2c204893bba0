import type { Queryable } from "../../store/db.js";

export interface PromotedField {
  field: string;
  identity: boolean;
  bloom: boolean;
  slot: string;
}

export interface SchemaRow {
  id: string;
  org_id: string;
  name: string;
  version: number;
  description: string;
  json_schema: string;
  promoted_fields: PromotedField[];
  created_by: string;
  created_at: Date;
  archived_at: Date | null;
}

const C = "id, org_id, name, version, description, json_schema, promoted_fields, created_by, created_at, archived_at";

export async function latestVersion(q: Queryable, orgId: string, name: string): Promise<SchemaRow | null> {
  const { rows } = await q.query<SchemaRow>(
    `SELECT ${C} FROM annotation_schemas WHERE org_id = $1 AND name = $2 ORDER BY version DESC LIMIT 1`,
    [orgId, name],
  );
  return rows[0] ?? null;
}

export async function latestLive(q: Queryable, orgId: string, name: string): Promise<SchemaRow | null> {
  const { rows } = await q.query<SchemaRow>(
    `SELECT ${C} FROM annotation_schemas WHERE org_id = $1 AND name = $2 AND archived_at IS NULL
      ORDER BY version DESC LIMIT 1`,
    [orgId, name],
  );
  return rows[0] ?? null;
}

export async function byVersion(q: Queryable, orgId: string, name: string, version: number): Promise<SchemaRow | null> {
  const { rows } = await q.query<SchemaRow>(
    `SELECT ${C} FROM annotation_schemas WHERE org_id = $1 AND name = $2 AND version = $3`,
    [orgId, name, version],
  );
  return rows[0] ?? null;
}

export async function insertSchema(q: Queryable, s: SchemaRow): Promise<void> {
  await q.query(`INSERT INTO annotation_schemas (${C}) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, NULL)`, [
    s.id,
    s.org_id,
    s.name,
    s.version,
    s.description,
    s.json_schema,
    JSON.stringify(s.promoted_fields),
    s.created_by,
    s.created_at,
  ]);
}

export async function archive(q: Queryable, id: string, at: Date): Promise<SchemaRow> {
  const { rows } = await q.query<SchemaRow>(
    `UPDATE annotation_schemas SET archived_at = COALESCE(archived_at, $2) WHERE id = $1 RETURNING ${C}`,
    [id, at],
  );
  return rows[0] as SchemaRow;
}

export async function listLatestLive(q: Queryable, orgId: string): Promise<SchemaRow[]> {
  const { rows } = await q.query<SchemaRow>(
    `SELECT DISTINCT ON (name) ${C} FROM annotation_schemas WHERE org_id = $1 AND archived_at IS NULL
      ORDER BY name, version DESC`,
    [orgId],
  );
  return rows;
}

export async function listAll(q: Queryable, orgId: string): Promise<SchemaRow[]> {
  const { rows } = await q.query<SchemaRow>(
    `SELECT ${C} FROM annotation_schemas WHERE org_id = $1 ORDER BY created_at DESC, version DESC`,
    [orgId],
  );
  return rows;
}

export async function slotsOf(q: Queryable, orgId: string, name: string): Promise<Map<string, number>> {
  const { rows } = await q.query<{ field: string; slot: number }>(
    "SELECT field, slot FROM annotation_slots WHERE org_id = $1 AND schema_name = $2",
    [orgId, name],
  );
  return new Map(rows.map((row) => [row.field, row.slot]));
}

export async function insertSlot(
  q: Queryable,
  orgId: string,
  name: string,
  field: string,
  slot: number,
): Promise<void> {
  await q.query("INSERT INTO annotation_slots (org_id, schema_name, field, slot) VALUES ($1, $2, $3, $4)", [
    orgId,
    name,
    field,
    slot,
  ]);
}

/** Serializes registrations of one schema name until the transaction ends. */
export async function lockSchemaName(q: Queryable, orgId: string, name: string): Promise<void> {
  await q.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`annotation-schema:${orgId}:${name}`]);
}
