// Started by test/multi-host.test.ts as a test run that dies without its after hooks: starts a
// one-host deployment, prints what it made as one JSON line, and waits to be SIGKILLed.
import { startMultiHost } from "./multi-host.js";

const cluster = await startMultiHost("crash-child", { hosts: 1 });
const [host] = cluster.hosts;
if (!host) throw new Error("no host started");
process.stdout.write(
  `${JSON.stringify({ pid: process.pid, serverPid: host.pid, netns: host.netns, veth: host.veth, runtimeRoot: host.runtimeRoot })}\n`,
);
setInterval(() => undefined, 60_000);
