// `warren`: the command line of Warren (README "CLI"). One commander program: the API
// commands (through the SDK), `warren admin ...` (src/cli/admin.ts), `warren mcp` and
// `warren completion`.
import { Command, CommanderError } from "commander";
import { adminCommand } from "../../../src/cli/admin.js";
import { registerDataCommands } from "./commands/data.js";
import { registerSandboxCommands } from "./commands/sandbox.js";
import { completionScript } from "./completion.js";
import { client, EXIT, UsageError } from "./context.js";
import { action, example } from "./program.js";

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
  program.addCommand(adminCommand("admin"));
  for (const command of program.commands) exitOverrideAll(command);
  return program;
}

function exitOverrideAll(command: Command): void {
  command.exitOverride();
  for (const sub of command.commands) exitOverrideAll(sub);
}

try {
  await buildProgram().parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    // --help and --version are exits too; anything else commander refuses is a usage error.
    process.exitCode = error.exitCode === 0 ? EXIT.ok : EXIT.usage;
  } else {
    process.stderr.write(`warren: ${(error as Error).message}\n`);
    process.exitCode = EXIT.error;
  }
}
