// Reader logins (docs/telemetry-sql.md, "Reader logins"). On a PostgreSQL where every role
// may still call set_config (no superuser revoked it, as on a managed service), a query
// running as warren_telemetry_reader on one of Warren's own connections could go back to
// Warren's user with set_config('role', <session user>) and read every table. So there,
// telemetry queries run on connections of their own, which log in as roles holding nothing
// but the reader's grants. Such a session has nothing to go back to.
//
// Each connection logs in as a role of its own (CONNECTION LIMIT 1). In pg_stat_activity a
// backend sees the query text of every backend of its own role, and one organization's query
// must not show another's. This process makes the roles (Warren's user needs CREATEROLE,
// which migration 0012 needs already), with random passwords sent as SCRAM verifiers, so no
// password is in a statement the server may log. It drops them at close. The roles of a
// process that died are dropped by the next one to start, once they are an hour old and
// nothing is connected as them.
import { createHash, createHmac, pbkdf2Sync, randomBytes } from "node:crypto";
import pg from "pg";
import type { Queryable } from "../../store/db.js";
import { guardBackendMessages } from "../../store/pg-message-guard.js";
import { inTransaction } from "../../store/postgres.js";
import type { ReaderSession } from "./repo.js";

const PREFIX = "warren_tq_";
const STALE_SECONDS = 3600;
const SCRAM_ITERATIONS = 4096;
/** Connection errors (SQLSTATE) after which a slot gets a new role (ReaderLogins.connected). */
const RENEW_ROLE_ON = new Set(["28000", "28P01", "53300"]);

/** PostgreSQL's stored form of a SCRAM-SHA-256 password (RFC 5802, RFC 7677). */
export function scramVerifier(password: string, salt: Buffer = randomBytes(16)): string {
  const salted = pbkdf2Sync(password, salt, SCRAM_ITERATIONS, 32, "sha256");
  const clientKey = createHmac("sha256", salted).update("Client Key").digest();
  const storedKey = createHash("sha256").update(clientKey).digest();
  const serverKey = createHmac("sha256", salted).update("Server Key").digest();
  return `SCRAM-SHA-256$${SCRAM_ITERATIONS}:${salt.toString("base64")}$${storedKey.toString("base64")}:${serverKey.toString("base64")}`;
}

