// `warren sandbox exec` over the streaming exec: output written as it comes (at the pace the
// terminal or pipe takes it), stdin forwarded when it is a pipe or a file (or with --tty), a
// terminal in raw mode with its size followed (SIGWINCH) under --tty. The exit code is the
// command's; 124 when it timed out, 125 when its end could not be read, 127 when it did not start.
import { once } from "node:events";
import type { Writable } from "node:stream";
import { type ExecStreamOptions, type Sandbox, SpawnFailedError } from "../../../sdk/src/index.js";
import { EXIT } from "../context.js";

export interface StreamExecFlags {
  timeout?: number;
  env?: Record<string, string>;
  cwd?: string;
  tty: boolean;
}

async function pipeOut(chunks: AsyncIterable<Buffer>, target: Writable): Promise<void> {
  for await (const chunk of chunks) {
    if (!target.write(chunk)) await once(target, "drain");
  }
}

export async function streamExec(sandbox: Sandbox, cmd: string[], flags: StreamExecFlags): Promise<number> {
  const stdin = process.stdin;
  const terminal = flags.tty && stdin.isTTY === true;
  const options: ExecStreamOptions = {};
  if (flags.env) options.env = flags.env;
  if (flags.cwd) options.cwd = flags.cwd;
  if (flags.timeout !== undefined) options.timeoutSeconds = flags.timeout;
  if (flags.tty) options.tty = { rows: process.stdout.rows || 24, cols: process.stdout.columns || 80 };
  const stream = sandbox.execStream(cmd, options);
  const onResize = () => stream.resize(process.stdout.rows || 24, process.stdout.columns || 80);
  let forwarding = false;
  try {
    await stream.started;
  } catch (error) {
    if (error instanceof SpawnFailedError) {
      process.stderr.write(`warren: ${error.message}\n`);
      return EXIT.execNotStarted;
    }
    throw error;
  }
  // At a terminal without --tty nothing is read (as `docker exec` without -i): the command sees EOF.
  if (stdin.isTTY && !flags.tty) stream.closeStdin();
  else {
    forwarding = true;
    if (terminal) {
      stdin.setRawMode(true);
      process.stdout.on("resize", onResize);
    }
    void (async () => {
      try {
        for await (const chunk of stdin) await stream.write(chunk as Buffer);
        stream.closeStdin();
      } catch {
        // The stream ended first: what is left of stdin has nowhere to go.
      }
    })();
  }
  try {
    await Promise.all([pipeOut(stream.stdout, process.stdout), pipeOut(stream.stderr, process.stderr)]);
    const result = await stream.wait();
    if (result.kind === "completed") return Math.min(255, Math.max(0, result.exit));
    process.stderr.write(
      result.kind === "timed_out" ? "warren: the command timed out\n" : "warren: the outcome could not be read\n",
    );
    return result.kind === "timed_out" ? EXIT.execTimedOut : EXIT.execIndeterminate;
  } finally {
    if (terminal) {
      stdin.setRawMode(false);
      process.stdout.off("resize", onResize);
    }
    if (forwarding) stdin.destroy();
  }
}
