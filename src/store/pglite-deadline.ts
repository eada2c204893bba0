// Statement deadlines on the embedded store. PGlite runs a statement synchronously on the
// event loop's thread and cannot cancel it: WASM has no SIGALRM, so PostgreSQL's
// statement_timeout never fires while the statement runs. V8 can stop it: a vm script run
// with `timeout` is terminated by a watchdog thread, WASM frames included. What it leaves
// behind is an instance interrupted mid-statement, which must never run anything again;
// pglite.ts drops it and reopens the data directory (PostgreSQL's crash recovery).
import vm from "node:vm";
import { messages } from "@electric-sql/pglite";

/** One compiled script and one context for every call: the call itself is handed over in `run`. */
const script = new vm.Script("run()", { filename: "warren-pglite-deadline.vm" });
const context = vm.createContext({ run: null as (() => unknown) | null });

/** PostgreSQL's query_canceled, as a statement past its statement_timeout reports it. */
export const QUERY_CANCELED = "57014";

/** The statement ran past its deadline and was stopped (SQLSTATE 57014, as on PostgreSQL). */
export class StatementTimeoutError extends messages.DatabaseError {
  constructor() {
    super("canceling statement due to statement timeout", 0, "error");
    this.code = QUERY_CANCELED;
    this.severity = "ERROR";
  }
}

function timedOut(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === "ERR_SCRIPT_EXECUTION_TIMEOUT";
}

/**
 * Runs fn (synchronous work: the promise an async function returns once its synchronous
 * part is done) and stops it at `deadline` (a performance.now() time), throwing
 * StatementTimeoutError. Whatever fn was doing is abandoned where it stood.
 */
export function runBefore<T>(fn: () => T, deadline: number): T {
  const timeout = Math.max(1, Math.ceil(deadline - performance.now()));
  context.run = fn;
  try {
    return script.runInContext(context, { timeout }) as T;
  } catch (error) {
    if (timedOut(error)) throw new StatementTimeoutError();
    throw error;
  } finally {
    context.run = null;
  }
}
