// Workload identities: registration open to any member, ACL and deletion for owners and
// admins, cloud federation registrations with server-derived audiences, and the launch
// check StartRun uses for execute_as_workload.

import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import { newId } from "../../lib/ids.js";
import { decodePageToken, encodePageToken } from "../../lib/page-token.js";
import type { Db, Queryable } from "../../store/db.js";
import { type Credential, requireOrgScoped, requireRole } from "../identity/credential.js";
import type { WorkloadLaunchPolicy } from "../runs/service.js";
import { deriveAudience, normalizeDescriptor } from "./federation.js";
import * as repo from "./repo.js";
import type {
  AddWorkloadFederationBody,
  CreateWorkloadBody,
  FederationConfigJson,
  ListWorkloadsJson,
  SetWorkloadLaunchAclBody,
  WorkloadJson,
} from "./schemas.js";

export const MAX_LAUNCHERS = 200;

/** The workload of that name in the organization, or null; for other modules, in their transaction. */
export function findWorkload(q: Queryable, orgId: string, name: string): Promise<repo.WorkloadRow | null> {
  return repo.getWorkload(q, orgId, name);
}

/** Whether a grant subject exists in the organization (secret grants name users, service-account keys and workloads). */
export async function grantSubjectExists(
  q: Queryable,
  orgId: string,
  kind: "user" | "service_account" | "workload",
  id: string,
): Promise<boolean> {
  if (kind === "user") return repo.userPrincipalExists(q, orgId, id);
  if (kind === "service_account") return repo.serviceAccountKeyExists(q, orgId, id);
  return (await repo.getWorkloadById(q, orgId, id)) !== null;
}

function federationView(row: repo.FederationRow): FederationConfigJson {
  return {
    id: row.id,
    workload_id: row.workload_id,
    cloud: row.cloud,
    audience: row.audience,
    descriptor: row.descriptor,
    created_by: row.created_by,
    created_at: row.created_at.toISOString(),
  };
}

