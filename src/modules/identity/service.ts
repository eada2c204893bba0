// Credentials: API keys are random secrets shown once and stored only as a SHA-256 hash
// (they carry 256 bits of entropy, so a slow hash adds nothing). Resolved credentials are
// cached briefly by hash; a revoke in this process evicts at once, other replicas within
// the cache TTL.

import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import { sha256Hex } from "../../lib/hash.js";
import { newApiKeySecret, newId } from "../../lib/ids.js";
import type { Db, Queryable } from "../../store/db.js";
import type { ProjectService } from "../projects/service.js";
import type { Credential, PrincipalKind, Role } from "./credential.js";
import * as repo from "./repo.js";
import type { ApiKeyInfoJson, IssuedApiKeyJson, WhoAmIJson } from "./schemas.js";

const MAX_CACHED_CREDENTIALS = 10_000;
/** Console sessions expired or revoked longer ago than this are deleted when the key opens another. */
const STALE_SESSION_RETENTION_MS = 7 * 86_400_000;

export function whoAmIView(cred: Credential): WhoAmIJson {
  return {
    organization: { id: cred.orgId, slug: cred.orgSlug },
    principal: {
      id: cred.principalId,
      kind: cred.principalKind,
      email: cred.principalKind === "user" ? cred.email : "",
      // Contract 2.9: empty for a browser session.
      key_id: cred.session ? "" : cred.keyId,
      key_name: cred.session ? "" : cred.keyName,
      workload_name: cred.workloadName,
    },
  };
}

/** An issued key; its api_key is the secret itself: returned once, never stored. */
export type IssuedKey = IssuedApiKeyJson;

export interface NewKeyInput {
  orgId: string;
  /** Reuse an existing principal of the organization, or create one of this kind and role. */
  principalId?: string | undefined;
  kind?: PrincipalKind | undefined;
  role?: Role | undefined;
  email?: string | undefined;
  displayName?: string | undefined;
  workloadName?: string | undefined;
  name: string;
  projectId?: string | undefined;
  sandbox?: { sandboxId: string; lineagePath: string } | undefined;
  /** A caller-chosen secret (the bootstrap key); generated when absent. */
  secret?: string | undefined;
}

/** The one-time notice that shows a generated bootstrap key; written outside the structured log. */
export function bootstrapNotice(orgSlug: string, key: string): string {
  return `\nWarren bootstrap: owner API key of organization "${orgSlug}" (shown once, store it now):\n\n  ${key}\n\n`;
}

