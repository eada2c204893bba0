// Annotations: typed telemetry events on a run (optionally on one of its events or a time
// range) or on a project. Payloads are validated against the latest live schema version
// and kept byte-exact; caller-minted event ids make retries safe; the newest annotation per
// supersession key (schema, target, identity fields) hides older ones unless history is asked.

import type { Clock } from "../../lib/clock.js";
import { AppError, invalid, notFound } from "../../lib/errors.js";
import { canonicalJson, sha256Hex } from "../../lib/hash.js";
import { isUlid, newUlid } from "../../lib/ids.js";
import { decodePageToken, encodePageToken } from "../../lib/page-token.js";
import { findTextProblem } from "../../lib/text.js";
import type { Db, Queryable } from "../../store/db.js";
import { type Credential, requireOrgScoped } from "../identity/credential.js";
import type { WarrenMetrics } from "../metrics/registry.js";
import type { ProjectService } from "../projects/service.js";
import type { RunService } from "../runs/service.js";
import * as repo from "./annotation-repo.js";
import { describe, validatorFor } from "./json-schema.js";
import * as schemaRepo from "./schema-repo.js";
import { RESERVED_PREFIX } from "./schema-service.js";
import type {
  AnnotateBody,
  AnnotateRangeBody,
  AnnotationJson,
  EventIdJson,
  ListAnnotationsJson,
  ListAnnotationsQueryJson,
} from "./schemas.js";
import { WriteBatcher } from "./write-batcher.js";

const NS_PATTERN = /^(0|[1-9]\d{0,18})$/;
const MAX_NS = 9_223_372_036_854_775_807n;

/**
 * The service's list input: the query's filters as sent, and the paging and promoted-field
 * filters the route has already parsed out of it.
 */
export type ListInput = Pick<
  ListAnnotationsQueryJson,
  "run_id" | "project_id" | "schema_name" | "target_event_id" | "history"
> & {
  /** Equality filters on bloom-promoted fields: field name -> value (strings as-is, others as JSON). */
  promoted: Record<string, string>;
  pageSize: number;
  pageToken?: string | undefined;
};

interface Target {
  runId: string | null;
  projectId: string;
  lineagePath: string;
  targetEventId: string | null;
  range: repo.AnnotationInsert["range"];
}

/** A promoted value as stored and as filtered: strings as they are, anything else as JSON. */
/** A payload's own value of `field` (never Object.prototype's `constructor` or `__proto__`). */
function ownValue(object: Record<string, unknown>, field: string): unknown {
  return Object.hasOwn(object, field) ? object[field] : undefined;
}

export function promotedText(value: unknown): string | null {
  if (value === undefined) return null;
  return typeof value === "string" ? value : JSON.stringify(value);
}

function parseNs(value: string, field: string): bigint {
  if (!NS_PATTERN.test(value) || BigInt(value) > MAX_NS) {
    throw invalid(`${field} must be a non-negative decimal string of nanoseconds`);
  }
  return BigInt(value);
}

