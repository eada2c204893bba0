// `warren`: runs the command tree of build.ts; commander's own refusals are usage errors (exit 2).
import { CommanderError } from "commander";
import { buildProgram } from "./build.js";
import { EXIT } from "./context.js";

// A reader that goes away (`warren run list | head`) ends the command quietly, as cat does.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") process.exit(process.exitCode ?? EXIT.ok);
    throw error;
  });
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
