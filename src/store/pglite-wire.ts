// A faster path for parameterised queries on PGlite, with the same results as PGlite's own
// query(): same parameter serializers, same row parsers, same DatabaseError on failure.
//
// PGlite's query() runs six protocol round trips per statement (Parse, Describe, Bind,
// Describe, Execute, Sync), re-parses and re-plans the SQL every time and decodes the
// backend messages with a general-purpose parser; at ~230 µs per primary-key lookup that
// capped GetProject near 2,000 req/s. Here each distinct SQL text is prepared once as a
// named statement (its parameter types learnt from Describe), and every execution is one
// round trip (Bind, Describe, Execute, Sync) whose reply is decoded by a small reader of
// the few message kinds an extended-query reply holds.
//
// A round trip may carry a deadline (a performance.now() time): it then runs under
// runBefore (pglite-deadline.ts), and once one is stopped the instance is `interrupted` and
// this wire runs nothing more. The caller holds the store's lock (pglite.ts).
import { messages, type PGlite, protocol } from "@electric-sql/pglite";
import type { RawResult } from "./db.js";
import { runBefore, StatementTimeoutError } from "./pglite-deadline.js";

/** Statements kept prepared; SQL texts beyond this are run unnamed (two round trips). */
const MAX_PREPARED = 500;
const UNNAMED = "";

interface Prepared {
  name: string;
  paramTypes: number[];
}

interface Field {
  name: string;
  typeId: number;
}

type QueryError = messages.DatabaseError & { query?: string; params?: unknown[]; queryOptions?: unknown };

const serialize = protocol.serialize;

