// The admin commands: create organizations and API keys of every kind and role, revoke keys,
// set quota limits and egress allowlists, rotate the master key, quarantine sandboxes, drain,
// cordon and uncordon hosts, sweep the
// runtime's host state (`runtime sweep`, on this host, never through a server). `warren admin ...` (the
// warren CLI, packages/cli) and `npm run admin -- ...` run the same commands. While a server
// runs on the data dir (PGlite admits one process) or when WARREN_ADMIN_URL is set, they go
// through the server's /v1/admin routes with an operator owner key (WARREN_API_KEY);
// otherwise the store is opened directly (admin-client.ts).
import path from "node:path";
import { Command, InvalidArgumentError } from "commander";
import { loadConfig } from "../config.js";
import type { AdminCreateApiKeyBody } from "../modules/admin/schemas.js";
import type { AdminClient } from "./admin-client.js";

function parseLimit(value: string): number | null {
  if (value === "default") return null;
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('a whole number, or "default"');
  return Number(value);
}

async function withClient(action: (client: AdminClient) => Promise<unknown>): Promise<void> {
  const { openClient } = await import("./admin-client.js");
  const client = await openClient(loadConfig());
  try {
    process.stdout.write(`${JSON.stringify(await action(client), null, 2)}\n`);
  } finally {
    await client.close();
  }
}

/** The admin commands, as `warren admin ...` (packages/cli) and `npm run admin -- ...`. */
export function adminCommand(name = "admin"): Command {
  const program = new Command(name).description("administer a Warren deployment (operator)").showHelpAfterError();

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
  const hosts = program.command("host").description("the hosts of the deployment (docs/hosts.md)");
  hosts
    .command("list")
    .description("every host: state, heartbeat age, live sandboxes, warm pool, pending replications, drained")
    .action(() => withClient((client) => client.listHosts()));
  const hostActions = {
    drain:
      "placement skips the host, its warm pool empties and its pending replications finish (`drained` in the list)",
    cordon: "placement skips the host; nothing else changes",
    uncordon: "return a draining or cordoned host to ready",
  } as const;
  for (const [action, description] of Object.entries(hostActions) as [keyof typeof hostActions, string][]) {
    hosts
      .command(`${action} <hostId>`)
      .description(description)
      .action((hostId: string) => withClient((client) => client.hostAction(hostId, action)));
  }
  const runtime = program.command("runtime").description("the host state of the local sandbox runtime");
  runtime
    .command("sweep")
    .description(
      "with the server stopped: end the sandboxes' processes and release what the runtime holds on the host " +
        "(the storage pool's loop mount, mounts, the nftables table, veths, namespaces, cgroups); " +
        "files stay and the next start runs the sandboxes again",
    )
    .option("--purge", "also destroy every sandbox and remove the runtime root (retiring it)")
    .action(async (options: { purge?: boolean }) => {
      const { sweepRuntime } = await import("./runtime-sweep.js");
      process.stdout.write(`${JSON.stringify(await sweepRuntime(loadConfig(), options.purge === true), null, 2)}\n`);
    });
  return program;
}

if (process.argv[1] && path.resolve(process.argv[1]) === new URL(import.meta.url).pathname) {
  adminCommand("warren-admin")
    .parseAsync()
    .catch((error: unknown) => {
      process.stderr.write(`warren-admin: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(1);
    });
}
