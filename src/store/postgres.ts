import pg from "pg";
import type { Db, Queryable } from "./db.js";

export async function openPostgres(connectionString: string, maxConnections = 10): Promise<Db> {
  const pool = new pg.Pool({ connectionString, max: maxConnections });
  // An idle connection that breaks (server restart, terminated backend, a close racing a
  // DROP DATABASE) is already discarded by the pool; unhandled, its error would crash the
  // process. The next query opens a fresh connection.
  pool.on("error", () => undefined);
  // Fail at start-up, not at the first request, when the database is unreachable.
  const probe = await pool.connect();
  probe.release();
  return {
    kind: "postgres",
    query: async <T>(sql: string, params?: unknown[]) => {
      const result = await pool.query(sql, params);
      return { rows: result.rows as T[] };
    },
    exec: async (sql: string) => {
      await pool.query(sql);
    },
    tx: async (fn) => {
      const client = await pool.connect();
      const q: Queryable = {
        exec: async (sql: string) => {
          await client.query(sql);
        },
        query: async <T>(sql: string, params?: unknown[]) => {
          const result = await client.query(sql, params);
          return { rows: result.rows as T[] };
        },
      };
      try {
        await client.query("BEGIN");
        const value = await fn(q);
        await client.query("COMMIT");
        return value;
      } catch (error) {
        await client.query("ROLLBACK").catch(() => undefined);
        throw error;
      } finally {
        client.release();
      }
    },
    close: () => pool.end(),
  };
}
