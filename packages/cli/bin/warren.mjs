#!/usr/bin/env node
// The `warren` command: registers tsx (the repository runs its TypeScript sources) and runs
// the CLI in this process.
import { register } from "tsx/esm/api";

register();
await import("../src/main.ts");
