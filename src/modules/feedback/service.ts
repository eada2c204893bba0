// Product feedback: stored per organization, de-duplicated by fingerprint (derived from the
// content when the caller gives none), and relayed to a configured webhook when one is set.
import type { Clock } from "../../lib/clock.js";
import { canonicalJson, sha256Hex } from "../../lib/hash.js";
import { newId } from "../../lib/ids.js";
import type { Logger } from "../../lib/logger.js";
import type { Db } from "../../store/db.js";
import type { Credential } from "../identity/credential.js";
import * as repo from "./repo.js";
import type { CreateFeedbackBody, FeedbackCreatedJson } from "./schemas.js";

export interface FeedbackRelay {
  /** True only when the review channel accepted the report. */
  relay(report: Record<string, unknown>): Promise<boolean>;
}

export function webhookRelay(url: string, timeoutMs: number, log: Logger): FeedbackRelay {
  return {
    relay: async (report) => {
      if (!url) return false;
      try {
        const response = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(report),
          signal: AbortSignal.timeout(timeoutMs),
        });
        await response.arrayBuffer().catch(() => undefined);
        if (!response.ok) log.warn({ status: response.status }, "feedback relay refused the report");
        return response.ok;
      } catch (error) {
        log.warn({ err: (error as Error).message }, "feedback relay failed");
        return false;
      }
    },
  };
}

/** The fingerprint of a report whose caller gave none: a digest of its content fields. */
export function deriveFingerprint(input: CreateFeedbackBody): string {
  const content = {
    title: input.title,
    surface: input.surface,
    body: input.body ?? "",
    expected: input.expected ?? "",
    actual: input.actual ?? "",
    repro: input.repro ?? "",
    severity: input.severity ?? "",
    svc_version: input.svc_version ?? "",
    evidence: input.evidence ?? [],
  };
  return `sha256:${sha256Hex(canonicalJson(content))}`;
}

export class FeedbackService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly relay: FeedbackRelay,
  ) {}

  async create(cred: Credential, input: CreateFeedbackBody): Promise<FeedbackCreatedJson> {
    const fingerprint = input.fingerprint || deriveFingerprint(input);
    const existing = await this.findByFingerprint(cred.orgId, fingerprint);
    if (existing) return existing;

    const id = newId("fb");
    const createdAt = this.clock.now();
    // The report with its optional fields filled, as stored and as relayed.
    const report = {
      title: input.title,
      surface: input.surface,
      body: input.body ?? "",
      expected: input.expected ?? "",
      actual: input.actual ?? "",
      repro: input.repro ?? "",
      severity: input.severity ?? "",
      fingerprint,
    };
    const svcVersion = input.svc_version ?? "";
    const evidence = input.evidence ?? [];
    const inserted = await repo.insertFeedback(this.db, {
      id,
      orgId: cred.orgId,
      principalId: cred.principalId,
      ...report,
      svcVersion,
      evidence,
      createdAt,
    });
    if (!inserted) {
      // A concurrent submission with the same fingerprint won the insert.
      const winner = await this.findByFingerprint(cred.orgId, fingerprint);
      if (winner) return winner;
    }
    const relayed = await this.relay.relay({
      id,
      organization: { id: cred.orgId, slug: cred.orgSlug },
      principal_id: cred.principalId,
      ...report,
      svc_version: svcVersion,
      evidence,
      created_at: createdAt.toISOString(),
    });
    if (relayed) await repo.markRelayed(this.db, id);
    return { id, relayed };
  }

  private findByFingerprint(orgId: string, fingerprint: string) {
    return repo.findByFingerprint(this.db, orgId, fingerprint);
  }
}
