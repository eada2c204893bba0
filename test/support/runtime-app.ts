// A test app over a real runtime fixture with a running reconciler: the set-up most sandbox
// test files share (the fixture's busybox image as the default, small sandboxes).
import { loadConfig, type SandboxDefaults } from "../../src/config.js";
import { type ReconcilerOptions, SandboxReconciler } from "../../src/controllers/sandbox-reconciler.js";
import type { RuntimeFixture } from "../../src/drivers/runtime/local/test-support.js";
import { type StoreKind, startTestApp, type TestApp, type TestAppOptions } from "../harness.js";

export interface RuntimeApp {
  t: TestApp;
  reconciler: SandboxReconciler;
  /** Stops the reconciler and closes the app (the fixture is the caller's to clean up). */
  close(): Promise<void>;
}

export interface RuntimeAppOptions extends TestAppOptions {
  /** Sandbox defaults over the small ones here (128 MiB, 128 pids, the fixture's busybox). */
  sandbox?: Partial<SandboxDefaults>;
  reconciler?: Partial<ReconcilerOptions>;
  /** Start the reconciler (default true); a test that starts it itself says false. */
  start?: boolean;
}

export async function startRuntimeApp(
  store: StoreKind,
  fixture: RuntimeFixture,
  options: RuntimeAppOptions = {},
): Promise<RuntimeApp> {
  const { sandbox, reconciler: reconcilerOptions, start = true, ...app } = options;
  const t = await startTestApp(store, {
    ...app,
    overrides: { runtime: fixture.driver, ...app.overrides },
    config: {
      ...app.config,
      sandbox: {
        ...loadConfig({}).sandbox,
        defaultImage: fixture.busyboxRef,
        memoryMiB: 128,
        pids: 128,
        ...sandbox,
      },
    },
  });
  const reconciler = new SandboxReconciler(t.c, fixture.driver, {
    pids: 128,
    retentionSeconds: 3600,
    publicApiUrl: "http://127.0.0.1:1",
    ...reconcilerOptions,
  });
  if (start) await reconciler.start();
  return {
    t,
    reconciler,
    async close() {
      await reconciler.stop();
      await t.close();
    },
  };
}
