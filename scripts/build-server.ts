// Builds build/warren.mjs and its replication worker (`make run`); see server-bundle.ts.
import { buildServerBundle } from "./server-bundle.js";

await buildServerBundle();
