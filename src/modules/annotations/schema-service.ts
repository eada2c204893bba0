// The annotation-schema registry: immutable, monotonically versioned schemas per
// organization and name. A new version must accept everything the latest live version
// accepted (checked by compat.ts) and keep every promoted field with its type and flags.

import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import { newId } from "../../lib/ids.js";
import type { Db, Queryable } from "../../store/db.js";
import { type Credential, requireOrgScoped, requireRole } from "../identity/credential.js";
import { checkBackwardCompatible, findRemoteRefs } from "./compat.js";
import { parseSchemaDocument } from "./json-schema.js";
import * as repo from "./schema-repo.js";
import type { AnnotationSchemaJson, RegisterAnnotationSchemaBody } from "./schemas.js";

export const MAX_PROMOTED_SLOTS = 8;
export const RESERVED_PREFIX = "svc.annotation.";

export function schemaView(row: repo.SchemaRow): AnnotationSchemaJson {
  const view: AnnotationSchemaJson = {
    id: row.id,
    name: row.name,
    version: String(row.version),
    description: row.description,
    json_schema: row.json_schema,
    promoted_fields: row.promoted_fields,
    created_at: row.created_at.toISOString(),
  };
  if (row.archived_at) view.archived_at = row.archived_at.toISOString();
  return view;
}

/** The declared JSON type(s) of a top-level property, as a stable string ("" when unconstrained). */
function propertyType(doc: unknown, field: string): string | null {
  if (typeof doc !== "object" || doc === null) return null;
  const props = (doc as { properties?: Record<string, unknown> }).properties;
  // Own keys only: `toString` is "in" every object, declared or not.
  if (!props || typeof props !== "object" || !Object.hasOwn(props, field)) return null;
  const prop = props[field];
  if (typeof prop !== "object" || prop === null) return "";
  const type = (prop as { type?: unknown }).type;
  return type === undefined ? "" : JSON.stringify(Array.isArray(type) ? [...type].sort() : type);
}

function parseVersion(version: string | undefined): number {
  if (version === undefined || version === "" || version === "0") return 0;
  if (!/^[1-9]\d{0,8}$/.test(version))
    throw new AppError("invalid_argument", "version must be a positive decimal string");
  return Number(version);
}

