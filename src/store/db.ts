// The store: one SQL dialect (Postgres) behind a small interface, implemented by the
// embedded PGlite and by a PostgreSQL pool. 64-bit integers come back as decimal strings
// and timestamps as Dates on both.
export interface Queryable {
  query<T = Record<string, unknown>>(
    sql: string,
    params?: unknown[],
    options?: StatementOptions,
  ): Promise<{ rows: T[] }>;
  /** Runs a script of several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
  /**
   * Runs one statement (always the extended protocol, so never several) and returns its
   * columns with their type oids and each row's values as PostgreSQL's text, unparsed, in
   * column order (telemetry SQL: columns may repeat a name and every type is reported).
   */
  queryRaw(sql: string, params?: unknown[], options?: StatementOptions): Promise<RawResult>;
}

export interface StatementOptions {
  /**
   * The embedded store stops the statement after this many milliseconds and fails it with
   * SQLSTATE 57014, as PostgreSQL's statement_timeout does; the instance it ran on is then
   * dropped and the data directory reopened before the next statement (pglite.ts). PostgreSQL
   * ignores it: there the caller sets statement_timeout, which a server enforces itself
   * (telemetry/repo.ts runAsReader does both).
   */
  timeoutMs?: number;
}

export interface RawResult {
  fields: { name: string; typeId: number }[];
  rows: (string | null)[][];
}

export interface Db extends Queryable {
  readonly kind: "pglite" | "postgres";
  /** Runs fn in one transaction; commits when it resolves, rolls back when it throws. */
  tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T>;
  close(): Promise<void>;
  /**
   * Subscribes to NOTIFY on `channel` (delivered when the notifying transaction commits).
   * `onGap` runs when notifications may have been missed (a lost connection), and again
   * once they flow: whoever relies on them should re-read then. Resolves to the unsubscribe.
   */
  listen?(channel: string, handlers: NotificationHandlers): Promise<() => Promise<void>>;
}

export interface NotificationHandlers {
  onPayload(payload: string): void;
  /** Notifications may have been missed: down is true while they are not flowing. */
  onGap?(down: boolean): void;
}
