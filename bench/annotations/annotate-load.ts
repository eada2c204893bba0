// Annotate load from a separate process: autocannon's programmatic API (the CLI cannot vary
// a body beyond one random id), each request a fresh payload whose identity field is drawn
// from a pool of keys, so the run mixes new supersession keys with new versions of old ones.
// Prints one JSON line in the shape of bench/lib/load.ts LoadResult.
//
//   node --import tsx bench/annotations/annotate-load.ts '<json IngestLoadSpec>'
import { createRequire } from "node:module";
import { type AutocannonReport, autocannonResult } from "../lib/load.js";
import { LABELS, payloadJson, REVIEWERS } from "./data.js";

export interface IngestLoadSpec {
  url: string;
  key: string;
  connections: number;
  durationSec: number;
  schemas: string[];
  runs: string[];
  /** Size of the pool the identity field is drawn from. */
  keys: number;
  /** Item prefix, so the ingest keys never collide with the bulk-loaded ones. */
  prefix: string;
}

interface AutocannonRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string;
}

type Autocannon = (
  options: Record<string, unknown>,
  done: (error: Error | null, result: AutocannonReport) => void,
) => unknown;

const autocannon = createRequire(import.meta.url)("autocannon") as Autocannon;

function annotateBody(spec: Pick<IngestLoadSpec, "schemas" | "runs" | "keys" | "prefix">): string {
  const k = Math.floor(Math.random() * spec.keys);
  const item = `${spec.prefix}${String(k).padStart(7, "0")}`;
  const label = LABELS[Math.floor(Math.random() * LABELS.length)] as string;
  const payload = payloadJson(item, label, Math.floor(Math.random() * REVIEWERS), Math.floor(Math.random() * 11));
  return JSON.stringify({
    schema_name: spec.schemas[k % spec.schemas.length],
    run_id: spec.runs[Math.floor(k / spec.schemas.length) % spec.runs.length],
    payload_json: payload,
  });
}

function main() {
  const spec = JSON.parse(process.argv[2] ?? "{}") as IngestLoadSpec;
  const url = new URL(spec.url);
  autocannon(
    {
      url: url.origin,
      connections: spec.connections,
      pipelining: 1,
      duration: spec.durationSec,
      requests: [
        {
          method: "POST",
          path: url.pathname,
          headers: { authorization: `Bearer ${spec.key}`, "content-type": "application/json" },
          setupRequest: (request: AutocannonRequest) => ({ ...request, body: annotateBody(spec) }),
        },
      ],
    },
    (error, report) => {
      if (error) {
        process.stderr.write(`${error.stack ?? error.message}\n`);
        process.exit(1);
      }
      const result = autocannonResult(report, spec.connections, null);
      process.stdout.write(`${JSON.stringify(result)}\n`);
      process.exit(0);
    },
  );
}

main();