/** Decodes a stored row into the canonical encoding, or says why it cannot. */
export function decodeRow(row: repo.AnnotationRow): { ok: true; view: AnnotationJson } | { ok: false; reason: string } {
  if (row.payload_text === null || row.schema_name === null)
    return { ok: false, reason: "missing payload or schema name" };
  let payload: unknown;
  try {
    payload = JSON.parse(row.payload_text);
  } catch {
    return { ok: false, reason: "stored payload_json is not valid JSON" };
  }
  if (payload === null || typeof payload !== "object" || Array.isArray(payload)) {
    return { ok: false, reason: "stored payload_json is not a JSON object" };
  }
  if (!/^\d+$/.test(row.ts_wall_ns)) return { ok: false, reason: "stored ts_wall_ns is not a decimal integer" };
  const hasRange = row.range_start_ns !== null || row.range_end_ns !== null;
  if (hasRange && (row.range_start_ns === null || row.range_end_ns === null)) {
    return { ok: false, reason: "stored range has only one bound" };
  }
  if (hasRange && BigInt(row.range_start_ns as string) > BigInt(row.range_end_ns as string)) {
    return { ok: false, reason: "stored range starts after it ends" };
  }
  // Built in the field order of the canonical encoding (contract 2.7).
  const view: AnnotationJson = {
    event_id: row.event_id,
    ...(row.run_id ? { run_id: row.run_id } : {}),
    project_id: row.project_id,
    ...(row.lineage_path ? { lineage_path: row.lineage_path } : {}),
    schema_name: row.schema_name,
    ...(row.schema_version !== null ? { schema_version: String(row.schema_version) } : {}),
    ts_wall_ns: row.ts_wall_ns,
    ...(row.principal ? { principal: row.principal } : {}),
    ...(row.target_event_id ? { target_event_id: row.target_event_id } : {}),
    ...(row.range_start_ns !== null ? { range_start_ns: row.range_start_ns } : {}),
    ...(row.range_end_ns !== null ? { range_end_ns: row.range_end_ns } : {}),
    ...(row.range_start_event_id ? { range_start_event_id: row.range_start_event_id } : {}),
    ...(row.range_end_event_id ? { range_end_event_id: row.range_end_event_id } : {}),
    payload_json: row.payload_text,
  };
  return { ok: true, view };
}

/** How many run and schema lookups each cache keeps before starting over. */
const MAX_CACHED = 10_000;
/** Writes found stale (target or schema changed meanwhile) before an annotate gives up. */
const MAX_ATTEMPTS = 4;

type LiveSchema = NonNullable<repo.IngestContext["schema"]>;
type RunInfo = NonNullable<repo.IngestContext["run"]>;

interface Prepared {
  row: repo.AnnotationInsert;
  contentHash: string;
}

