// Under tsx (tests, `node --import tsx`), the replication worker's entry: Node 20 does not
// pass --import tsx to worker threads, so the thread registers tsx before loading worker.ts.
import { register } from "tsx/esm/api";

register();
await import("./worker.ts");
