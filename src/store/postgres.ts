import pg from "pg";
import type { Db, NotificationHandlers, Queryable, RawResult } from "./db.js";
import { guardBackendMessages } from "./pg-message-guard.js";

/** SQL texts given a statement name; past this many, further texts run unnamed. */
const MAX_NAMED = 1000;
const names = new Map<string, string>();

/**
 * A parameterised statement as a named one, so each connection parses and plans it once
 * (PostgreSQL's plan cache then decides between custom and generic plans) instead of on
 * every execution; the hot statements (an annotate's write with its CTEs) spent more time
 * in parse and plan than in execution. Statements without parameters keep the simple
 * protocol, which also allows several statements in one text.
 */
function statement(sql: string, params: unknown[] | undefined): pg.QueryConfig {
  if (!params || params.length === 0) return { text: sql, values: params };
  let name = names.get(sql);
  if (name === undefined) {
    if (names.size >= MAX_NAMED) return { text: sql, values: params };
    name = `warren_${names.size}`;
    names.set(sql, name);
  }
  return { name, text: sql, values: params };
}

/** Every value as PostgreSQL's text: no type parser runs. */
const RAW_TYPES = { getTypeParser: () => (value: string) => value };

/** One statement through the extended protocol, every value as text (Queryable.queryRaw). */
async function queryRaw(
  client: pg.Pool | pg.PoolClient | pg.Client,
  sql: string,
  params: unknown[] | undefined,
): Promise<RawResult> {
  const result = await client.query<unknown[]>({
    text: sql,
    values: params ?? [],
    rowMode: "array",
    types: RAW_TYPES,
    queryMode: "extended",
  } as pg.QueryArrayConfig);
  return {
    fields: result.fields.map((field) => ({ name: field.name, typeId: field.dataTypeID })),
    rows: result.rows as (string | null)[][],
  };
}

/**
 * Runs fn in one transaction on one connection: commits when it resolves, rolls back when it
 * throws. `prepared`: parameterised statements become named ones (statement()); a reader
 * login's session keeps none.
 */
export async function inTransaction<T>(
  client: pg.PoolClient | pg.Client,
  fn: (q: Queryable) => Promise<T>,
  prepared = true,
): Promise<T> {
  const q: Queryable = {
    exec: async (sql: string) => {
      await client.query(sql);
    },
    queryRaw: (sql, params) => queryRaw(client, sql, params),
    query: async <R>(sql: string, params?: unknown[]) => {
      const result = await client.query(prepared ? statement(sql, params) : { text: sql, values: params });
      return { rows: result.rows as R[] };
    },
  };
  await client.query("BEGIN");
  try {
    const value = await fn(q);
    await client.query("COMMIT");
    return value;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  }
}

export async function openPostgres(connectionString: string, maxConnections = 10): Promise<Db> {
  const pool = new pg.Pool({ connectionString, max: maxConnections });
  // An idle connection that breaks (server restart, terminated backend, a close racing a
  // DROP DATABASE) is already discarded by the pool; unhandled, its error would crash the
  // process. The next query opens a fresh connection.
  pool.on("error", () => undefined);
  // No backend message larger than the bound reaches the pg parser (pg-message-guard.ts).
  pool.on("connect", (client) => guardBackendMessages(client));
  // Fail at start-up, not at the first request, when the database is unreachable.
  const probe = await pool.connect();
  probe.release();
  return {
    kind: "postgres",
    query: async <T>(sql: string, params?: unknown[]) => {
      const result = await pool.query(statement(sql, params));
      return { rows: result.rows as T[] };
    },
    exec: async (sql: string) => {
      await pool.query(sql);
    },
    queryRaw: (sql, params) => queryRaw(pool, sql, params),
    tx: async (fn) => {
      const client = await pool.connect();
      // pg-pool takes its error listener off a checked-out client: a connection lost inside the
      // transaction (a restart, a failover, a terminated backend) emitted 'error' with no listener
      // and ended the process. The statement in flight fails anyway; the client is discarded.
      let broken: Error | undefined;
      const onError = (error: Error) => {
        broken = error;
      };
      client.on("error", onError);
      try {
        return await inTransaction(client, fn);
      } finally {
        client.removeListener("error", onError);
        client.release(broken);
      }
    },
    listen: (channel, handlers) => listenOn(connectionString, channel, handlers),
    close: () => pool.end(),
  };
}

const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5000;

/**
 * LISTEN on a connection of its own (a pooled one would be handed to other queries). When
 * it breaks, the handlers hear of the gap and it reconnects with backoff until unsubscribed.
 */
async function listenOn(
  connectionString: string,
  channel: string,
  handlers: NotificationHandlers,
): Promise<() => Promise<void>> {
  const quoted = `"${channel.replaceAll('"', '""')}"`;
  let closed = false;
  let client: pg.Client | null = null;
  let retry: NodeJS.Timeout | null = null;
  let delayMs = RECONNECT_MIN_MS;

  const connect = async (): Promise<void> => {
    const next = new pg.Client({ connectionString });
    next.on("notification", (message) => {
      if (message.channel === channel) handlers.onPayload(message.payload ?? "");
    });
    next.on("error", () => lost(next));
    next.on("end", () => lost(next));
    try {
      await next.connect();
      guardBackendMessages(next);
      await next.query(`LISTEN ${quoted}`);
    } catch (error) {
      await next.end().catch(() => undefined);
      throw error;
    }
    if (closed) {
      await next.end().catch(() => undefined);
      return;
    }
    client = next;
    delayMs = RECONNECT_MIN_MS;
  };

  const lost = (which: pg.Client) => {
    if (client !== which || closed) return;
    client = null;
    void which.end().catch(() => undefined);
    handlers.onGap?.(true);
    schedule();
  };

  const schedule = () => {
    retry = setTimeout(() => {
      retry = null;
      connect().then(
        () => {
          if (!closed) handlers.onGap?.(false);
        },
        () => {
          delayMs = Math.min(delayMs * 2, RECONNECT_MAX_MS);
          if (!closed) schedule();
        },
      );
    }, delayMs);
    retry.unref();
  };

  await connect();
  return async () => {
    closed = true;
    if (retry) clearTimeout(retry);
    const current = client;
    client = null;
    await current?.end().catch(() => undefined);
  };
}
