// Shared by the command files: `example()` adds an example to a command's --help, and
// `action()` wraps a command body with the global options, error reporting and exit codes.
import type { Command } from "commander";
import { exitCodeOf, type GlobalOptions, reportError } from "./context.js";

// biome-ignore lint/suspicious/noExplicitAny: commander hands actions untyped positional arguments (a number returned is the exit code).
export type Action = (global: GlobalOptions, ...args: any[]) => Promise<unknown>;

/** Commands given an example (test/cli.test.ts checks that every leaf command has one). */
export const EXAMPLES = new WeakMap<Command, string[]>();

export function example(command: Command, ...lines: string[]): Command {
  EXAMPLES.set(command, lines);
  return command.addHelpText("after", `\nExample:\n${lines.map((line) => `  $ ${line}`).join("\n")}\n`);
}

/** Runs `fn` with the global options; its number (or the error's code) becomes the exit code. */
export function action(fn: Action) {
  return async (...args: unknown[]) => {
    const command = args[args.length - 1] as Command;
    const global = command.optsWithGlobals() as GlobalOptions;
    try {
      const code = await fn(global, ...args.slice(0, -1));
      process.exitCode = typeof code === "number" ? code : 0;
    } catch (error) {
      reportError(error, Boolean(global.json));
      process.exitCode = exitCodeOf(error);
    }
  };
}
