// The README walkthrough with the SDK: `node --import tsx packages/sdk/examples/walkthrough.ts`
import { Warren } from "../src/index.js";

const warren = new Warren(); // WARREN_API_KEY, WARREN_API_URL (default http://127.0.0.1:8080)
console.log(await warren.whoami());
await using dev = await warren.sandboxes.create({ network_access: "none", command: ["sleep", "infinity"] });
const hello = await dev.exec(["sh", "-c", "echo hello > /workspace/hello.txt; uname -s"]);
if (hello.kind === "completed") console.log("exit", hello.exit, hello.stdout.trim());
const { snapshot_id } = await dev.snapshot({ name: "walkthrough" });
await using copy = await warren.sandboxes.fromSnapshot(snapshot_id, { command: ["sleep", "infinity"] });
console.log("restored:", (await copy.files.readText("/workspace/hello.txt")).trim());
const volume = await warren.volumes.create({ name: `walkthrough-${Date.now()}`, quota_bytes: String(1024 ** 3) });
console.log((await warren.volumes.push(volume.id as string, "docs", { hashCache: false })).version);
try {
  const events = warren.runs.tail(dev.runId as string, { signal: AbortSignal.timeout(1500) });
  for await (const event of events) console.log("event", event.data.name);
} catch (error) {
  if ((error as Error).name !== "TimeoutError") throw error; // the ambient run stays open: stop after 1.5 s
}
console.log((await warren.sql("SELECT name, count(*) AS n FROM events GROUP BY name ORDER BY name")).rows);
// Both sandboxes are deleted here, as the `await using` scope ends.
