// The last line of defence for a server that serves many sandboxes and clients at once: an
// exception thrown in a socket or child-process callback (or a rejection nobody awaited)
// would otherwise end the process and every sandbox's execs and sessions with it. Decoders
// of hostile bytes contain their own errors; this keeps a bug elsewhere to one request.
import type { Logger } from "./logger.js";

/** Logs and contains uncaught exceptions and unhandled rejections; returns the uninstaller. */
export function installProcessGuard(log: Logger): () => void {
  const contain = (error: unknown, origin: string) => {
    log.error(
      { err: error instanceof Error ? { message: error.message, stack: error.stack } : String(error), origin },
      "uncaught error contained; the server keeps serving",
    );
  };
  process.on("uncaughtException", contain);
  return () => {
    process.off("uncaughtException", contain);
  };
}
