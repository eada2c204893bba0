// warren run traces <run>: a run's OpenTelemetry spans as one OTLP/JSON export request on stdout
// (docs/api-decisions.md "OpenTelemetry ingest", "Forwarding out"), read through telemetry SQL.
import type { Command } from "commander";
import { client, type GlobalOptions } from "../context.js";
import { otlpJsonOf, type StoredSpan } from "../otlp-json.js";
import { example, type action as Wrap } from "../program.js";

/** Rows one telemetry SQL call returns at most (RunTelemetrySql's cap). */
const PAGE = 1000;

const literal = (text: string) => `'${text.replaceAll("'", "''")}'`;

export function registerTraceCommands(program: Command, action: typeof Wrap): void {
  const run = program.commands.find((c) => c.name() === "run");
  if (!run) throw new Error("the run command is registered first");
  example(
    run.command("traces <run>").description("print a run's OpenTelemetry spans as one OTLP/JSON export request"),
    "warren run traces run_... | curl -H 'content-type: application/json' --data-binary @- http://collector:4318/v1/traces",
  ).action(
    action(async (g: GlobalOptions, id: string) => {
      const warren = await client(g);
      await warren.runs.get(id);
      const payloads: StoredSpan[] = [];
      let after = "";
      for (;;) {
        const result = await warren.sql(
          `SELECT event_id, payload FROM events WHERE kind = 'span' AND run_id = ${literal(id)} AND event_id > ${literal(after)} ORDER BY event_id LIMIT ${PAGE}`,
          { limit: PAGE },
        );
        const rows = result.rows as [string, StoredSpan][];
        for (const [, payload] of rows) payloads.push(payload);
        if (rows.length < PAGE) break;
        after = rows[rows.length - 1]?.[0] ?? after;
      }
      process.stdout.write(`${JSON.stringify(otlpJsonOf(payloads))}\n`);
    }),
  );
}