export class AnnotationService {
  // Reads an annotate may skip: a run's project and lineage never change, and the latest
  // live schema version is re-checked by the write itself (the guard in repo WRITE_SQL),
  // so a stale entry costs one more round trip, never a wrong answer. Every error is
  // decided on a fresh read, in the order of the uncached path.
  private readonly runs = new Map<string, RunInfo>();
  private readonly schemas = new Map<string, LiveSchema>();
  /** Where annotate writes go outside a transaction (batched; see write-batcher.ts). */
  private readonly writer: WriteBatcher;
  private metrics: WarrenMetrics | null = null;
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly projects: ProjectService,
    private readonly runService: RunService,
  ) {
    this.writer = new WriteBatcher(db);
  }

  /** Annotations written are counted in these metrics (GET /metrics). */
  useMetrics(metrics: WarrenMetrics): void {
    this.metrics = metrics;
  }

  /** Waits for the annotate writes under way. */
  close(): Promise<void> {
    return this.writer.close();
  }

  async annotate(cred: Credential, input: AnnotateBody): Promise<EventIdJson> {
    requireOrgScoped(cred, "annotate");
    if (Boolean(input.run_id) === Boolean(input.project_id)) throw invalid("set exactly one of run_id or project_id");
    if (input.target_event_id && !input.run_id) throw invalid("target_event_id is valid only with run_id");
    const guard: repo.WriteGuard = input.run_id ? (input.target_event_id ? "run-event" : "run") : "project";
    const schemaKey = `${cred.orgId}\u0000${input.schema_name}`;
    const runKey = input.run_id ? `${cred.orgId}\u0000${input.run_id}` : "";
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      // First from the caches when both are there (the write re-checks them), else read.
      let context: repo.IngestContext | null = null;
      const schema = attempt === 1 ? this.schemas.get(schemaKey) : undefined;
      const run = input.run_id ? this.runs.get(runKey) : undefined;
      if (schema && (run || !input.run_id)) {
        context = { run: run ?? null, projectFound: true, targetEventFound: true, schema };
      }
      const cached = context !== null;
      if (!context) {
        context = await repo.ingestContext(
          this.db,
          cred.orgId,
          input.run_id
            ? { runId: input.run_id, targetEventId: input.target_event_id || null }
            : { projectId: input.project_id as string },
          input.schema_name,
        );
        this.remember(runKey, context.run, schemaKey, context.schema);
      }
      let prepared: Prepared;
      try {
        const target = input.run_id
          ? this.runTarget(context, input.run_id, input.target_event_id)
          : this.projectTarget(context, input.project_id as string);
        prepared = this.prepare(cred, input, target, context.schema);
      } catch (error) {
        // A refusal is only ever given on what the store says now.
        if (cached && error instanceof AppError) continue;
        throw error;
      }
      const result = await this.insert(this.db, cred, prepared, guard, context.schema as LiveSchema, true);
      if (result) return result;
      this.forget(runKey, schemaKey);
    }
    throw new AppError("unavailable", "the run, project or schema kept changing while annotating; retry");
  }

  async annotateRange(cred: Credential, input: AnnotateRangeBody): Promise<EventIdJson> {
    requireOrgScoped(cred, "annotate");
    const byNs = input.range_start_ns !== undefined || input.range_end_ns !== undefined;
    const byEvent = input.range_start_event_id !== undefined || input.range_end_event_id !== undefined;
    if (byNs === byEvent) {
      throw invalid(
        "set exactly one window form: range_start_ns and range_end_ns, or range_start_event_id and range_end_event_id",
      );
    }
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      const result = await this.db.tx(async (q) => {
        const context = await repo.ingestContext(
          q,
          cred.orgId,
          { runId: input.run_id, targetEventId: null },
          input.schema_name,
        );
        const target = this.runTarget(context, input.run_id, undefined);
        if (byNs) {
          if (input.range_start_ns === undefined || input.range_end_ns === undefined) {
            throw invalid("range_start_ns and range_end_ns must both be set");
          }
          const start = parseNs(input.range_start_ns, "range_start_ns");
          const end = parseNs(input.range_end_ns, "range_end_ns");
          if (start > end) throw invalid("range_start_ns must not be after range_end_ns");
          target.range = { startNs: start.toString(), endNs: end.toString(), startEventId: null, endEventId: null };
        } else {
          if (!input.range_start_event_id || !input.range_end_event_id) {
            throw invalid("range_start_event_id and range_end_event_id must both be set");
          }
          const start = await repo.runEventExists(q, cred.orgId, input.run_id, input.range_start_event_id);
          if (!start) throw notFound(`event ${input.range_start_event_id} in run ${input.run_id}`);
          const end = await repo.runEventExists(q, cred.orgId, input.run_id, input.range_end_event_id);
          if (!end) throw notFound(`event ${input.range_end_event_id} in run ${input.run_id}`);
          if (BigInt(start.ts_wall_ns) > BigInt(end.ts_wall_ns)) {
            throw invalid("range_start_event_id must not be later than range_end_event_id");
          }
          target.range = {
            startNs: start.ts_wall_ns,
            endNs: end.ts_wall_ns,
            startEventId: input.range_start_event_id,
            endEventId: input.range_end_event_id,
          };
        }
        const prepared = this.prepare(cred, input, target, context.schema);
        return this.insert(q, cred, prepared, "run", context.schema as LiveSchema, false);
      });
      if (result) return result;
    }
    throw new AppError("unavailable", "the run or schema kept changing while annotating; retry");
  }

  private remember(runKey: string, run: RunInfo | null, schemaKey: string, schema: LiveSchema | null) {
    if (runKey && run) {
      if (this.runs.size >= MAX_CACHED) this.runs.clear();
      this.runs.set(runKey, run);
    }
    if (schema) {
      if (this.schemas.size >= MAX_CACHED) this.schemas.clear();
      this.schemas.set(schemaKey, schema);
    }
  }

  private forget(runKey: string, schemaKey: string) {
    if (runKey) this.runs.delete(runKey);
    this.schemas.delete(schemaKey);
  }

  private runTarget(context: repo.IngestContext, runId: string, targetEventId: string | undefined): Target {
    const run = context.run;
    if (!run) throw notFound("run");
    if (targetEventId && !context.targetEventFound) throw notFound(`event ${targetEventId} in run ${runId}`);
    return {
      runId,
      projectId: run.project_id,
      lineagePath: run.lineage_path,
      targetEventId: targetEventId || null,
      range: null,
    };
  }

  private projectTarget(context: repo.IngestContext, projectId: string): Target {
    if (!context.projectFound) throw notFound("project");
    return { runId: null, projectId, lineagePath: "", targetEventId: null, range: null };
  }

  /** Validates the payload against the schema and builds the row to store (no I/O). */
  private prepare(
    cred: Credential,
    input: { schema_name: string; payload_json: string; event_id?: string | undefined },
    target: Target,
    schema: repo.IngestContext["schema"],
  ): Prepared {
    if (input.event_id !== undefined && !isUlid(input.event_id)) {
      throw invalid("event_id must be a 26-character ULID (Crockford base32, upper case)");
    }
    let payload: unknown;
    try {
      payload = JSON.parse(input.payload_json);
    } catch {
      throw invalid("payload_json is not valid JSON");
    }
    if (payload === null || typeof payload !== "object" || Array.isArray(payload)) {
      throw invalid("payload_json must be a JSON object");
    }
    // The payload is stored as jsonb, which refuses `\u0000` and lone surrogates (escaped or not).
    const problem = findTextProblem(payload, "body.payload_json");
    if (problem) throw invalid(`${problem.path}: ${problem.problem}`);
    const object = payload as Record<string, unknown>;
    const reserved = Object.keys(object).filter((key) => key.startsWith(RESERVED_PREFIX));
    if (reserved.length > 0) {
      throw invalid(`payload keys under "${RESERVED_PREFIX}" are reserved for the platform: ${reserved.join(", ")}`);
    }
    if (!schema) throw notFound(`annotation schema "${input.schema_name}"`);
    const validate = validatorFor(schema.id, schema.json_schema);
    if (!validate(object)) {
      throw invalid(
        `payload_json does not match ${schema.name} version ${schema.version}: ${describe(validate.errors ?? [])}`,
      );
    }

    const contentHash = sha256Hex(
      canonicalJson({
        schema: input.schema_name,
        payload: input.payload_json,
        run: target.runId,
        project: target.projectId,
        target: target.targetEventId,
        range: target.range,
      }),
    );
    const eventId = input.event_id ?? newUlid();

    const identity = schema.promoted_fields
      .filter((p) => p.identity)
      .map((p) => [p.field, ownValue(object, p.field) ?? null]);
    const supersessionKey = sha256Hex(
      canonicalJson([
        input.schema_name,
        target.runId ?? "",
        target.runId ? "" : target.projectId,
        target.targetEventId ?? "",
        target.range ? [target.range.startNs, target.range.endNs] : "",
        identity,
      ]),
    );
    const slots: repo.AnnotationInsert["slots"] = {};
    for (const promoted of schema.promoted_fields) {
      slots[promoted.slot as repo.SlotColumn] = promotedText(ownValue(object, promoted.field));
    }
    const row: repo.AnnotationInsert = {
      orgId: cred.orgId,
      eventId,
      projectId: target.projectId,
      runId: target.runId,
      lineagePath: target.lineagePath,
      tsWallNs: this.clock.nowNs(),
      schemaName: input.schema_name,
      schemaVersion: schema.version,
      principal: cred.principalId,
      payloadText: input.payload_json,
      contentHash,
      supersessionKey,
      targetEventId: target.targetEventId,
      range: target.range,
      slots,
    };
    return { row, contentHash };
  }

  /** Stores a prepared annotation; null when the guard found the target or schema changed (nothing written). */
  private async insert(
    q: Queryable,
    cred: Credential,
    { row, contentHash }: Prepared,
    guard: repo.WriteGuard,
    schema: LiveSchema,
    batched: boolean,
  ): Promise<{ event_id: string } | null> {
    // A caller-minted event id that is already taken writes nothing: the same content is a
    // retry (the stored annotation's id), anything else a conflict. Should the taken row
    // vanish before it is read back, the write is simply tried again.
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      const write: repo.GuardedWrite = { row, guard, schemaId: schema.id };
      const result = batched ? await this.writer.write(repo.encodeWrite(write)) : await repo.insertAnnotation(q, write);
      if (result === "stale") return null;
      if (result === "inserted") {
        this.metrics?.annotationIngested(row.range ? "range" : "point");
        return { event_id: row.eventId };
      }
      const existing = await repo.findEvent(q, cred.orgId, row.eventId);
      if (existing) return this.sameOrConflict(existing, contentHash);
    }
    throw new AppError("unavailable", "the annotation could not be written; retry");
  }

  /**
   * A filter naming a run, project, event or schema the organization cannot see is 404, as a
   * direct read of it is, rather than an empty list (docs/api-decisions.md "List filters").
   */
  private async requireVisibleFilters(orgId: string, input: ListInput): Promise<void> {
    if (input.run_id && !(await this.runService.find(this.db, orgId, input.run_id))) throw notFound("run");
    if (input.project_id && !(await this.projects.find(this.db, orgId, input.project_id))) {
      throw notFound("project");
    }
    if (input.target_event_id && !(await repo.findEvent(this.db, orgId, input.target_event_id))) {
      throw notFound("event");
    }
    if (input.schema_name && !(await schemaRepo.latestVersion(this.db, orgId, input.schema_name))) {
      throw notFound("annotation schema");
    }
  }

  private sameOrConflict(existing: repo.StoredEvent, contentHash: string): { event_id: string } {
    if (existing.kind === "annotation" && existing.content_hash === contentHash) return { event_id: existing.event_id };
    throw new AppError(
      "already_exists",
      `event_id ${existing.event_id} is already used for different content; mint a new event_id for new content`,
    );
  }

  async list(cred: Credential, input: ListInput): Promise<ListAnnotationsJson> {
    requireOrgScoped(cred, "list annotations");
    await this.requireVisibleFilters(cred.orgId, input);
    const history = input.history ?? false;
    const kind = history ? "annotations-history" : "annotations";
    const key = decodePageToken(kind, input.pageToken, 2);
    const slotEquals: [repo.SlotColumn, string][] = [];
    const promotedNames = Object.keys(input.promoted);
    if (promotedNames.length > 0) {
      if (!input.schema_name) throw invalid("filters on promoted fields need schema_name");
      const live = await schemaRepo.latestVersion(this.db, cred.orgId, input.schema_name);
      for (const field of promotedNames) {
        const promoted = live?.promoted_fields.find((p) => p.field === field);
        if (!promoted?.bloom) throw invalid(`"${field}" is not a bloom-indexed promoted field of ${input.schema_name}`);
        slotEquals.push([promoted.slot as repo.SlotColumn, input.promoted[field] as string]);
      }
    }
    const filter: repo.AnnotationFilter = {
      runId: input.run_id,
      projectId: input.project_id,
      schemaName: input.schema_name,
      targetEventId: input.target_event_id,
      slotEquals,
      after: key ? { tsNs: key[0] as string, eventId: key[1] as string } : null,
      limit: input.pageSize + 1,
    };
    if (filter.after && !/^\d+$/.test(filter.after.tsNs)) throw invalid("page_token is not a token this list issued");
    const rows = history
      ? await repo.listHistory(this.db, cred.orgId, filter)
      : await repo.listLatest(this.db, cred.orgId, filter);
    const page = rows.slice(0, input.pageSize);
    const annotations: AnnotationJson[] = [];
    const skipped: { event_id: string; reason: string }[] = [];
    let superseded = 0n;
    for (const row of page) {
      const decoded = decodeRow(row);
      if (decoded.ok) annotations.push(decoded.view);
      else skipped.push({ event_id: row.event_id, reason: decoded.reason });
      if (!history && row.superseded_count) superseded += BigInt(row.superseded_count);
    }
    const last = page[page.length - 1];
    return {
      annotations,
      skipped,
      superseded_count: superseded.toString(),
      next_page_token:
        rows.length > input.pageSize && last ? encodePageToken(kind, [last.ts_wall_ns, last.event_id]) : "",
    };
  }
}
