// Product quotas: each metric has a configured default limit, an optional per-organization
// override (set through the admin CLI) and a meter that reads current use from the store.
// Admission takes a per-(organization, metric) transaction lock so concurrent admissions
// cannot overshoot a limit together.
import type { QuotaDefaults } from "../../config.js";
import { AppError } from "../../lib/errors.js";
import type { Db, Queryable } from "../../store/db.js";
import * as repo from "./repo.js";
import type { QuotaLimitJson } from "./schemas.js";

export type QuotaMetric = keyof QuotaDefaults;
export type Meter = (q: Queryable, orgId: string) => Promise<number>;

export const QUOTA_METRICS: QuotaMetric[] = [
  "sandboxes.running",
  "sandboxes.total",
  "sandboxes.workspace_capacity_gib",
  "projects.total",
  "snapshots.total",
];

const QUOTA_UNITS: Record<QuotaMetric, string> = {
  "sandboxes.running": "sandboxes",
  "sandboxes.total": "sandboxes",
  "sandboxes.workspace_capacity_gib": "GiB",
  "projects.total": "projects",
  "snapshots.total": "snapshots",
};

// How long a caller should wait before retrying an admission this quota refused.
const RETRY_AFTER_SECONDS: Record<QuotaMetric, number> = {
  "sandboxes.running": 30,
  "sandboxes.total": 60,
  "sandboxes.workspace_capacity_gib": 60,
  "projects.total": 60,
  "snapshots.total": 60,
};

export function isQuotaMetric(value: string): value is QuotaMetric {
  return (QUOTA_METRICS as string[]).includes(value);
}

// The owning modules register their meters (SandboxService, ProjectService); until one
// does, nothing of that kind can exist, so use is zero.
const noSandboxesYet: Meter = async () => 0;

export class QuotaService {
  private readonly meters = new Map<QuotaMetric, Meter>([
    ["sandboxes.running", noSandboxesYet],
    ["sandboxes.total", noSandboxesYet],
    ["sandboxes.workspace_capacity_gib", noSandboxesYet],
  ]);

  constructor(
    private readonly db: Db,
    private readonly defaults: QuotaDefaults,
  ) {}

  registerMeter(metric: QuotaMetric, meter: Meter): void {
    this.meters.set(metric, meter);
  }

  async limitOf(q: Queryable, orgId: string, metric: QuotaMetric): Promise<number> {
    return (await repo.getLimitOverride(q, orgId, metric)) ?? this.defaults[metric];
  }

  private async currentOf(q: Queryable, orgId: string, metric: QuotaMetric): Promise<number> {
    const meter = this.meters.get(metric);
    return meter ? meter(q, orgId) : 0;
  }

  /** Refuses with quota_exceeded when adding `amount` would pass the limit; call inside the admitting transaction. */
  async admit(q: Queryable, orgId: string, metric: QuotaMetric, amount: number): Promise<void> {
    await repo.lockMetric(q, orgId, metric);
    const [limit, current] = await Promise.all([this.limitOf(q, orgId, metric), this.currentOf(q, orgId, metric)]);
    if (current + amount > limit) {
      const retryAfterSeconds = RETRY_AFTER_SECONDS[metric];
      throw new AppError("quota_exceeded", `quota ${metric} exceeded: ${current} of ${limit} in use`, {
        quota: {
          metric,
          limit: String(limit),
          current: String(current),
          reserved: "0",
          retry_after_seconds: retryAfterSeconds,
        },
      });
    }
  }

  async snapshot(orgId: string): Promise<{ limits: QuotaLimitJson[] }> {
    const limits: QuotaLimitJson[] = [];
    for (const metric of QUOTA_METRICS) {
      const [limit, current] = await Promise.all([
        this.limitOf(this.db, orgId, metric),
        this.currentOf(this.db, orgId, metric),
      ]);
      limits.push({ metric, unit: QUOTA_UNITS[metric], limit: String(limit), current: String(current), reserved: "0" });
    }
    return { limits };
  }

  async setLimit(orgId: string, metric: QuotaMetric, limit: number | null): Promise<void> {
    if (limit === null) await repo.deleteLimitOverride(this.db, orgId, metric);
    else await repo.setLimitOverride(this.db, orgId, metric, limit);
  }
}
