// The acting principal, resolved from the bearer credential at the API edge (contract 5).
// A credential carries its organization, its principal and, for sandbox-scoped keys, the
// sandbox and lineage it is confined to.
import { AppError } from "../../lib/errors.js";

export type PrincipalKind = "user" | "service_account" | "workload";
export type Role = "owner" | "admin" | "member";

export interface Credential {
  orgId: string;
  orgSlug: string;
  orgIsOperator: boolean;
  principalId: string;
  principalKind: PrincipalKind;
  role: Role;
  email: string;
  keyId: string;
  keyName: string;
  workloadName: string;
  /** The key's default project, used when a request names none. */
  projectId: string | null;
  /** Present only on sandbox-scoped credentials. */
  sandbox: { sandboxId: string; lineagePath: string } | null;
  /**
   * Present only on a console session (the browser's cookie): its own id and expiry. keyId and
   * keyName are then those of the API key it was exchanged for, whose authority it carries.
   */
  session?: { sessionId: string; expiresAt: Date } | null;
}

const ROLE_RANK: Record<Role, number> = { member: 0, admin: 1, owner: 2 };

/** Management routes refuse sandbox-scoped credentials (contract 5.6, 5.8). */
export function requireOrgScoped(cred: Credential, action: string): void {
  if (cred.sandbox) throw new AppError("permission_denied", `a sandbox-scoped credential may not ${action}`);
}

export function requireRole(cred: Credential, minimum: Role, action: string): void {
  requireOrgScoped(cred, action);
  if (ROLE_RANK[cred.role] < ROLE_RANK[minimum]) {
    throw new AppError("permission_denied", `${action} requires the ${minimum} role or higher`);
  }
}

export function hasRole(cred: Credential, minimum: Role): boolean {
  return ROLE_RANK[cred.role] >= ROLE_RANK[minimum];
}
