// Background controllers: the sandbox reconciler (with its idle, expiry and retention
// sweep) and the retention GC of idempotency records.
import type { Container } from "../container.js";
import { PooledRuntime } from "../drivers/runtime/local/pool.js";
import { SandboxReconciler } from "./sandbox-reconciler.js";

const GC_INTERVAL_MS = 10 * 60 * 1000;

export async function startControllers(c: Container): Promise<{ stop(): Promise<void> }> {
  const reconciler = c.runtime
    ? new SandboxReconciler(c, c.runtime, {
        pids: c.config.sandbox.pids,
        retentionSeconds: c.config.sandbox.retentionSeconds,
        publicApiUrl: c.config.publicApiUrl,
      })
    : null;
  await reconciler?.start();
  // After the start-up cleanup, which removes whatever the store does not know.
  if (c.runtime instanceof PooledRuntime) c.runtime.startFilling();
  const gc = setInterval(() => {
    c.idempotency
      .purgeExpired()
      .then((purged) => {
        if (purged > 0) c.log.info({ purged }, "purged expired idempotency records");
      })
      .catch((error: unknown) => c.log.warn({ err: (error as Error).message }, "idempotency GC failed"));
  }, GC_INTERVAL_MS);
  gc.unref();
  return {
    stop: async () => {
      clearInterval(gc);
      await reconciler?.stop();
    },
  };
}
