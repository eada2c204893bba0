// Plain SQL migrations from migrations/, applied in file-name order, each once, each in
// its own transaction; the same files run on PGlite and PostgreSQL.
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { projectFile } from "../lib/paths.js";
import type { Db } from "./db.js";

export const MIGRATIONS_DIR = projectFile("migrations");

// Replicas starting together must not apply the same migration twice.
const MIGRATION_LOCK_KEY = 7_310_420_001;

export async function migrate(db: Db, dir = MIGRATIONS_DIR): Promise<string[]> {
  const files = (await readdir(dir)).filter((name) => /^\d{4}_.+\.sql$/.test(name)).sort();
  const applied: string[] = [];
  await db.tx(async (q) => {
    await q.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK_KEY]);
    await q.query(
      "CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
    );
    const { rows } = await q.query<{ name: string }>("SELECT name FROM schema_migrations");
    const done = new Set(rows.map((row) => row.name));
    for (const file of files) {
      if (done.has(file)) continue;
      const sql = await readFile(path.join(dir, file), "utf8");
      await q.exec(sql);
      await q.query("INSERT INTO schema_migrations (name) VALUES ($1)", [file]);
      applied.push(file);
    }
  });
  return applied;
}