export class AnnotationSchemaService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  async register(cred: Credential, input: RegisterAnnotationSchemaBody): Promise<AnnotationSchemaJson> {
    requireOrgScoped(cred, "register annotation schemas");
    const doc = parseSchemaDocument(input.json_schema, findRemoteRefs);
    const requested = input.promoted_fields ?? [];
    const fields = new Set<string>();
    for (const [i, promoted] of requested.entries()) {
      if (fields.has(promoted.field))
        throw new AppError("invalid_argument", `promoted_fields[${i}]: "${promoted.field}" is listed twice`);
      fields.add(promoted.field);
      if (promoted.field.startsWith(RESERVED_PREFIX)) {
        throw new AppError("invalid_argument", `promoted_fields[${i}]: "${RESERVED_PREFIX}" keys are reserved`);
      }
      if (propertyType(doc, promoted.field) === null) {
        throw new AppError(
          "invalid_argument",
          `promoted_fields[${i}]: "${promoted.field}" must be a top-level property declared in json_schema`,
        );
      }
    }
    return this.db.tx(async (q) => {
      await repo.lockSchemaName(q, cred.orgId, input.name);
      const newest = await repo.latestVersion(q, cred.orgId, input.name);
      const live = await repo.latestLive(q, cred.orgId, input.name);
      if (live) this.checkEvolution(live, doc, requested);
      const promoted = await this.assignSlots(q, cred.orgId, input.name, requested);
      const row: repo.SchemaRow = {
        id: newId("sch"),
        org_id: cred.orgId,
        name: input.name,
        version: (newest?.version ?? 0) + 1,
        description: input.description ?? "",
        json_schema: input.json_schema,
        promoted_fields: promoted,
        created_by: cred.principalId,
        created_at: this.clock.now(),
        archived_at: null,
      };
      await repo.insertSchema(q, row);
      return schemaView(row);
    });
  }

  private checkEvolution(
    live: repo.SchemaRow,
    doc: unknown,
    requested: NonNullable<RegisterAnnotationSchemaBody["promoted_fields"]>,
  ) {
    const incompatibilities: { pointer: string; rule: string; message: string }[] = [];
    const result = checkBackwardCompatible(JSON.parse(live.json_schema), doc);
    incompatibilities.push(...result.incompatibilities);
    const oldDoc: unknown = JSON.parse(live.json_schema);
    for (const previous of live.promoted_fields) {
      const now = requested.find((p) => p.field === previous.field);
      const pointer = `/properties/${previous.field.replace(/~/g, "~0").replace(/\//g, "~1")}`;
      if (!now) {
        incompatibilities.push({
          pointer,
          rule: "promoted_field_removed",
          message: `promoted field "${previous.field}" cannot be removed`,
        });
      } else if ((now.identity ?? false) !== previous.identity || (now.bloom ?? false) !== previous.bloom) {
        incompatibilities.push({
          pointer,
          rule: "promoted_field_changed",
          message: `promoted field "${previous.field}" cannot change its identity or bloom flags`,
        });
      } else if (propertyType(oldDoc, previous.field) !== propertyType(doc, previous.field)) {
        incompatibilities.push({
          pointer,
          rule: "promoted_field_retyped",
          message: `promoted field "${previous.field}" cannot change its type`,
        });
      }
    }
    if (incompatibilities.length > 0) {
      throw new AppError(
        "failed_precondition",
        `version is not backward compatible with version ${live.version}: ${incompatibilities.map((i) => `${i.pointer || "/"} (${i.rule})`).join(", ")}`,
        { details: { incompatibilities, against_version: String(live.version) } },
      );
    }
  }

  private async assignSlots(
    q: Queryable,
    orgId: string,
    name: string,
    requested: NonNullable<RegisterAnnotationSchemaBody["promoted_fields"]>,
  ): Promise<repo.PromotedField[]> {
    const slots = await repo.slotsOf(q, orgId, name);
    const out: repo.PromotedField[] = [];
    for (const promoted of requested) {
      let slot = slots.get(promoted.field);
      if (slot === undefined) {
        slot = Math.max(0, ...slots.values()) + 1;
        if (slot > MAX_PROMOTED_SLOTS) {
          throw new AppError(
            "invalid_argument",
            `a schema name can promote at most ${MAX_PROMOTED_SLOTS} fields over its life`,
          );
        }
        await repo.insertSlot(q, orgId, name, promoted.field, slot);
        slots.set(promoted.field, slot);
      }
      out.push({
        field: promoted.field,
        identity: promoted.identity ?? false,
        bloom: promoted.bloom ?? false,
        slot: `p${slot}`,
      });
    }
    return out;
  }

  async get(cred: Credential, name: string, version: string | undefined): Promise<AnnotationSchemaJson> {
    requireOrgScoped(cred, "read annotation schemas");
    const wanted = parseVersion(version);
    const row = wanted
      ? await repo.byVersion(this.db, cred.orgId, name, wanted)
      : await repo.latestLive(this.db, cred.orgId, name);
    if (!row) throw notFound(`annotation schema "${name}"${wanted ? ` version ${wanted}` : ""}`);
    return schemaView(row);
  }

  async list(cred: Credential, includeArchived: boolean): Promise<AnnotationSchemaJson[]> {
    requireOrgScoped(cred, "list annotation schemas");
    const rows = includeArchived
      ? await repo.listAll(this.db, cred.orgId)
      : await repo.listLatestLive(this.db, cred.orgId);
    return rows.map(schemaView);
  }

  async archive(cred: Credential, name: string, version: string | undefined): Promise<AnnotationSchemaJson> {
    requireRole(cred, "admin", "archive annotation schemas");
    const wanted = parseVersion(version);
    return this.db.tx(async (q) => {
      const row = wanted
        ? await repo.byVersion(q, cred.orgId, name, wanted)
        : await repo.latestLive(q, cred.orgId, name);
      if (!row) throw notFound(`annotation schema "${name}"${wanted ? ` version ${wanted}` : ""}`);
      return schemaView(await repo.archive(q, row.id, this.clock.now()));
    });
  }

  /** The latest live version, which annotations are validated against. */
  async liveForIngest(q: Queryable, orgId: string, name: string): Promise<repo.SchemaRow> {
    const row = await repo.latestLive(q, orgId, name);
    if (!row) throw notFound(`annotation schema "${name}"`);
    return row;
  }
}
