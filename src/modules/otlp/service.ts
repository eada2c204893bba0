// OTLP trace ingest (docs/api-decisions.md "OpenTelemetry ingest"): the spans of one export
// request stored as events of their runs, in one transaction. A span goes to the run it (or
// its resource) names in `warren.run_id`, else to its trace's run: a sandbox credential's
// ambient run, or for any other credential a run of its own, made when the trace is first
// seen (idempotently: the trace row and the run commit together, and a second request for
// the same new trace waits on the row and then uses it).
import type { Clock } from "../../lib/clock.js";
import { notFound } from "../../lib/errors.js";
import { newId } from "../../lib/ids.js";
import type { Db, Queryable } from "../../store/db.js";
import * as events from "../events/service.js";
import type { Credential } from "../identity/credential.js";
import { RUN_LABEL_MAX_CHARS } from "../runs/schemas.js";
import type { RunService } from "../runs/service.js";
import type { OtlpRequest } from "./model.js";
import { SPAN_KINDS, STATUS_CODES } from "./model.js";
import * as repo from "./repo.js";
import { type AcceptedSpan, spansOf } from "./spans.js";

/** What OTLP's ExportTracePartialSuccess reports: spans refused, and why (empty when none). */
export interface IngestResult {
  rejectedSpans: number;
  errorMessage: string;
  /** Spans written now (a span sent before counts as accepted, but is not written again). */
  written: number;
}

/** The sandbox a sandbox-scoped credential belongs to, as ingest needs it. */
export interface AmbientRuns {
  egressIdentity(id: string): Promise<{ orgId: string; projectId: string; runId: string } | null>;
}

export interface RunPlace {
  id: string;
  projectId: string;
  lineagePath: string;
}

export class OtlpService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly runs: RunService,
    private readonly sandboxes: AmbientRuns,
  ) {}

  async ingest(cred: Credential, request: OtlpRequest): Promise<IngestResult> {
    const batch = spansOf(request);
    const reasons = [...batch.reasons];
    let rejected = batch.rejected;
    let written = 0;
    if (batch.spans.length > 0) {
      const ambient = cred.sandbox ? await this.sandboxes.egressIdentity(cred.sandbox.sandboxId) : null;
      if (cred.sandbox && (!ambient || ambient.orgId !== cred.orgId)) throw notFound("sandbox");
      const stored = await this.db.tx((q) => this.store(q, cred, ambient?.runId ?? null, batch.spans));
      written = stored.written;
      if (stored.unknownRun > 0) {
        rejected += stored.unknownRun;
        reasons.push(`${stored.unknownRun} spans name a run (${"warren.run_id"}) that was not found`);
      }
    }
    return {
      rejectedSpans: rejected,
      errorMessage: rejected > 0 ? `${rejected} spans rejected: ${reasons.join("; ")}` : "",
      written,
    };
  }

  private async store(
    q: Queryable,
    cred: Credential,
    ambientRunId: string | null,
    spans: AcceptedSpan[],
  ): Promise<{ written: number; unknownRun: number }> {
    const places = new Map<string, RunPlace | null>();
    const place = async (runId: string): Promise<RunPlace | null> => {
      if (!places.has(runId)) {
        const row = await this.runs.find(q, cred.orgId, runId);
        places.set(runId, row ? { id: row.id, projectId: row.project_id, lineagePath: row.lineage_path } : null);
      }
      return places.get(runId) ?? null;
    };
    // A sandbox credential writes into its ambient run only (contract 5.6: it is confined).
    const namedRun = async (span: AcceptedSpan): Promise<RunPlace | null> => {
      const id = span.namedRunId;
      if (id === null) return null;
      if (ambientRunId !== null && id !== ambientRunId) return null;
      return place(id);
    };

    // Each trace's run: recorded, else decided now (and recorded).
    const byTrace = new Map<string, AcceptedSpan[]>();
    for (const span of spans) {
      const list = byTrace.get(span.span.traceId);
      if (list) list.push(span);
      else byTrace.set(span.span.traceId, [span]);
    }
    const traceIds = [...byTrace.keys()];
    const traceRun = await repo.traceRuns(q, cred.orgId, traceIds);
    const missing: { traceId: string; runId: string; label: string | null }[] = [];
    for (const traceId of traceIds) {
      if (traceRun.has(traceId)) continue;
      const list = byTrace.get(traceId) ?? [];
      let runId = ambientRunId;
      if (runId === null) {
        for (const span of list) {
          const named = await namedRun(span);
          if (named) {
            runId = named.id;
            break;
          }
        }
      }
      const root = list.find((s) => s.span.parentSpanId === "");
      const label = `trace ${traceId}${root?.span.name ? `: ${root.span.name}` : ""}`.slice(0, RUN_LABEL_MAX_CHARS);
      missing.push(runId ? { traceId, runId, label: null } : { traceId, runId: newId("run"), label });
    }
    if (missing.length > 0) {
      const inserted = await repo.insertTraces(q, cred.orgId, missing, this.clock.now());
      for (const m of missing) {
        if (!inserted.has(m.traceId)) continue;
        traceRun.set(m.traceId, m.runId);
        if (m.label !== null) {
          const run = await this.runs.startIn(q, cred, { label: m.label }, m.runId);
          places.set(run.id, { id: run.id, projectId: run.project_id, lineagePath: run.lineage_path });
        }
      }
      // Another request recorded these meanwhile (its transaction has committed: ours waited on the rows).
      const raced = missing.filter((m) => !inserted.has(m.traceId)).map((m) => m.traceId);
      if (raced.length > 0) for (const [t, r] of await repo.traceRuns(q, cred.orgId, raced)) traceRun.set(t, r);
    }

    const rows: events.NewSpanEvent[] = [];
    let unknownRun = 0;
    for (const s of spans) {
      const named = s.namedRunId === null ? null : await namedRun(s);
      if (s.namedRunId !== null && named === null) {
        unknownRun++;
        continue;
      }
      // A sandbox credential's spans go to its ambient run even when another sandbox (or a
      // host) sent the same trace first: the trace's recorded run is another's.
      const traceRunId = ambientRunId ?? traceRun.get(s.span.traceId);
      const run = named ?? (traceRunId ? await place(traceRunId) : null);
      if (!run) {
        unknownRun++;
        continue;
      }
      rows.push(spanEventOf(cred.orgId, cred.principalId, run, s));
    }
    const written = await events.appendSpanEvents(q, rows);
    await repo.mergeTraceValues(q, cred.orgId, traceValuesOf(byTrace));
    return { written, unknownRun };
  }
}