export class IdentityService {
  private readonly cache = new Map<string, { cred: Credential; expiresAtMs: number }>();

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly projects: ProjectService,
    private readonly cacheTtlMs: number,
  ) {}

  /**
   * Resolves a secret to its credential; unknown, revoked or expired is UNAUTHENTICATED.
   * `as`: what the secret arrived as. A bearer header takes API keys only and the console
   * cookie console sessions only, so neither kind of secret works in the other's place.
   */
  async authenticate(secret: string, as: "key" | "session" = "key"): Promise<Credential> {
    const hash = sha256Hex(secret);
    const nowMs = Date.now();
    const hit = this.cache.get(hash);
    let cred = hit && hit.expiresAtMs > nowMs ? hit.cred : null;
    if (!cred) {
      cred = await repo.findCredentialByHash(this.db, hash, this.clock.now());
      if (!cred) {
        this.cache.delete(hash);
        throw new AppError(
          "unauthenticated",
          as === "session" ? "the console session is unknown, expired or revoked" : "the API key is unknown or revoked",
        );
      }
      if (this.cacheTtlMs > 0) {
        if (this.cache.size >= MAX_CACHED_CREDENTIALS) this.cache.clear();
        this.cache.set(hash, { cred, expiresAtMs: nowMs + this.cacheTtlMs });
      }
    }
    if (!cred.orgId) throw new AppError("unauthenticated", "the credential has no organization scope");
    // A cached session is still checked against its expiry.
    if (cred.session && cred.session.expiresAt.getTime() <= this.clock.now().getTime()) {
      this.cache.delete(hash);
      throw new AppError("unauthenticated", "the console session is unknown, expired or revoked");
    }
    if (as === "key" && cred.session) {
      throw new AppError("unauthenticated", "a console session is sent as its cookie, not as a bearer credential");
    }
    if (as === "session" && !cred.session) throw new AppError("unauthenticated", "the console cookie holds no session");
    return cred;
  }

  /**
   * Exchanges the calling API key for a console session (docs/api-decisions.md "Console
   * sessions"): a row of api_keys of the key's principal and project, expiring after
   * `ttlSeconds`, revoked with the key. Returns the secret (for the cookie only) and its row.
   */
  async openConsoleSession(
    cred: Credential,
    ttlSeconds: number,
  ): Promise<{ secret: string; sessionId: string; expiresAt: Date; createdAt: Date }> {
    if (cred.session)
      throw new AppError("permission_denied", "a console session is opened with an API key, not another session");
    if (cred.sandbox)
      throw new AppError("permission_denied", "a sandbox-scoped credential may not open a console session");
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + ttlSeconds * 1000);
    const secret = newApiKeySecret();
    const sessionId = newId("key");
    await this.db.tx(async (q) => {
      await repo.deleteStaleSessions(q, cred.keyId, new Date(now.getTime() - STALE_SESSION_RETENTION_MS));
      await repo.insertApiKey(q, {
        id: sessionId,
        org_id: cred.orgId,
        principal_id: cred.principalId,
        name: `console session (${cred.keyName || cred.keyId})`.slice(0, 200),
        key_hash: sha256Hex(secret),
        project_id: cred.projectId,
        sandbox_id: null,
        lineage_path: null,
        created_at: now,
        revoked_at: null,
        expires_at: expiresAt,
        session_of_key_id: cred.keyId,
      });
    });
    return { secret, sessionId, expiresAt, createdAt: now };
  }

  /** Revokes the calling console session (sign-out). */
  async closeConsoleSession(cred: Credential): Promise<void> {
    if (!cred.session) throw new AppError("failed_precondition", "the request carries no console session to close");
    await this.revokeKeyOf(cred.session.sessionId, cred.orgId);
  }

  /** Revokes a key or session of the organization (another organization's is not_found). */
  async revokeKeyOf(keyId: string, orgId: string | null): Promise<void> {
    const hashes = await repo.revokeApiKey(this.db, keyId, this.clock.now(), orgId);
    if (hashes.length === 0) throw notFound("API key");
    for (const hash of hashes) this.cache.delete(hash);
  }

  async createOrganization(input: { slug: string; name?: string; isOperator?: boolean }) {
    return this.db.tx(async (q) => {
      if (await repo.findOrganization(q, input.slug)) {
        throw new AppError("already_exists", `an organization with slug "${input.slug}" already exists`);
      }
      const org: repo.OrganizationRow = {
        id: newId("org"),
        slug: input.slug,
        name: input.name ?? input.slug,
        is_operator: input.isOperator ?? false,
        created_at: this.clock.now(),
      };
      await repo.insertOrganization(q, org);
      const project = await this.projects.createDefault(q, org.id, "");
      return { id: org.id, slug: org.slug, name: org.name, default_project_id: project.id, created_at: org.created_at };
    });
  }

  async findOrganization(idOrSlug: string) {
    const org = await repo.findOrganization(this.db, idOrSlug);
    if (!org) throw notFound("organization");
    return org;
  }

  listOrganizations() {
    return repo.listOrganizations(this.db);
  }

  async issueKey(input: NewKeyInput): Promise<IssuedKey> {
    return this.db.tx((q) => this.issueKeyIn(q, input));
  }

  /** Revokes every key confined to a sandbox (when the sandbox is deleted). */
  async revokeSandboxKeys(sandboxId: string): Promise<void> {
    for (const hash of await repo.revokeSandboxKeys(this.db, sandboxId, this.clock.now())) this.cache.delete(hash);
  }

  /** Issues a key inside the caller's transaction. */
  async issueKeyIn(q: Queryable, input: NewKeyInput): Promise<IssuedKey> {
    let principalId = input.principalId;
    if (principalId) {
      if (!(await repo.findPrincipal(q, input.orgId, principalId))) throw notFound("principal");
    } else {
      const kind = input.kind ?? "service_account";
      if (kind === "user" && !input.email) throw new AppError("invalid_argument", "a user principal needs an email");
      if (kind === "workload" && !input.workloadName) {
        throw new AppError("invalid_argument", "a workload principal needs a workload name");
      }
      principalId = newId("prn");
      await repo.insertPrincipal(q, {
        id: principalId,
        org_id: input.orgId,
        kind,
        role: input.role ?? "member",
        email: kind === "user" ? (input.email ?? "") : "",
        display_name: input.displayName ?? input.name,
        workload_name: kind === "workload" ? (input.workloadName ?? "") : "",
        created_at: this.clock.now(),
      });
    }
    if (input.projectId && !(await this.projects.find(q, input.orgId, input.projectId))) {
      throw notFound("project");
    }
    const secret = input.secret ?? newApiKeySecret();
    const keyId = newId("key");
    await repo.insertApiKey(q, {
      id: keyId,
      org_id: input.orgId,
      principal_id: principalId,
      name: input.name,
      key_hash: sha256Hex(secret),
      project_id: input.projectId ?? null,
      sandbox_id: input.sandbox?.sandboxId ?? null,
      lineage_path: input.sandbox?.lineagePath ?? null,
      created_at: this.clock.now(),
      revoked_at: null,
    });
    return { key_id: keyId, key_name: input.name, principal_id: principalId, org_id: input.orgId, api_key: secret };
  }

  /** Revokes any organization's key (the operator's route) and the sessions exchanged for it. */
  revokeKey(keyId: string): Promise<void> {
    return this.revokeKeyOf(keyId, null);
  }

  async listKeys(orgId: string): Promise<ApiKeyInfoJson[]> {
    const rows = await repo.listApiKeys(this.db, orgId);
    return rows.map((row) => ({
      key_id: row.id,
      key_name: row.name,
      principal_id: row.principal_id,
      kind: row.kind,
      role: row.role,
      email: row.email,
      workload_name: row.workload_name,
      project_id: row.project_id ?? "",
      created_at: row.created_at.toISOString(),
      revoked_at: row.revoked_at ? row.revoked_at.toISOString() : "",
      expires_at: row.expires_at ? row.expires_at.toISOString() : "",
      session_of_key_id: row.session_of_key_id ?? "",
    }));
  }

  /**
   * First start: with an empty store, create the operator organization `default` and an
   * owner key. Returns the key only when this call generated it (so it can be shown once).
   */
  /**
   * `configuredKeyIgnored`: the store was bootstrapped before and the configured secret is no
   * key of it (a different WARREN_BOOTSTRAP_API_KEY on an existing data dir), so it opens nothing.
   */
  async bootstrap(
    slug: string,
    configuredSecret: string,
  ): Promise<{ created: boolean; generatedKey: string; configuredKeyIgnored: boolean }> {
    if ((await repo.countOrganizations(this.db)) > 0) {
      const known = configuredSecret
        ? await this.authenticate(configuredSecret).then(
            () => true,
            () => false,
          )
        : true;
      return { created: false, generatedKey: "", configuredKeyIgnored: !known };
    }
    const org = await this.createOrganization({ slug, name: slug, isOperator: true });
    const issued = await this.issueKey({
      orgId: org.id,
      kind: "user",
      role: "owner",
      email: "owner@localhost",
      displayName: "Bootstrap owner",
      name: "bootstrap",
      secret: configuredSecret || undefined,
    });
    return { created: true, generatedKey: configuredSecret ? "" : issued.api_key, configuredKeyIgnored: false };
  }
}
