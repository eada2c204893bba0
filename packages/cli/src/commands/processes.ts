// warren sandbox start|ps|attach|kill: background processes (docs/api-decisions.md "Processes").
// `start` answers with the process's id at once; `attach` streams its output from an offset
// (stdout to stdout, stderr to stderr; a gap the server no longer kept is said on stderr) until it
// ends, and exits with its exit code; `kill` sends a signal (SIGKILL by default).
import type { Command } from "commander";
import type { ProcessRecord, ProcessSignal } from "../../../sdk/src/index.js";
import { client, collect, integer, output, pairs, record, table } from "../context.js";
import { type Action, example } from "../program.js";

const COLUMNS = ["id", "state", "pid", "exit_code", "end_reason", "cmd", "created_at"];
const row = (p: ProcessRecord) => ({
  id: p.id,
  state: p.state,
  pid: p.pid,
  exit_code: p.exit_code,
  end_reason: p.end_reason,
  cmd: p.cmd.join(" "),
  created_at: p.created_at,
});

export function registerProcessCommands(sandbox: Command, action: (fn: Action) => (...args: unknown[]) => void): void {
  example(
    sandbox
      .command("start <sandbox>")
      .argument("<command...>", "argv (after --)")
      .description("start a background process; prints its id at once (it outlives this command and the server)"),
    "warren sandbox start dev -- python3 -m http.server 8000",
  )
    .option("--env <key=value>", "environment variable (repeatable)", collect)
    .option("--cwd <path>", "absolute working directory")
    .option("--stdin", "give it a stdin pipe (fed by the API's :stdin)", false)
    .option("--timeout <seconds>", "kill it after this long", integer)
    .action(
      action(
        async (
          g,
          ref: string,
          cmd: string[],
          flags: { env?: string[]; cwd?: string; stdin: boolean; timeout?: number },
        ) => {
          const warren = await client(g);
          const s = await warren.sandboxes.get(ref);
          const env = pairs(flags.env);
          const proc = await s.processes.start(cmd, {
            ...(env ? { env } : {}),
            ...(flags.cwd ? { cwd: flags.cwd } : {}),
            stdin: flags.stdin,
            ...(flags.timeout !== undefined ? { timeoutSeconds: flags.timeout } : {}),
          });
          output(g).print(proc.record, (r: ProcessRecord) => `${r.id}\n`);
        },
      ),
    );

  example(
    sandbox.command("ps <sandbox>").description("list a sandbox's processes, newest first"),
    "warren sandbox ps dev",
  )
    .option("-a, --all", "ended ones too", false)
    .action(
      action(async (g, ref: string, flags: { all: boolean }) => {
        const warren = await client(g);
        const s = await warren.sandboxes.get(ref);
        const rows = (await s.processes.list()).filter(
          (p) => flags.all || p.state === "running" || p.state === "starting",
        );
        output(g).print(rows, (r: ProcessRecord[]) => table(r.map(row), COLUMNS));
      }),
    );

  example(
    sandbox
      .command("attach <sandbox> <process>")
      .description("stream a process's output (from --offset) until it ends; exits with its exit code"),
    "warren sandbox attach dev proc_01j... --offset 0",
  )
    .option("--offset <bytes>", "start here (default 0: everything still kept)", integer)
    .action(
      action(async (g, ref: string, processId: string, flags: { offset?: number }) => {
        const warren = await client(g);
        const s = await warren.sandboxes.get(ref);
        const proc = await s.processes.get(processId);
        const abort = new AbortController();
        process.once("SIGINT", () => abort.abort());
        for await (const chunk of proc.output({ offset: flags.offset ?? 0, signal: abort.signal })) {
          if (chunk.type === "gap") process.stderr.write(`warren: ${chunk.to - chunk.from} bytes no longer kept\n`);
          else await write(chunk.type === "stdout" ? process.stdout : process.stderr, chunk.data);
        }
        if (abort.signal.aborted) return 130;
        const end = proc.record ?? (await proc.refresh());
        if (g.json) output(g).print(end, (r: ProcessRecord) => record(row(r)));
        return end.exit_code ?? 1;
      }),
    );

  example(
    sandbox.command("kill <sandbox> <process>").description("signal a process (SIGKILL by default)"),
    "warren sandbox kill dev proc_01j... --signal SIGTERM",
  )
    .option("--signal <name>", "SIGTERM, SIGINT, SIGHUP, SIGKILL, ...", "SIGKILL")
    .action(
      action(async (g, ref: string, processId: string, flags: { signal: string }) => {
        const warren = await client(g);
        const s = await warren.sandboxes.get(ref);
        const proc = await s.processes.get(processId);
        const shown = await proc.signal(flags.signal as ProcessSignal);
        output(g).print(shown, (r: ProcessRecord) => record(row(r)));
      }),
    );
}

function write(stream: NodeJS.WriteStream, data: Buffer): Promise<void> {
  return new Promise((resolve) => {
    if (stream.write(data)) resolve();
    else stream.once("drain", () => resolve());
  });
}
