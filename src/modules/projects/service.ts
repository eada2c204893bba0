// Project rules: slugs unique per organization and immutable, optimistic concurrency via
// version/If-Match, run statistics kept by RunService, deletes that refuse dependents
// unless asked to cascade. Every organization has one default project.

import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import { newId } from "../../lib/ids.js";
import { type Cursor, decodeCursor, pageOf } from "../../lib/page-token.js";
import type { Db, Queryable } from "../../store/db.js";
import { deleteProjectEvents } from "../events/service.js";
import { type Credential, requireOrgScoped, requireRole } from "../identity/credential.js";
import type { QuotaService } from "../usage/service.js";
import * as repo from "./repo.js";
import type { ProjectJson } from "./schemas.js";

export const DESCRIPTION_MAX_BYTES = 4096;
export const DEFAULT_PROJECT_SLUG = "default";

export function projectView(row: repo.ProjectRow): ProjectJson {
  const view: ProjectJson = {
    id: row.id,
    name: row.name,
    slug: row.slug,
    description: row.description,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    created_by: row.created_by,
    run_count: String(row.run_count),
    version: String(row.version),
    is_default: row.is_default,
  };
  if (row.last_run_at) view.last_run_at = row.last_run_at.toISOString();
  return view;
}

function checkDescription(description: string | undefined): void {
  if (description !== undefined && Buffer.byteLength(description, "utf8") > DESCRIPTION_MAX_BYTES) {
    throw new AppError("invalid_argument", `description must be at most ${DESCRIPTION_MAX_BYTES} bytes (4 KiB)`);
  }
}

/** Parses an If-Match header: a decimal version, optionally quoted or weak-tagged as an ETag. */
export function parseIfMatch(header: string | undefined): string | null {
  // `*` matches any current version (RFC 9110), so the update is unconditional.
  if (header === undefined || header.trim() === "*") return null;
  const match = /^\s*(?:W\/)?"?(\d{1,18})"?\s*$/.exec(header);
  if (!match?.[1]) throw new AppError("invalid_argument", 'If-Match must be the project version, e.g. "3"');
  return String(BigInt(match[1]));
}

/** What DeleteProject needs of volumes (VolumeService; set once both exist). */
export interface ProjectVolumes {
  countInProject(q: Queryable, projectId: string): Promise<number>;
  deleteInProject(q: Queryable, projectId: string): Promise<void>;
}

export class ProjectService {
  private volumes: ProjectVolumes | null = null;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly quotas: QuotaService,
  ) {
    quotas.registerMeter("projects.total", (q, orgId) => repo.countProjects(q, orgId));
  }

  useVolumes(volumes: ProjectVolumes): void {
    this.volumes = volumes;
  }

  /** The project by id in the organization, or null; inside the caller's transaction. */
  find(q: Queryable, orgId: string, id: string): Promise<repo.ProjectRow | null> {
    return repo.getProject(q, orgId, id);
  }

  /** Counts a run start on the project (run_count, last_run_at), in the run's transaction. */
  recordRunStarted(q: Queryable, projectId: string, at: Date): Promise<void> {
    return repo.recordRunStarted(q, projectId, at);
  }

  /** Creates the organization's default project; part of creating an organization. */
  async createDefault(q: Queryable, orgId: string, createdBy: string): Promise<repo.ProjectRow> {
    const now = this.clock.now();
    const row = await repo.insertProject(q, {
      id: newId("prj"),
      org_id: orgId,
      name: "Default",
      slug: DEFAULT_PROJECT_SLUG,
      description: "",
      is_default: true,
      created_at: now,
      updated_at: now,
      created_by: createdBy,
    });
    if (!row) throw new AppError("already_exists", "the organization already has a default project");
    return row;
  }

  async create(cred: Credential, input: { name: string; slug: string; description?: string }): Promise<ProjectJson> {
    requireOrgScoped(cred, "create projects");
    checkDescription(input.description);
    return this.db.tx(async (q) => {
      await this.quotas.admit(q, cred.orgId, "projects.total", 1);
      const now = this.clock.now();
      const row = await repo.insertProject(q, {
        id: newId("prj"),
        org_id: cred.orgId,
        name: input.name,
        slug: input.slug,
        description: input.description ?? "",
        is_default: false,
        created_at: now,
        updated_at: now,
        created_by: cred.principalId,
      });
      if (!row) throw new AppError("already_exists", `a project with slug "${input.slug}" already exists`);
      return projectView(row);
    });
  }

  async get(cred: Credential, id: string): Promise<ProjectJson> {
    requireOrgScoped(cred, "read projects");
    const row = await repo.getProject(this.db, cred.orgId, id);
    if (!row) throw notFound("project");
    return projectView(row);
  }

  async list(cred: Credential, pageSize: number, pageToken: string | undefined) {
    requireOrgScoped(cred, "list projects");
    const after = decodeCursor("projects", pageToken);
    const rows = await repo.listProjects(this.db, cred.orgId, after, pageSize + 1);
    const page = pageOf("projects", rows, pageSize, (row): Cursor => ({ at: row.created_at, id: row.id }));
    return { projects: page.items.map(projectView), next_page_token: page.nextPageToken };
  }

  async update(
    cred: Credential,
    id: string,
    change: { name?: string | undefined; description?: string | undefined },
    ifMatch: string | null,
  ): Promise<ProjectJson> {
    requireOrgScoped(cred, "update projects");
    checkDescription(change.description);
    const row = await repo.updateProject(this.db, cred.orgId, id, change, ifMatch, this.clock.now());
    if (row) return projectView(row);
    const current = await repo.getProject(this.db, cred.orgId, id);
    if (!current) throw notFound("project");
    throw new AppError(
      "precondition_failed",
      `the project changed meanwhile: If-Match names version ${ifMatch}, the current version is ${current.version}`,
    );
  }

  async delete(cred: Credential, id: string, cascade: boolean) {
    requireRole(cred, "admin", "delete projects");
    return this.db.tx(async (q) => {
      const project = await repo.lockProject(q, cred.orgId, id);
      if (!project) throw notFound("project");
      if (project.is_default) {
        throw new AppError("failed_precondition", "the organization's default project cannot be deleted");
      }
      const dependents = await repo.countDependents(q, id);
      const volumes = (await this.volumes?.countInProject(q, id)) ?? 0;
      const hasDependents = dependents.apiKeys + dependents.runs + volumes > 0;
      if (hasDependents && !cascade) {
        throw new AppError(
          "failed_precondition",
          `the project has ${dependents.runs} run(s), ${dependents.apiKeys} API key(s) and ${volumes} volume(s); delete with cascade=true to remove them too`,
        );
      }
      await deleteProjectEvents(q, cred.orgId, id);
      await this.volumes?.deleteInProject(q, id);
      await repo.deleteProjectCascade(q, cred.orgId, id);
      return {
        api_keys_deleted: String(dependents.apiKeys),
        runs_deleted: String(dependents.runs),
        secrets_deleted: "0",
        volumes_deleted: String(volumes),
      };
    });
  }

  /**
   * The project a request acts in: the one it names, else the credential's default project,
   * else the organization's default project.
   */
  async resolve(q: Queryable, cred: Credential, requested: string | undefined): Promise<repo.ProjectRow> {
    const id = requested || cred.projectId;
    const row = id ? await repo.getProject(q, cred.orgId, id) : await repo.getDefaultProject(q, cred.orgId);
    if (!row) throw notFound("project");
    return row;
  }
}
