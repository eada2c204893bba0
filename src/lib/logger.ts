// Structured JSON logs (pino). Fields that could carry a credential are redacted wherever
// they appear, as a second line of defence behind never logging them at all.
import pino from "pino";

export type Logger = pino.Logger;

export const REDACT_PATHS = [
  "req.headers.authorization",
  "headers.authorization",
  "authorization",
  "api_key",
  "*.api_key",
  "value",
  "*.value",
  "secret",
  "*.secret",
];

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino({ level, redact: { paths: REDACT_PATHS, censor: "[redacted]" } }, destination);
}

/**
 * The server's log on stdout, written asynchronously and in blocks: lines gather until 4 KiB
 * (about a dozen request lines) or 200 ms have passed, so a busy server makes one write per
 * block instead of one per request, and an idle one shows a line within 200 ms. What is
 * queued is flushed synchronously at exit (pino registers it).
 */
export function createServerLogger(level: string): Logger {
  return createLogger(level, pino.destination({ dest: 1, sync: false, minLength: 4096, periodicFlush: 200 }));
}
