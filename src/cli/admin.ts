// `npm run admin -- <command>`: create organizations and API keys of every kind and role,
// revoke keys, set quota limits and egress allowlists. While a server runs on the data dir (PGlite admits one
// process) or when WARREN_ADMIN_URL is set, it goes through the server's /v1/admin routes
// with an operator owner key (WARREN_API_KEY); otherwise it opens the store directly.
import { Writable } from "node:stream";
import { Command, InvalidArgumentError } from "commander";
import { type Config, loadConfig } from "../config.js";
import { createContainer, openStore } from "../container.js";
import { createLogger } from "../lib/logger.js";
import { readServerLock } from "../lib/server-lock.js";
import type { AdminCreateApiKeyBody } from "../modules/admin/schemas.js";
import { bootstrapNotice } from "../modules/identity/service.js";

interface AdminClient {
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
  close(): Promise<void>;
}

class CliError extends Error {}

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
    close: () => db.close(),
  };
}

async function openClient(config: Config): Promise<AdminClient> {
  if (config.adminUrl) return httpClient(config.adminUrl, config.adminApiKey);
  if (!config.databaseUrl) {
    const lock = await readServerLock(config.dataDir);
    if (lock) return httpClient(lock.url, config.adminApiKey);
  }
  return directClient(config);
}

function parseLimit(value: string): number | null {
  if (value === "default") return null;
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('a whole number, or "default"');
  return Number(value);
}

async function withClient(action: (client: AdminClient) => Promise<unknown>): Promise<void> {
  const client = await openClient(loadConfig());
  try {
    process.stdout.write(`${JSON.stringify(await action(client), null, 2)}\n`);
  } finally {
    await client.close();
  }
}

const program = new Command("warren-admin").description("Administer a Warren deployment").showHelpAfterError();

const orgs = program.command("org").description("organizations");
orgs
  .command("create <slug>")
  .option("--name <name>", "display name")
  .action((slug: string, options: { name?: string }) =>
    withClient((client) => client.createOrganization(slug, options.name)),
  );
orgs.command("list").action(() => withClient((client) => client.listOrganizations()));

const keys = program.command("key").description("API keys (the secret is printed once)");
keys
  .command("create")
  .requiredOption("--org <org>", "organization id or slug")
  .requiredOption("--name <name>", "key name")
  .option("--kind <kind>", "user | service_account | workload", "service_account")
  .option("--role <role>", "owner | admin | member", "member")
  .option("--email <email>", "email of a user principal")
  .option("--workload <name>", "workload name of a workload principal")
  .option("--principal <id>", "issue the key to an existing principal")
  .option("--project <id>", "the key's default project")
  .action(
    (options: {
      org: string;
      name: string;
      kind: AdminCreateApiKeyBody["kind"];
      role: AdminCreateApiKeyBody["role"];
      email?: string;
      workload?: string;
      principal?: string;
      project?: string;
    }) =>
      withClient((client) =>
        client.createKey({
          organization: options.org,
          name: options.name,
          ...(options.principal
            ? { principal_id: options.principal }
            : {
                kind: options.kind,
                role: options.role,
                ...(options.email ? { email: options.email } : {}),
                ...(options.workload ? { workload_name: options.workload } : {}),
              }),
          ...(options.project ? { project_id: options.project } : {}),
        }),
      ),
  );
keys
  .command("list")
  .requiredOption("--org <org>", "organization id or slug")
  .action((options: { org: string }) => withClient((client) => client.listKeys(options.org)));
keys.command("revoke <keyId>").action((keyId: string) => withClient((client) => client.revokeKey(keyId)));

program
  .command("quota")
  .description("set an organization's quota limit")
  .command("set")
  .requiredOption("--org <org>", "organization id or slug")
  .requiredOption("--metric <metric>", "e.g. sandboxes.running")
  .requiredOption("--limit <n>", 'a whole number, or "default" to use the configured default', parseLimit)
  .action((options: { org: string; metric: string; limit: number | null }) =>
    withClient((client) => client.setQuota(options.org, options.metric, options.limit)),
  );

program
  .command("rotate-master-key")
  .description("re-wrap every secret data key under a new master key (key file) or the configured WARREN_MASTER_KEY")
  .action(() => withClient((client) => client.rotateMasterKey()));

const sandboxes = program.command("sandbox").description("operator actions on sandboxes");
sandboxes
  .command("quarantine <sandboxId>")
  .option("--reason <text>", "why (shown as the sandbox's state_reason)", "")
  .action((sandboxId: string, options: { reason: string }) =>
    withClient((client) => client.quarantine(sandboxId, true, options.reason)),
  );
sandboxes
  .command("release <sandboxId>")
  .action((sandboxId: string) => withClient((client) => client.quarantine(sandboxId, false, "")));

const egress = program
  .command("egress-allowlist")
  .description("the hosts gateway_only sandboxes of an organization reach besides their secrets' hosts");
egress
  .command("get")
  .requiredOption("--org <org>", "organization id or slug")
  .action((options: { org: string }) => withClient((client) => client.egressAllowlist(options.org)));
egress
  .command("set [hosts...]")
  .description("replace the whole list (host names and *.domain wildcards; none empties it)")
  .requiredOption("--org <org>", "organization id or slug")
  .action((hosts: string[], options: { org: string }) =>
    withClient((client) => client.setEgressAllowlist(options.org, hosts)),
  );

program.parseAsync().catch((error: unknown) => {
  process.stderr.write(`warren-admin: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