function workloadView(row: repo.WorkloadRow, federations: repo.FederationRow[]): WorkloadJson {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    launch_acl: { policy: row.launch_policy, launchers: row.launchers },
    federation_configs: federations.map(federationView),
    created_by: row.created_by,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** Whether a credential matches a launcher entry: users by principal id, service accounts by key id. */
export function matchesLauncher(cred: Credential, launcher: repo.Launcher): boolean {
  if (launcher.kind === "user") return cred.principalKind === "user" && cred.principalId === launcher.principal_id;
  return cred.principalKind === "service_account" && cred.keyId === launcher.principal_id;
}

export class WorkloadService implements WorkloadLaunchPolicy {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  private async load(q: Queryable, cred: Credential, name: string, forUpdate = false): Promise<repo.WorkloadRow> {
    const row = await repo.getWorkload(q, cred.orgId, name, forUpdate);
    if (!row) throw notFound(`workload "${name}"`);
    return row;
  }

  private async view(q: Queryable, row: repo.WorkloadRow): Promise<WorkloadJson> {
    return workloadView(row, await repo.listFederations(q, row.id));
  }

  async create(cred: Credential, input: CreateWorkloadBody): Promise<WorkloadJson> {
    requireOrgScoped(cred, "register workloads");
    const now = this.clock.now();
    const row: repo.WorkloadRow = {
      id: newId("wl"),
      org_id: cred.orgId,
      name: input.name,
      description: input.description ?? "",
      launch_policy: "WORKLOAD_LAUNCH_POLICY_MEMBERS",
      launchers: [],
      created_by: cred.principalId,
      created_at: now,
      updated_at: now,
    };
    if (!(await repo.insertWorkload(this.db, row))) {
      throw new AppError("already_exists", `a workload named "${input.name}" already exists`);
    }
    return workloadView(row, []);
  }

  async get(cred: Credential, name: string): Promise<WorkloadJson> {
    requireOrgScoped(cred, "read workloads");
    return this.view(this.db, await this.load(this.db, cred, name));
  }

  async list(cred: Credential, pageSize: number, pageToken: string | undefined): Promise<ListWorkloadsJson> {
    requireOrgScoped(cred, "list workloads");
    const after = decodePageToken("workloads", pageToken, 1)?.[0] ?? null;
    const rows = await repo.listWorkloads(this.db, cred.orgId, after, pageSize + 1);
    const more = rows.length > pageSize;
    const page = more ? rows.slice(0, pageSize) : rows;
    const workloads: WorkloadJson[] = [];
    for (const row of page) workloads.push(await this.view(this.db, row));
    const last = page[page.length - 1];
    return { workloads, next_page_token: more && last ? encodePageToken("workloads", [last.name]) : "" };
  }

  async delete(cred: Credential, name: string): Promise<void> {
    requireRole(cred, "admin", "delete workloads");
    if (!(await repo.deleteWorkload(this.db, cred.orgId, name))) throw notFound(`workload "${name}"`);
  }

  async setLaunchAcl(cred: Credential, name: string, acl: SetWorkloadLaunchAclBody["acl"]): Promise<WorkloadJson> {
    requireRole(cred, "admin", "set a workload launch ACL");
    if (acl.policy === "WORKLOAD_LAUNCH_POLICY_UNSPECIFIED") {
      throw new AppError("invalid_argument", "acl.policy must be WORKLOAD_LAUNCH_POLICY_MEMBERS or _RESTRICTED");
    }
    const policy = acl.policy;
    const requested = acl.launchers ?? [];
    if (policy === "WORKLOAD_LAUNCH_POLICY_MEMBERS" && requested.length > 0) {
      throw new AppError("invalid_argument", "a MEMBERS launch policy must list no launchers");
    }
    if (policy === "WORKLOAD_LAUNCH_POLICY_RESTRICTED" && requested.length === 0) {
      throw new AppError("invalid_argument", "a RESTRICTED launch policy must list at least one launcher");
    }
    return this.db.tx(async (q) => {
      const row = await this.load(q, cred, name, true);
      const launchers: repo.Launcher[] = [];
      const seen = new Set<string>();
      for (const [i, entry] of requested.entries()) {
        const kind = entry.kind === undefined || entry.kind === "" || entry.kind === "user" ? "user" : entry.kind;
        if (kind !== "user" && kind !== "service_account") {
          throw new AppError("invalid_argument", `acl.launchers[${i}].kind must be "user" or "service_account"`);
        }
        const exists =
          kind === "user"
            ? await repo.userPrincipalExists(q, cred.orgId, entry.principal_id)
            : await repo.serviceAccountKeyExists(q, cred.orgId, entry.principal_id);
        if (!exists) {
          throw new AppError(
            "invalid_argument",
            `acl.launchers[${i}]: no ${kind === "user" ? "user" : "service account key"} "${entry.principal_id}" in this organization`,
          );
        }
        const key = `${kind}:${entry.principal_id}`;
        if (!seen.has(key)) launchers.push({ kind, principal_id: entry.principal_id });
        seen.add(key);
      }
      const updated = await repo.setLaunchAcl(q, row.id, policy, launchers, this.clock.now());
      return this.view(q, updated);
    });
  }

  async addFederation(
    cred: Credential,
    name: string,
    input: Pick<AddWorkloadFederationBody, "cloud" | "descriptor">,
  ): Promise<FederationConfigJson> {
    requireRole(cred, "admin", "register workload federation");
    const descriptor = normalizeDescriptor(input.cloud, input.descriptor);
    return this.db.tx(async (q) => {
      const workload = await this.load(q, cred, name, true);
      const row: repo.FederationRow = {
        id: newId("fed"),
        org_id: cred.orgId,
        workload_id: workload.id,
        cloud: input.cloud,
        audience: deriveAudience(input.cloud, descriptor),
        descriptor,
        created_by: cred.principalId,
        created_at: this.clock.now(),
        removed_at: null,
      };
      await repo.insertFederation(q, row);
      return federationView(row);
    });
  }

  async listFederation(cred: Credential, name: string): Promise<FederationConfigJson[]> {
    requireOrgScoped(cred, "read workload federation");
    const workload = await this.load(this.db, cred, name);
    return (await repo.listFederations(this.db, workload.id)).map(federationView);
  }

  async removeFederation(cred: Credential, name: string, federationId: string): Promise<void> {
    requireRole(cred, "admin", "remove workload federation");
    await this.db.tx(async (q) => {
      const workload = await this.load(q, cred, name, true);
      const federation = await repo.getFederation(q, cred.orgId, federationId);
      if (!federation || federation.workload_id !== workload.id) throw notFound("federation config");
      await repo.removeFederation(q, federation.id, this.clock.now());
    });
  }

  /** StartRun's check: the workload exists and the caller may launch it. */
  async authorizeLaunch(q: Queryable, cred: Credential, workloadName: string): Promise<void> {
    requireOrgScoped(cred, "launch workloads");
    const workload = await this.load(q, cred, workloadName);
    if (workload.launch_policy === "WORKLOAD_LAUNCH_POLICY_MEMBERS") return;
    if (workload.launchers.some((launcher) => matchesLauncher(cred, launcher))) return;
    throw new AppError("permission_denied", `the caller is not a listed launcher of workload "${workloadName}"`);
  }
}
