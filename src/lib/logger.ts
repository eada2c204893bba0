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
 * The server's log on stdout, written asynchronously: lines logged while a write is under
 * way go out together in the next one, so a busy server makes one write per batch instead of
 * one per request. What is queued is flushed synchronously at exit (pino registers it).
 */
export function createServerLogger(level: string): Logger {
  return createLogger(level, pino.destination({ dest: 1, sync: false }));
}
