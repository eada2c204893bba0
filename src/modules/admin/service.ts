// Operator administration: organizations, API keys of every kind and role, quota limits, hosts.
// The same functions back the /v1/admin routes and the admin CLI's direct mode.
import { AppError, denied } from "../../lib/errors.js";
import type { EgressAllowlistService } from "../egress/service.js";
import type { HostAction, HostDirectory } from "../hosts/directory.js";
import type { Credential } from "../identity/credential.js";
import type { IdentityService } from "../identity/service.js";
import type { SandboxService } from "../sandboxes/service.js";
import type { SecretService } from "../secrets/service.js";
import { isQuotaMetric, type QuotaService } from "../usage/service.js";
import type { AdminCreateApiKeyBody, OrganizationJson } from "./schemas.js";

export class AdminService {
  constructor(
    private readonly identity: IdentityService,
    private readonly quotas: QuotaService,
    private readonly secrets: SecretService,
    private readonly sandboxes: SandboxService,
    private readonly egress: EgressAllowlistService,
    private readonly hosts: HostDirectory,
  ) {}

  /** Every host of the deployment, with what tells a drained one. */
  listHosts() {
    return this.hosts.list();
  }

  /** Drain, cordon or uncordon a host (docs/hosts.md "Draining"). */
  hostAction(hostId: string, action: HostAction) {
    return this.hosts.act(hostId, action);
  }

  /** The organization's egress allowlist (what gateway_only sandboxes reach besides their secrets' hosts). */
  async egressAllowlist(organization: string) {
    const org = await this.identity.findOrganization(organization);
    return { organization_id: org.id, hosts: await this.egress.list(org.id) };
  }

  async setEgressAllowlist(organization: string, hosts: string[]) {
    const org = await this.identity.findOrganization(organization);
    return { organization_id: org.id, hosts: await this.egress.replace(org.id, hosts) };
  }

  /** Quarantine freezes a sandbox: the reconciler leaves it be and every mutating verb is 409. */
  quarantine(sandboxId: string, quarantined: boolean, reason: string) {
    return this.sandboxes.setQuarantine(sandboxId, quarantined, reason);
  }

  /** Re-wraps every secret data key under the current (or, with a key file, a new) master key. */
  rotateMasterKey() {
    return this.secrets.rotateMasterKey();
  }

  /** Admin routes are for owners of the operator organization only. */
  authorize(cred: Credential): void {
    if (cred.sandbox || !cred.orgIsOperator || cred.role !== "owner") {
      throw denied("administration requires an owner key of the operator organization");
    }
  }

  async createOrganization(slug: string, name: string | undefined): Promise<OrganizationJson> {
    const org = await this.identity.createOrganization({ slug, name });
    return { ...org, created_at: org.created_at.toISOString() };
  }

  async listOrganizations(): Promise<OrganizationJson[]> {
    const rows = await this.identity.listOrganizations();
    return rows.map((org) => ({
      id: org.id,
      slug: org.slug,
      name: org.name,
      is_operator: org.is_operator,
      created_at: org.created_at.toISOString(),
    }));
  }

  async createKey(input: AdminCreateApiKeyBody) {
    const org = await this.identity.findOrganization(input.organization);
    return this.identity.issueKey({
      orgId: org.id,
      name: input.name,
      kind: input.kind,
      role: input.role,
      email: input.email,
      workloadName: input.workload_name,
      principalId: input.principal_id,
      projectId: input.project_id,
    });
  }

  async listKeys(organization: string) {
    const org = await this.identity.findOrganization(organization);
    return this.identity.listKeys(org.id);
  }

  revokeKey(keyId: string) {
    return this.identity.revokeKey(keyId);
  }

  async setQuota(organization: string, metric: string, limit: number | null) {
    if (!isQuotaMetric(metric)) throw new AppError("invalid_argument", `unknown quota metric "${metric}"`);
    const org = await this.identity.findOrganization(organization);
    await this.quotas.setLimit(org.id, metric, limit);
    return this.quotas.snapshot(org.id);
  }
}
