// Under tsx (tests, `node --import tsx`), the layer unpack thread's entry: Node 20 does not
// pass --import tsx to worker threads, so the thread registers tsx before loading the worker.
import { register } from "tsx/esm/api";

register();
await import("./unpack-worker.ts");
