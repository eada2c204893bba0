// Who may scrape GET /metrics, and the scrape itself. An owner key of the operator
// organization (the credential of the admin routes), or the dedicated WARREN_METRICS_TOKEN
// a Prometheus server can hold without being able to administer anything.
import { createHash, timingSafeEqual } from "node:crypto";
import { denied } from "../../lib/errors.js";
import type { AdminService } from "../admin/service.js";
import type { IdentityService } from "../identity/service.js";
import type { WarrenMetrics } from "./registry.js";

const digest = (text: string) => createHash("sha256").update(text).digest();

export class MetricsService {
  /** SHA-256 of the metrics token (compared in constant time); null when none is configured. */
  private readonly tokenDigest: Buffer | null;

  constructor(
    readonly metrics: WarrenMetrics,
    private readonly identity: IdentityService,
    private readonly admin: AdminService,
    token: string,
  ) {
    this.tokenDigest = token ? digest(token) : null;
  }

  /** Resolves when `secret` may scrape; AppError unauthenticated or permission_denied otherwise. */
  async authorize(secret: string): Promise<void> {
    if (this.tokenDigest && timingSafeEqual(digest(secret), this.tokenDigest)) return;
    const cred = await this.identity.authenticate(secret);
    try {
      this.admin.authorize(cred);
    } catch {
      throw denied("GET /metrics takes WARREN_METRICS_TOKEN or an owner key of the operator organization");
    }
  }

  scrape() {
    return this.metrics.scrape();
  }
}
