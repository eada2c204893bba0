// Background controllers. For now: the retention GC of idempotency records. Later issues
// add the sandbox reconciler and idle/TTL timers here.
import type { Container } from "../container.js";

const GC_INTERVAL_MS = 10 * 60 * 1000;

export function startControllers(c: Container): { stop(): void } {
  const gc = setInterval(() => {
    c.idempotency
      .purgeExpired()
      .then((purged) => {
        if (purged > 0) c.log.info({ purged }, "purged expired idempotency records");
      })
      .catch((error: unknown) => c.log.warn({ err: (error as Error).message }, "idempotency GC failed"));
  }, GC_INTERVAL_MS);
  gc.unref();
  return { stop: () => clearInterval(gc) };
}