/**
 * The trace-level values (user, session, tags) each trace's spans give: the root span's when
 * it is in the batch, else the first span's that has one. Spans without their own inherit
 * them in the spans view.
 */
function traceValuesOf(byTrace: Map<string, AcceptedSpan[]>): repo.TraceValues[] {
  const out: repo.TraceValues[] = [];
  for (const [traceId, list] of byTrace) {
    const root = list.find((s) => s.span.parentSpanId === "");
    const pick = <T>(get: (s: AcceptedSpan) => T | null): T | null => {
      if (root) return get(root);
      for (const s of list) {
        const v = get(s);
        if (v !== null) return v;
      }
      return null;
    };
    const v: repo.TraceValues = {
      traceId,
      userId: pick((s) => s.conventions.userId),
      sessionId: pick((s) => s.conventions.sessionId),
      tags: pick((s) => s.conventions.tags),
      root: root !== undefined,
    };
    if (v.userId !== null || v.sessionId !== null || v.tags !== null) out.push(v);
  }
  return out;
}

/** The events row of an accepted span in `run` (pure: the benchmark builds the same rows). */
export function spanEventOf(orgId: string, principal: string, run: RunPlace, s: AcceptedSpan): events.NewSpanEvent {
  const c = s.conventions;
  return {
    orgId,
    eventId: s.eventId,
    projectId: run.projectId,
    runId: run.id,
    lineagePath: run.lineagePath,
    startNs: s.span.startNs,
    endNs: s.span.endNs,
    principal,
    payloadJson: s.payloadJson,
    traceId: s.span.traceId,
    spanId: s.span.spanId,
    parentSpanId: s.span.parentSpanId || null,
    spanKind: SPAN_KINDS[s.span.kind] ?? "unspecified",
    statusCode: STATUS_CODES[s.span.status.code] ?? "unset",
    spanType: c.spanType,
    operation: c.operation,
    system: c.system,
    model: c.model,
    inputTokens: c.inputTokens,
    outputTokens: c.outputTokens,
    totalTokens: c.totalTokens,
    costUsd: c.costUsd,
    input: c.input,
    output: c.output,
    userId: c.userId,
    sessionId: c.sessionId,
    tags: c.tags,
  };
}
