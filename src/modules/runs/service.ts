// Runs form trees: a run without a parent is a root; a child inherits its parent's project
// and extends its dotted lineage path. Start and completion are written as telemetry
// events in the same transaction as the run row.

import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import { newId, newUlid } from "../../lib/ids.js";
import { type Cursor, decodeCursor, pageOf } from "../../lib/page-token.js";
import type { Db, Queryable } from "../../store/db.js";
import * as events from "../events/service.js";
import { type Credential, requireOrgScoped } from "../identity/credential.js";
import type { ProjectService } from "../projects/service.js";
import * as repo from "./repo.js";
import type { CompleteRunBody, ListRunsJson, RunJson, StartRunBody } from "./schemas.js";

export type TerminalRunStatus = CompleteRunBody["status"];

/** Decides whether a credential may run as a registered workload (WorkloadService). */
export interface WorkloadLaunchPolicy {
  authorizeLaunch(q: Queryable, cred: Credential, workloadName: string): Promise<void>;
}

/**
 * Completes a run still running, inside the caller's transaction, and records its
 * `run.completed` event (null when it was already completed). For other modules that finish a
 * run as a side effect (a sandbox's create started it).
 */
export async function completeRunIfRunning(
  q: Queryable,
  clock: Clock,
  id: string,
  status: TerminalRunStatus,
  at: Date,
): Promise<repo.RunRow | null> {
  const done = await repo.completeRunIfRunning(q, id, status, at);
  if (!done) return null;
  await events.appendEvent(q, {
    orgId: done.org_id,
    eventId: newUlid(),
    projectId: done.project_id,
    runId: done.id,
    lineagePath: done.lineage_path,
    tsWallNs: clock.nowNs(),
    name: "run.completed",
    principal: "",
    payload: { status },
  });
  return done;
}

export function runView(row: repo.RunRow): RunJson {
  const view: RunJson = {
    id: row.id,
    project_id: row.project_id,
    label: row.label,
    root_run_id: row.root_run_id,
    lineage_path: row.lineage_path,
    depth: row.depth,
    status: row.status,
    started_at: row.started_at.toISOString(),
    created_by: row.created_by,
  };
  if (row.parent_run_id) view.parent_run_id = row.parent_run_id;
  if (row.ended_at) view.ended_at = row.ended_at.toISOString();
  if (row.execute_as_workload) view.execute_as_workload = row.execute_as_workload;
  return view;
}

export class RunService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly projects: ProjectService,
    private readonly workloads: WorkloadLaunchPolicy,
  ) {}

  async start(cred: Credential, input: StartRunBody): Promise<RunJson> {
    requireOrgScoped(cred, "start runs");
    return this.db.tx((q) => this.startIn(q, cred, input));
  }

  /**
   * Starts a run inside the caller's transaction (sandboxes start their ambient run this way;
   * OTLP ingest passes the id it already recorded for a new trace).
   */
  async startIn(q: Queryable, cred: Credential, input: StartRunBody, id = newId("run")): Promise<RunJson> {
    let parent: repo.RunRow | null = null;
    if (input.parent_run_id) {
      parent = await repo.getRun(q, cred.orgId, input.parent_run_id);
      if (!parent) throw notFound("parent run");
      if (input.project_id && input.project_id !== parent.project_id) {
        throw new AppError("invalid_argument", "project_id must match the parent run's project (or be omitted)");
      }
    }
    const project = parent
      ? await this.projects.find(q, cred.orgId, parent.project_id)
      : await this.projects.resolve(q, cred, input.project_id);
    if (!project) throw notFound("project");
    const workload = input.execute_as_workload ?? "";
    if (workload) await this.workloads.authorizeLaunch(q, cred, workload);

    const startedAt = this.clock.now();
    const row: repo.RunRow = {
      id,
      org_id: cred.orgId,
      project_id: project.id,
      label: input.label ?? "",
      parent_run_id: parent?.id ?? null,
      root_run_id: parent?.root_run_id ?? id,
      lineage_path: parent ? `${parent.lineage_path}.${id}` : id,
      depth: parent ? parent.depth + 1 : 0,
      status: "running",
      started_at: startedAt,
      ended_at: null,
      created_by: cred.principalId,
      execute_as_workload: workload,
    };
    await repo.insertRun(q, row);
    await this.projects.recordRunStarted(q, project.id, startedAt);
    await events.appendEvent(q, {
      orgId: cred.orgId,
      eventId: newUlid(),
      projectId: project.id,
      runId: id,
      lineagePath: row.lineage_path,
      tsWallNs: this.clock.nowNs(),
      name: "run.started",
      principal: cred.principalId,
      payload: {
        label: row.label,
        parent_run_id: row.parent_run_id ?? "",
        execute_as_workload: workload,
      },
    });
    return runView(row);
  }

  async complete(cred: Credential, id: string, status: TerminalRunStatus): Promise<RunJson> {
    requireOrgScoped(cred, "complete runs");
    return this.db.tx(async (q) => {
      const run = await repo.getRun(q, cred.orgId, id, true);
      if (!run) throw notFound("run");
      if (run.status !== "running") {
        throw new AppError("failed_precondition", `the run is already completed with status ${run.status}`);
      }
      const done = await repo.completeRun(q, id, status, this.clock.now());
      await events.appendEvent(q, {
        orgId: cred.orgId,
        eventId: newUlid(),
        projectId: run.project_id,
        runId: id,
        lineagePath: run.lineage_path,
        tsWallNs: this.clock.nowNs(),
        name: "run.completed",
        principal: cred.principalId,
        payload: { status },
      });
      return runView(done);
    });
  }

  /** A run of the organization, or null (for other modules' filters). */
  find(q: Queryable, orgId: string, id: string): Promise<repo.RunRow | null> {
    return repo.getRun(q, orgId, id);
  }

  async get(cred: Credential, id: string): Promise<RunJson> {
    requireOrgScoped(cred, "read runs");
    const run = await repo.getRun(this.db, cred.orgId, id);
    if (!run) throw notFound("run");
    return runView(run);
  }

  async list(
    cred: Credential,
    filter: { projectId?: string | undefined; parentRunId?: string | undefined },
    pageSize: number,
    pageToken: string | undefined,
  ): Promise<ListRunsJson> {
    requireOrgScoped(cred, "list runs");
    const after = decodeCursor("runs", pageToken);
    // A filter naming a project or run the organization cannot see is 404, as a direct read
    // of it is, rather than an empty list (docs/api-decisions.md "List filters").
    if (filter.projectId && !(await this.projects.find(this.db, cred.orgId, filter.projectId))) {
      throw notFound("project");
    }
    if (filter.parentRunId && !(await repo.getRun(this.db, cred.orgId, filter.parentRunId))) throw notFound("run");
    const rows = await repo.listRuns(this.db, cred.orgId, filter, after, pageSize + 1);
    const page = pageOf("runs", rows, pageSize, (row): Cursor => ({ at: row.started_at, id: row.id }));
    return { runs: page.items.map(runView), next_page_token: page.nextPageToken };
  }
}
