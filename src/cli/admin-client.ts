// The admin CLI's two ways to the store: through a running server's /v1/admin routes (an
// operator owner key), or the store opened directly when no server holds it. Loaded only
// when an admin command runs, so `warren` itself does not load the server's modules.
import { Writable } from "node:stream";
import type { Config } from "../config.js";
import { createContainer, openStore } from "../container.js";
import { createLogger } from "../lib/logger.js";
import { readServerLock } from "../lib/server-lock.js";
import type { AdminCreateApiKeyBody } from "../modules/admin/schemas.js";
import type { HostAction } from "../modules/hosts/directory.js";
import { bootstrapNotice } from "../modules/identity/service.js";

export interface AdminClient {
  createOrganization(slug: string, name?: string): Promise<unknown>;
  listOrganizations(): Promise<unknown>;
  createKey(input: AdminCreateApiKeyBody): Promise<unknown>;
  listKeys(organization: string): Promise<unknown>;
  revokeKey(keyId: string): Promise<unknown>;
  setQuota(organization: string, metric: string, limit: number | null): Promise<unknown>;
  rotateMasterKey(): Promise<unknown>;
  quarantine(sandboxId: string, quarantined: boolean, reason: string): Promise<unknown>;
  egressAllowlist(organization: string): Promise<unknown>;
  setEgressAllowlist(organization: string, hosts: string[]): Promise<unknown>;
  listHosts(): Promise<unknown>;
  hostAction(hostId: string, action: HostAction): Promise<unknown>;
  close(): Promise<void>;
}

export class CliError extends Error {}

function httpClient(baseUrl: string, apiKey: string): AdminClient {
  if (!apiKey) throw new CliError("going through the server needs an operator owner key in WARREN_API_KEY");
  const call = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(new URL(path, baseUrl), {
      method,
      headers: {
        authorization: `Bearer ${apiKey}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const payload = (await response.json().catch(() => ({}))) as Record<string, unknown>;
    if (!response.ok) throw new CliError(`${response.status} ${String(payload.code)}: ${String(payload.message)}`);
    return payload;
  };
  const org = (value: string) => encodeURIComponent(value);
  return {
    createOrganization: (slug, name) => call("POST", "/v1/admin/organizations", { slug, ...(name ? { name } : {}) }),
    listOrganizations: () => call("GET", "/v1/admin/organizations"),
    createKey: (input) => call("POST", "/v1/admin/api-keys", input),
    listKeys: (organization) => call("GET", `/v1/admin/organizations/${org(organization)}/api-keys`),
    revokeKey: (keyId) => call("POST", `/v1/admin/api-keys/${encodeURIComponent(keyId)}:revoke`),
    setQuota: (organization, metric, limit) =>
      call("PUT", `/v1/admin/organizations/${org(organization)}/quotas/${encodeURIComponent(metric)}`, { limit }),
    rotateMasterKey: () => call("POST", "/v1/admin/master-key:rotate"),
    quarantine: (sandboxId, quarantined, reason) =>
      call("POST", `/v1/admin/sandboxes/${encodeURIComponent(sandboxId)}:${quarantined ? "quarantine" : "release"}`, {
        reason,
      }),
    egressAllowlist: (organization) => call("GET", `/v1/admin/organizations/${org(organization)}/egress-allowlist`),
    setEgressAllowlist: (organization, hosts) =>
      call("PUT", `/v1/admin/organizations/${org(organization)}/egress-allowlist`, { hosts }),
    listHosts: () => call("GET", "/v1/admin/hosts"),
    hostAction: (hostId, action) => call("POST", `/v1/admin/hosts/${encodeURIComponent(hostId)}:${action}`),
    close: async () => undefined,
  };
}

async function directClient(config: Config): Promise<AdminClient> {
  const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
  const db = await openStore(config);
  const c = await createContainer(config, createLogger("error", silent), { db, runtime: null });
  const boot = await c.identity.bootstrap(config.bootstrapOrgSlug, config.bootstrapApiKey);
  if (boot.generatedKey) process.stderr.write(bootstrapNotice(config.bootstrapOrgSlug, boot.generatedKey));
  return {
    createOrganization: async (slug, name) => ({ organization: await c.admin.createOrganization(slug, name) }),
    listOrganizations: async () => ({ organizations: await c.admin.listOrganizations() }),
    createKey: (input) => c.admin.createKey(input),
    listKeys: async (organization) => ({ api_keys: await c.admin.listKeys(organization) }),
    revokeKey: async (keyId) => {
      await c.admin.revokeKey(keyId);
      return {};
    },
    setQuota: async (organization, metric, limit) => ({
      snapshot: await c.admin.setQuota(organization, metric, limit),
    }),
    rotateMasterKey: () => c.admin.rotateMasterKey(),
    quarantine: async (sandboxId, quarantined, reason) => {
      await c.admin.quarantine(sandboxId, quarantined, reason);
      return {};
    },
    egressAllowlist: (organization) => c.admin.egressAllowlist(organization),
    setEgressAllowlist: (organization, hosts) => c.admin.setEgressAllowlist(organization, hosts),
    listHosts: async () => ({ hosts: await c.admin.listHosts() }),
    hostAction: async (hostId, action) => ({ host: await c.admin.hostAction(hostId, action) }),
    close: () => db.close(),
  };
}

export async function openClient(config: Config): Promise<AdminClient> {
  if (config.adminUrl) return httpClient(config.adminUrl, config.adminApiKey);
  if (!config.databaseUrl) {
    const lock = await readServerLock(config.dataDir);
    if (lock) return httpClient(lock.url, config.adminApiKey);
  }
  return directClient(config);
}
