// Builds build/warren.mjs (`make run`); see server-bundle.ts.
import { buildServerBundle } from "./server-bundle.js";

await buildServerBundle();