function concat(parts: Uint8Array[]): Uint8Array {
  let length = 0;
  for (const part of parts) length += part.length;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

export class PgliteWire {
  private readonly prepared = new Map<string, Prepared>();
  private sequence = 0;

  /** Receives the NOTIFY messages (channel, payload) that replies to this path carry. */
  onNotification: ((channel: string, payload: string) => void) | null = null;

  /** A deadline stopped a statement mid-way: the instance must never run anything again. */
  interrupted = false;

  constructor(private readonly pg: PGlite) {}

  /** Runs one statement and returns its rows as PGlite's query() would. */
  async query<T>(sql: string, params: unknown[], deadline?: number): Promise<T[]> {
    try {
      const statement = this.prepared.get(sql) ?? (await this.prepare(sql, deadline));
      const values = params.map((value, i) => this.serializeParam(value, statement.paramTypes[i]));
      const reply = await this.roundTrip(
        concat([
          serialize.bind({ statement: statement.name, values }),
          serialize.describe({ type: "P" }),
          serialize.execute({}),
          serialize.sync(),
        ]),
        deadline,
      );
      return this.readRows<T>(reply);
    } catch (error) {
      // PGlite's query() attaches the statement to database errors; so does this path.
      if (error instanceof messages.DatabaseError) {
        const dbError = error as QueryError;
        dbError.query = sql;
        dbError.params = params;
        dbError.queryOptions = undefined;
      }
      throw error;
    }
  }

  /**
   * Runs one statement unnamed (a caller's text never fills the statement cache) and
   * returns its fields and each row's values as text, unparsed.
   */
  async queryRaw(sql: string, params: unknown[], deadline?: number): Promise<RawResult> {
    const parsed = await this.roundTrip(
      concat([
        serialize.parse({ text: sql, name: UNNAMED }),
        serialize.describe({ type: "S", name: UNNAMED }),
        serialize.sync(),
      ]),
      deadline,
    );
    const types = this.readParamTypes(parsed);
    const values = params.map((value, i) => this.serializeParam(value, types[i]));
    const reply = await this.roundTrip(
      concat([
        serialize.bind({ statement: UNNAMED, values }),
        serialize.describe({ type: "P" }),
        serialize.execute({}),
        serialize.sync(),
      ]),
      deadline,
    );
    const fields: Field[] = [];
    const rows = this.readRows<(string | null)[]>(reply, fields);
    return { fields, rows };
  }

  private serializeParam(value: unknown, typeId: number | undefined): string | null {
    if (value === null || value === undefined) return null;
    const serializer = typeId === undefined ? undefined : this.pg.serializers[typeId];
    return serializer ? serializer(value) : (value as { toString(): string }).toString();
  }

  /** Parses the statement (named while the cache has room) and learns its parameter types. */
  private async prepare(sql: string, deadline: number | undefined): Promise<Prepared> {
    const name = this.prepared.size < MAX_PREPARED ? `warren_${++this.sequence}` : UNNAMED;
    const reply = await this.roundTrip(
      concat([serialize.parse({ text: sql, name }), serialize.describe({ type: "S", name }), serialize.sync()]),
      deadline,
    );
    const statement: Prepared = { name, paramTypes: this.readParamTypes(reply) };
    if (name !== UNNAMED) this.prepared.set(sql, statement);
    return statement;
  }

  /**
   * Runs one statement without parameters by the simple protocol (BEGIN, COMMIT, ROLLBACK)
   * and returns its command tag (a COMMIT of a failed transaction answers ROLLBACK).
   */
  async command(sql: string): Promise<string> {
    const reply = await this.roundTrip(serialize.query(sql));
    let tag = "";
    for (let at = 0; at + 5 <= reply.length; ) {
      const kind = reply[at];
      const end = at + 1 + reply.readUInt32BE(at + 1);
      if (kind === 0x45 /* E */) this.throwError(reply, at, end);
      if (kind === 0x41 /* A */) this.notify(reply, at);
      if (kind === 0x43 /* C: CommandComplete */) tag = reply.toString("utf8", at + 5, end - 1);
      at = end;
    }
    return tag;
  }

  private async roundTrip(message: Uint8Array, deadline?: number): Promise<Buffer> {
    if (this.interrupted) throw new Error("PGlite instance interrupted by a statement deadline");
    const chunks: Buffer[] = [];
    const options = {
      // Without a sync to the file system the call is synchronous to its end, which is
      // what lets runBefore bound it.
      syncToFs: false,
      // The chunk is a view of the WASM heap, valid only during the call: copy it.
      onRawData: (chunk: Uint8Array) => {
        chunks.push(Buffer.from(chunk));
      },
    };
    if (deadline === undefined) {
      await this.pg.execProtocolRawStream(message, options);
    } else {
      try {
        await runBefore(() => this.pg.execProtocolRawStream(message, options), deadline);
      } catch (error) {
        if (error instanceof StatementTimeoutError) this.interrupted = true;
        throw error;
      }
    }
    return chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
  }

  /** Throws the reply's error, decoded by PGlite's own parser so it is the same DatabaseError. */
  private throwError(reply: Buffer, start: number, end: number): never {
    let failure: Error | null = null;
    new protocol.Parser().parse(reply.subarray(start, end), (message) => {
      if (!failure && message instanceof Error) failure = message;
    });
    throw failure ?? new Error("PGlite reported an error that could not be decoded");
  }

  /** A NotificationResponse: kind, length, sender pid, then channel and payload as C strings. */
  private notify(reply: Buffer, at: number) {
    if (!this.onNotification) return;
    const channelEnd = reply.indexOf(0, at + 9);
    const payloadEnd = reply.indexOf(0, channelEnd + 1);
    this.onNotification(reply.toString("utf8", at + 9, channelEnd), reply.toString("utf8", channelEnd + 1, payloadEnd));
  }

  private readParamTypes(reply: Buffer): number[] {
    let types: number[] = [];
    for (let at = 0; at + 5 <= reply.length; ) {
      const kind = reply[at];
      const end = at + 1 + reply.readUInt32BE(at + 1);
      if (kind === 0x45 /* E */) this.throwError(reply, at, end);
      if (kind === 0x41 /* A */) this.notify(reply, at);
      if (kind === 0x74 /* t: ParameterDescription */) {
        const count = reply.readUInt16BE(at + 5);
        types = [];
        for (let i = 0; i < count; i++) types.push(reply.readUInt32BE(at + 7 + i * 4));
      }
      at = end;
    }
    return types;
  }

  /** Rows as objects of parsed values; given `raw`, as arrays of text with the fields pushed onto it. */
  private readRows<T>(reply: Buffer, raw?: Field[]): T[] {
    const parsers = this.pg.parsers;
    let fields: Field[] = raw ?? [];
    const rows: T[] = [];
    for (let at = 0; at + 5 <= reply.length; ) {
      const kind = reply[at];
      const end = at + 1 + reply.readUInt32BE(at + 1);
      switch (kind) {
        case 0x45 /* E: ErrorResponse */:
          this.throwError(reply, at, end);
          break;
        case 0x54 /* T: RowDescription */:
          {
            const count = reply.readUInt16BE(at + 5);
            let p = at + 7;
            if (raw) raw.length = 0;
            else fields = [];
            for (let i = 0; i < count; i++) {
              const nul = reply.indexOf(0, p);
              const name = reply.toString("utf8", p, nul);
              // name\0, table oid (4), column (2), type oid (4), size (2), modifier (4), format (2)
              fields.push({ name, typeId: reply.readUInt32BE(nul + 7) });
              p = nul + 19;
            }
            break;
          }
        case 0x44 /* D: DataRow */:
          {
            const count = reply.readUInt16BE(at + 5);
            let p = at + 7;
            if (raw) {
              const values: (string | null)[] = [];
              for (let i = 0; i < count; i++) {
                const length = reply.readInt32BE(p);
                p += 4;
                values.push(length < 0 ? null : reply.toString("utf8", p, p + length));
                if (length > 0) p += length;
              }
              rows.push(values as T);
              break;
            }
            const row: Record<string, unknown> = {};
            for (let i = 0; i < count; i++) {
              const length = reply.readInt32BE(p);
              p += 4;
              const field = fields[i];
              const key = field?.name ?? String(i);
              if (length < 0) {
                row[key] = null;
                continue;
              }
              const text = reply.toString("utf8", p, p + length);
              p += length;
              const parser = field ? parsers[field.typeId] : undefined;
              row[key] = parser && field ? parser(text, field.typeId) : text;
            }
            rows.push(row as T);
            break;
          }
        case 0x41 /* A: NotificationResponse */:
          this.notify(reply, at);
          break;
        default:
          // ParseComplete, BindComplete, NoData, CommandComplete, ReadyForQuery, notices.
          break;
      }
      at = end;
    }
    return rows;
  }
}
