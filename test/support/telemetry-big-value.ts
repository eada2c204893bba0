// Child process of telemetry-sql-redteam.test.ts: runs one raw telemetry SQL query through
// the service (both layers) on a fresh store, then prints how it ended, as one JSON line.
// A child, because the failure it looks for ends the whole process.
import { randomBytes } from "node:crypto";
import { systemClock } from "../../src/lib/clock.js";
import type { Credential } from "../../src/modules/identity/credential.js";
import { TelemetryViewService } from "../../src/modules/telemetry/service.js";
import { migrate } from "../../src/store/migrate.js";
import { openTestStore, type StoreKind } from "../harness.js";

const [store, sql] = process.argv.slice(2) as [StoreKind, string];
const testStore = await openTestStore(store);
try {
  await migrate(testStore.db);
  const service = new TelemetryViewService(testStore.db, systemClock());
  const cred = { orgId: `org_${randomBytes(4).toString("hex")}`, sandbox: null } as unknown as Credential;
  const outcome = await service.runSql(cred, sql, 10).then(
    (answer) => ({ ok: true, bytes: JSON.stringify(answer).length, truncated: answer.truncated_reason ?? null }),
    (error: { code?: string; message?: string }) => ({ ok: false, code: error.code, message: error.message }),
  );
  await service.close();
  process.stdout.write(`${JSON.stringify(outcome)}\n`);
} finally {
  await testStore.close();
}
