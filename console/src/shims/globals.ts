// The two Node globals the SDK's source reads, for the browser: Buffer (its exec stream and
// file reads) and process.env (its defaults, never used: the console passes every option).
import { Buffer } from "buffer";

const g = globalThis as unknown as { Buffer?: unknown; process?: { env: Record<string, string> } };
g.Buffer ??= Buffer;
g.process ??= { env: {} };