const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`;

interface Slot {
  role: string;
  password: string;
  client: pg.Client | null;
}

export class ReaderLogins implements ReaderSession {
  readonly takesRole = false;
  private readonly free: Slot[] = [];
  private readonly all: Slot[] = [];
  private readonly waiters: ((slot: Slot | null) => void)[] = [];
  private closed = false;
  /** warren_tq_<hash of the database name>_: the logins of every server of this database. */
  private prefix = PREFIX;
  /** This process's part of its role names, and how many it made (each name is new). */
  private readonly run = randomBytes(4).toString("hex");
  private made = 0;

  private constructor(
    private readonly db: Queryable,
    private readonly connectionString: string,
  ) {}

  /**
   * Makes `size` login roles and connects one of them, so that a database refusing the
   * logins (pg_hba.conf, no CREATEROLE) is known now. Throws, having dropped what it made.
   */
  static async open(db: Queryable, connectionString: string, size: number): Promise<ReaderLogins> {
    const logins = new ReaderLogins(db, connectionString);
    try {
      await logins.provision(size);
      const first = logins.free[0];
      if (first) await logins.connected(first);
    } catch (error) {
      await logins.close();
      throw error;
    }
    return logins;
  }

  /** The role names this process made (for tests and logs). */
  get roles(): string[] {
    return this.all.map((slot) => slot.role);
  }

  private async provision(size: number): Promise<void> {
    const { rows } = await this.db.query<{ db: string }>("SELECT current_database() AS db");
    const tag = createHash("sha256")
      .update(rows[0]?.db ?? "")
      .digest("hex")
      .slice(0, 8);
    this.prefix = `${PREFIX}${tag}_`;
    await this.dropStale(this.prefix);
    for (let i = 0; i < size; i++) {
      const slot: Slot = { role: "", password: "", client: null };
      await this.makeRole(slot);
      this.all.push(slot);
      this.free.push(slot);
    }
  }

  /**
   * Gives the slot a new role: at start, and again when its role is gone. Another server's
   * sweep drops a role that is an hour old with nothing connected, which a live server's idle
   * slot (never connected yet, or its connection lost) also is; a fresh name carries a fresh time.
   */
  private async makeRole(slot: Slot): Promise<void> {
    const made = Math.floor(Date.now() / 1000).toString(36);
    slot.role = `${this.prefix}${made}_${this.run}_${this.made++}`;
    slot.password = randomBytes(24).toString("hex");
    await this.db.query(
      `CREATE ROLE ${quoted(slot.role)} LOGIN INHERIT NOCREATEDB NOCREATEROLE CONNECTION LIMIT 1
         PASSWORD '${scramVerifier(slot.password)}' IN ROLE warren_telemetry_reader`,
    );
  }

  /** Drops the roles of processes that died: an hour old or more, with nothing connected. */
  private async dropStale(prefix: string): Promise<void> {
    const { rows } = await this.db.query<{ name: string }>(
      `SELECT r.rolname AS name FROM pg_roles r
        WHERE starts_with(r.rolname, $1)
          AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.usename = r.rolname)`,
      [prefix],
    );
    const now = Date.now() / 1000;
    for (const { name } of rows) {
      const made = Number.parseInt(name.slice(prefix.length).split("_")[0] ?? "", 36);
      if (!(now - made >= STALE_SECONDS)) continue;
      await this.db.query(`DROP ROLE IF EXISTS ${quoted(name)}`).catch(() => undefined);
    }
  }

  private async connected(slot: Slot): Promise<pg.Client> {
    if (slot.client) return slot.client;
    try {
      return await this.connect(slot);
    } catch (error) {
      // The role is gone (28000: dropped by another server's sweep), no longer takes this
      // password (28P01), or has its one connection taken (53300: the backend of a connection
      // this side lost lives on until the server notices): the slot gets a new role and
      // connects once more.
      const code = (error as { code?: unknown }).code;
      if (this.closed || !RENEW_ROLE_ON.has(String(code))) throw error;
      const old = slot.role;
      await this.db.query(`DROP ROLE IF EXISTS ${quoted(old)}`).catch(() => undefined);
      await this.makeRole(slot);
      // close() may have run meanwhile and dropped the roles it knew of.
      if (this.closed) {
        await this.db.query(`DROP ROLE IF EXISTS ${quoted(slot.role)}`).catch(() => undefined);
        throw new Error("reader logins closed");
      }
      return await this.connect(slot);
    }
  }

  private async connect(slot: Slot): Promise<pg.Client> {
    const url = new URL(this.connectionString);
    url.username = slot.role;
    url.password = slot.password;
    const client = new pg.Client({ connectionString: url.toString(), application_name: "warren-telemetry-reader" });
    // A broken connection is dropped; the slot connects again on its next use.
    const lost = () => {
      if (slot.client === client) slot.client = null;
      void client.end().catch(() => undefined);
    };
    client.on("error", lost);
    client.on("end", lost);
    await client.connect();
    guardBackendMessages(client);
    if (this.closed) {
      await client.end().catch(() => undefined);
      throw new Error("reader logins closed");
    }
    slot.client = client;
    return client;
  }

  private acquire(): Promise<Slot> {
    if (this.closed) return Promise.reject(new Error("reader logins closed"));
    const slot = this.free.pop();
    if (slot) return Promise.resolve(slot);
    return new Promise((resolve, reject) =>
      this.waiters.push((next) => (next ? resolve(next) : reject(new Error("reader logins closed")))),
    );
  }

  private release(slot: Slot): void {
    const next = this.waiters.shift();
    if (next) next(slot);
    else this.free.push(slot);
  }

  async tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    const slot = await this.acquire();
    try {
      return await inTransaction(await this.connected(slot), fn, false);
    } finally {
      this.release(slot);
    }
  }

  /** Ends the connections and drops the roles. */
  async close(): Promise<void> {
    this.closed = true;
    for (const waiter of this.waiters.splice(0)) waiter(null);
    for (const slot of this.all) {
      const client = slot.client;
      slot.client = null;
      await client?.end().catch(() => undefined);
    }
    for (const slot of this.all.splice(0)) {
      await this.db.query(`DROP ROLE IF EXISTS ${quoted(slot.role)}`).catch(() => undefined);
    }
  }
}
