// Run by the multi-host harness inside a host's network namespace (`nsenter --net`): removes
// the runtime root given as the argument and everything of it on the host (sweepRoot), and
// prints the report as JSON on its last line.
import { sweepRoot } from "../../src/drivers/runtime/local/sweep.js";

const root = process.argv[2];
if (!root) throw new Error("usage: multi-host-sweep.ts <runtime root>");
const report = await sweepRoot(root).catch((error: Error) => ({ destroyed: [], errors: [error.message] }));
process.stdout.write(`${JSON.stringify(report)}\n`);
