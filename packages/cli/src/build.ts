// The `warren` command tree (README "CLI"): one commander program with the API commands
// (through the SDK), `warren admin ...` (src/cli/admin.ts), `warren mcp` and `warren completion`.
import { Command } from "commander";
import { adminCommand } from "../../../src/cli/admin.js";
import { registerDataCommands } from "./commands/data.js";
import { registerSandboxCommands } from "./commands/sandbox.js";
import { registerTraceCommands } from "./commands/traces.js";
import { completionScript } from "./completion.js";
import { client, type GlobalOptions, readStoredConfig, resolveTarget, UsageError } from "./context.js";
import { action, example } from "./program.js";

const ADMIN_EXAMPLES: Record<string, string> = {
  "org create": "warren admin org create acme --name 'Acme Inc.'",
  "org list": "warren admin org list",
  "key create": "warren admin key create --org acme --name ci --kind service_account --role admin",
  "key list": "warren admin key list --org acme",
  "key revoke": "warren admin key revoke key_...",
  "quota set": "warren admin quota set --org acme --metric sandboxes.running --limit 20",
  "rotate-master-key": "warren admin rotate-master-key",
  "sandbox quarantine": "warren admin sandbox quarantine sbx-... --reason 'investigating'",
  "sandbox release": "warren admin sandbox release sbx-...",
  "egress-allowlist get": "warren admin egress-allowlist get --org acme",
  "egress-allowlist set": "warren admin egress-allowlist set --org acme api.example.com '*.example.org'",
  "runtime sweep": "warren admin runtime sweep",
  "host list": "warren admin host list",
  "host drain": "warren admin host drain h_0123456789abcdef01234567",
  "host cordon": "warren admin host cordon h_0123456789abcdef01234567",
  "host uncordon": "warren admin host uncordon h_0123456789abcdef01234567",
};

function adminExamples(command: Command, path: string[] = []): void {
  for (const sub of command.commands) {
    const here = [...path, sub.name()];
    const text = ADMIN_EXAMPLES[here.join(" ")];
    if (text) example(sub, text);
    adminExamples(sub, here);
  }
}

export function buildProgram(): Command {
  const program = new Command("warren")
    .description("Warren: sandboxes, volumes, runs and their telemetry")
    .version("0.1.0")
    .option("--json", "machine-readable JSON on stdout (errors as JSON on stderr)")
    .option("--url <url>", "API URL (default: WARREN_API_URL, then `warren login`'s, then http://127.0.0.1:8080)")
    .option("--api-key <key>", "API key (default: WARREN_API_KEY, then `warren login`'s)")
    .option("-q, --quiet", "no progress on stderr")
    .showHelpAfterError()
    .exitOverride();
  program.addHelpText(
    "after",
    `
Exit codes: 0 ok, 1 error, 2 bad usage or invalid_argument, 3 not_found, 4 conflict (409/412),
5 quota or rate limit (429), 6 unauthenticated or permission_denied, 7 server unreachable;
sandbox exec exits with the command's own code (124 timed out, 125 indeterminate).

Example:
  $ warren login --url http://127.0.0.1:8080 --api-key-stdin < key.txt
  $ warren sandbox create --name dev -- sleep infinity`,
  );
  registerSandboxCommands(program, action);
  registerDataCommands(program, action);
  registerTraceCommands(program, action);
  example(
    program.command("mcp").description("serve sandbox and telemetry tools to an agent over MCP (stdio)"),
    "claude mcp add warren -- warren mcp",
  ).action(
    action(async (g) => {
      const { serveMcp } = await import("./mcp.js");
      await serveMcp(await client(g));
    }),
  );
  example(
    program.command("completion <shell>").description("print a bash or zsh completion script"),
    "source <(warren completion bash)",
  ).action(
    action(async (_g, shell: string) => {
      if (shell !== "bash" && shell !== "zsh") throw new UsageError("completion: bash or zsh");
      process.stdout.write(completionScript(program, shell));
    }),
  );
  const admin = adminCommand("admin");
  adminExamples(admin);
  // Without WARREN_ADMIN_URL or WARREN_DATA_DIR, `warren admin` goes to the server the user
  // logged in to (or named with --url/WARREN_API_URL) with that key, instead of opening an
  // embedded store in ./data of whatever directory it runs in.
  admin.hook("preAction", async () => {
    if (process.env.WARREN_ADMIN_URL || process.env.WARREN_DATA_DIR) return;
    const options = program.opts<GlobalOptions>();
    const stored = await readStoredConfig();
    if (!options.url && !process.env.WARREN_API_URL && !stored.url) return;
    const target = await resolveTarget(options);
    process.env.WARREN_ADMIN_URL = target.url;
    if (!process.env.WARREN_API_KEY && target.apiKey) process.env.WARREN_API_KEY = target.apiKey;
  });
  program.addCommand(admin);
  for (const command of program.commands) exitOverrideAll(command);
  return program;
}

function exitOverrideAll(command: Command): void {
  command.exitOverride();
  for (const sub of command.commands) exitOverrideAll(sub);
}
