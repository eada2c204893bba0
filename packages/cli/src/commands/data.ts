// warren login|whoami, volume create|list|push, run list|get|tail, sql, view put|list|run|delete,
// schema register|list|archive, secret create|list|grant|rotate|revoke.
import { readFile } from "node:fs/promises";
import path from "node:path";
import type { Command } from "commander";
import { type SqlResult, type TailEvent, Warren } from "../../../sdk/src/index.js";
import {
  bar,
  client,
  collect,
  type GlobalOptions,
  integer,
  mib,
  output,
  type Row,
  readStdin,
  record,
  resolveTarget,
  table,
  UsageError,
  writeStoredConfig,
} from "../context.js";
import { type Action, example } from "../program.js";

type Wrap = (fn: Action) => (...args: unknown[]) => void;

/** A JSON argument given inline or as @file. */
async function jsonArg(value: string, what: string): Promise<unknown> {
  const text = value.startsWith("@") ? await readFile(value.slice(1), "utf8") : value;
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError(`${what} is not JSON (give it inline or as @file.json)`);
  }
}

function sqlTable(result: SqlResult): string {
  const columns = result.columns.map((c) => c.name);
  const rows = result.rows.map((row) => Object.fromEntries(columns.map((c, i) => [c, (row as unknown[])[i]])));
  const note = result.truncated ? `(truncated: ${result.truncated_reason ?? "row limit"})\n` : "";
  return `${table(rows, columns) || "(no rows)\n"}${note}`;
}

export function registerDataCommands(program: Command, action: Wrap) {
  example(
    program
      .command("login")
      .description("store the server URL and an API key in ~/.config/warren/config.json (mode 0600)")
      .option("--api-key-stdin", "read the key from stdin (otherwise --api-key or WARREN_API_KEY)"),
    "echo $KEY | warren login --url http://127.0.0.1:8080 --api-key-stdin",
  ).action(
    action(async (g, flags: { apiKeyStdin?: boolean }) => {
      const target = await resolveTarget(g);
      const apiKey = flags.apiKeyStdin ? (await readStdin()).trim() : target.apiKey;
      if (!apiKey) throw new UsageError("give the key with --api-key-stdin, --api-key or WARREN_API_KEY");
      const who = await new Warren({ baseUrl: target.url, apiKey }).whoami();
      const file = await writeStoredConfig({ url: target.url, api_key: apiKey });
      output(g).print({ url: target.url, config_file: file, ...who }, () => {
        const org = who.organization as Row;
        return `logged in to ${target.url} as ${String((who.principal as Row).kind)} of ${String(org.slug ?? org.id)} (${file})\n`;
      });
    }),
  );

  example(
    program.command("usage").description("the organization's quotas: limit, current use and reserved, per metric"),
    "warren usage",
  ).action(
    action(async (g) => {
      const snapshot = await (await client(g)).usage();
      output(g).print(snapshot.limits, (r: Row[]) => table(r, ["metric", "unit", "current", "reserved", "limit"]));
    }),
  );

  example(program.command("whoami").description("the organization and principal of the key"), "warren whoami").action(
    action(async (g) => {
      const who = await (await client(g)).whoami();
      output(g).print(who, (w: Record<string, Row>) =>
        record({ ...flatten("organization", w.organization), ...flatten("principal", w.principal) }),
      );
    }),
  );

  const volume = program.command("volume").description("volumes: versioned read-only trees mounted into sandboxes");
  example(
    volume.command("create <name>").description("create a volume"),
    "warren volume create datasets --quota-gib 50",
  )
    .option("--quota-gib <gib>", "quota in GiB (at most 2048)", integer, 10)
    .option("--project <id>", "project (default: the key's)")
    .option("--description <text>", "description")
    .action(
      action(async (g, name: string, flags: { quotaGib: number; project?: string; description?: string }) => {
        const v = await (await client(g)).volumes.create({
          name,
          quota_bytes: String(flags.quotaGib * 1024 ** 3),
          ...(flags.project ? { project_id: flags.project } : {}),
          ...(flags.description ? { description: flags.description } : {}),
        });
        output(g).print(v, (r: Row) => record(r));
      }),
    );
  example(volume.command("list").description("list volumes, newest first"), "warren volume list").action(
    action(async (g) => {
      const rows: Row[] = [];
      for await (const v of (await client(g)).volumes.list()) rows.push(v as Row);
      output(g).print(rows, (r: Row[]) =>
        table(r, ["id", "name", "current_version_digest", "used_bytes", "quota_bytes", "created_at"]),
      );
    }),
  );
  example(
    volume.command("delete <volume>").description("delete a volume (refused while a sandbox mounts it)"),
    "warren volume delete datasets",
  ).action(
    action(async (g, ref: string) => {
      const warren = await client(g);
      const id = await volumeIdOf(warren, ref);
      await warren.volumes.delete(id);
      output(g).print({ id, deleted: true }, () => `deleted ${id}\n`);
    }),
  );
  example(
    volume
      .command("push <dir>")
      .description("push a directory as the volume's new version (only missing blobs are uploaded)"),
    "warren volume push ./data --volume datasets",
  )
    .requiredOption("--volume <volume>", "volume id or name")
    .option("--concurrency <n>", "uploads at once", integer, 8)
    .option("--no-hash-cache", "hash every file again")
    .action(
      action(async (g, dir: string, flags: { volume: string; concurrency: number; hashCache: boolean }) => {
        const warren = await client(g);
        const volumeId = await volumeIdOf(warren, flags.volume);
        const out = output(g);
        const result = await warren.volumes.push(volumeId, path.resolve(dir), {
          concurrency: flags.concurrency,
          hashCache: flags.hashCache,
          onProgress: (line, p) =>
            out.progress(
              p.totalBytes !== undefined
                ? bar(p.doneBytes ?? 0, p.totalBytes, `${mib(p.doneBytes ?? 0)} of ${mib(p.totalBytes)}`)
                : line,
            ),
        });
        out.done();
        output(g).print(
          result,
          (r: typeof result) =>
            `published ${r.version.version_digest}: ${r.files} files, ${mib(r.bytes)}, uploaded ${r.uploadedBlobs} blobs (${mib(r.uploadedBytes)})\n`,
        );
      }),
    );

  const run = program.command("run").description("runs and their telemetry");
  example(run.command("list").description("list runs, newest first"), "warren run list --limit 20")
    .option("--project <id>", "project")
    .option("--limit <n>", "at most this many", integer, 50)
    .action(
      action(async (g, flags: { project?: string; limit: number }) => {
        const rows: Row[] = [];
        for await (const r of (await client(g)).runs.list(flags.project ? { project_id: flags.project } : {})) {
          rows.push(r as Row);
          if (rows.length >= flags.limit) break;
        }
        output(g).print(rows, (r: Row[]) => table(r, ["id", "label", "status", "project_id", "started_at"]));
      }),
    );
  example(run.command("get <run>").description("show a run"), "warren run get run_...").action(
    action(async (g, id: string) => {
      output(g).print(await (await client(g)).runs.get(id), (r: Row) => record(r));
    }),
  );
  example(
    run
      .command("tail <run>")
      .description("print a run's events; -f follows new ones until the run completes (resuming after drops)"),
    "warren run tail -f run_...",
  )
    .option("-f, --follow", "keep streaming new events")
    .option("--cursor <cursor>", "resume after this cursor")
    .option("--lineage <path>", "only events at or below this lineage path")
    .action(
      action(async (g, id: string, flags: { follow?: boolean; cursor?: string; lineage?: string }) => {
        const warren = await client(g);
        const abort = new AbortController();
        // Without --follow: the events already there. A finished run's stream ends by itself
        // (its `end` event after the last one); a running run's once it goes quiet, counted
        // from when the stream is open (on a slow machine or link the connection alone may
        // take longer than the quiet window).
        const untilQuiet = !flags.follow && (await warren.runs.get(id)).status === "running";
        let idle: NodeJS.Timeout | undefined;
        const quiet = () => {
          if (!untilQuiet) return;
          clearTimeout(idle);
          idle = setTimeout(() => abort.abort(new Error("idle")), 750);
        };
        try {
          for await (const item of warren.runs.tail(id, {
            signal: abort.signal,
            onOpen: quiet,
            ...(flags.cursor ? { cursor: flags.cursor } : {}),
            ...(flags.lineage ? { lineagePath: flags.lineage } : {}),
          })) {
            quiet();
            process.stdout.write(g.json ? `${JSON.stringify(item)}\n` : tailLine(item));
          }
        } catch (error) {
          if (!abort.signal.aborted) throw error;
        } finally {
          clearTimeout(idle);
        }
      }),
    );

  example(
    program
      .command("sql <query>")
      .description("run one read-only SELECT over the organization's telemetry (docs/telemetry-sql.md)"),
    `warren sql "SELECT name, count(*) FROM events GROUP BY name"`,
  )
    .option("--limit <n>", "row limit", integer)
    .action(
      action(async (g, query: string, flags: { limit?: number }) => {
        const result = await (await client(g)).sql(query, flags.limit ? { limit: flags.limit } : {});
        output(g).print(result, sqlTable);
      }),
    );

  const view = program.command("view").description("data views: named, parameterized SQL");
  example(
    view.command("put <name>").description("create or replace a data view"),
    `warren view put by-label --spec '{"type":"sql.v1","sql":"SELECT label, status FROM runs WHERE label = $1","params":[{"name":"label","type":"text"}]}'`,
  )
    .requiredOption("--spec <json>", "the view spec (inline JSON or @file.json)")
    .option("--description <text>", "description")
    .action(
      action(async (g, name: string, flags: { spec: string; description?: string }) => {
        const spec = await jsonArg(flags.spec, "--spec");
        const v = await (await client(g)).views.put(name, {
          spec: spec as never,
          ...(flags.description ? { description: flags.description } : {}),
        });
        output(g).print(v, (r: Row) => record(r));
      }),
    );
  example(view.command("list").description("list data views"), "warren view list").action(
    action(async (g) => {
      output(g).print(await (await client(g)).views.list(), (r: Row[]) =>
        table(r, ["name", "spec_version", "description", "updated_at"]),
      );
    }),
  );
  example(
    view.command("run <name>").description("run a data view"),
    `warren view run by-label --params '{"label":"nightly"}'`,
  )
    .option("--params <json>", "parameters (inline JSON or @file.json)")
    .option("--limit <n>", "row limit", integer)
    .action(
      action(async (g, name: string, flags: { params?: string; limit?: number }) => {
        const params = flags.params ? await jsonArg(flags.params, "--params") : undefined;
        const result = await (await client(g)).views.run(name, {
          ...(params ? { params: params as never } : {}),
          ...(flags.limit ? { limit: flags.limit } : {}),
        });
        output(g).print(result, sqlTable);
      }),
    );
  example(view.command("delete <name>").description("delete a data view"), "warren view delete by-label").action(
    action(async (g, name: string) => {
      await (await client(g)).views.delete(name);
      output(g).print({ name, deleted: true }, () => `deleted ${name}\n`);
    }),
  );

  const schema = program.command("schema").description("annotation schemas");
  example(
    schema.command("register <name>").description("register a schema version (backward compatible with the last)"),
    `warren schema register rating --json-schema '{"type":"object","properties":{"score":{"type":"integer"}}}'`,
  )
    .requiredOption("--json-schema <json>", "JSON Schema (inline or @file.json)")
    .option("--description <text>", "description")
    .option("--promote <field>", "promoted field (repeatable)", collect)
    .action(
      action(async (g, name: string, flags: { jsonSchema: string; description?: string; promote?: string[] }) => {
        const jsonSchema = await jsonArg(flags.jsonSchema, "--json-schema");
        const s = await (await client(g)).schemas.register({
          name,
          json_schema: JSON.stringify(jsonSchema),
          ...(flags.description ? { description: flags.description } : {}),
          ...(flags.promote ? { promoted_fields: flags.promote as never } : {}),
        });
        output(g).print(s, (r: Row) => record(r));
      }),
    );
  example(schema.command("list").description("latest live version per name"), "warren schema list --all")
    .option("--all", "every version, archived too")
    .action(
      action(async (g, flags: { all?: boolean }) => {
        const rows = await (await client(g)).schemas.list(flags.all ? { include_archived: true } : {});
        output(g).print(rows, (r: Row[]) => table(r, ["name", "version", "archived_at", "created_at"]));
      }),
    );
  example(
    schema.command("archive <name>").description("archive a version (default the latest live)"),
    "warren schema archive rating",
  )
    .option("--version <n>", "version")
    .action(
      action(async (g, name: string, flags: { version?: string }) => {
        output(g).print(await (await client(g)).schemas.archive(name, flags.version), (r: Row) => record(r));
      }),
    );

  const secret = program.command("secret").description("sandbox secrets (values are write-only)");
  example(
    secret.command("create <name>").description("create a secret; the value is read from stdin"),
    'printf %s "$TOKEN" | warren secret create github --dest-host api.github.com',
  )
    .option("--dest-host <host>", "the only host the secret is delivered to")
    .option("--delivery <kind>", "delivery kind")
    .action(
      action(async (g, name: string, flags: { destHost?: string; delivery?: string }) => {
        const value = await readStdin();
        if (!value) throw new UsageError("the secret value is read from stdin: pipe it in");
        const s = await (await client(g)).secrets.create({
          name,
          value,
          ...(flags.destHost ? { dest_host: flags.destHost } : {}),
          ...(flags.delivery ? { delivery: flags.delivery as never } : {}),
        });
        output(g).print(s, (r: Row) => record(r));
      }),
    );
  example(secret.command("list").description("list secrets (never their values)"), "warren secret list").action(
    action(async (g) => {
      const rows: Row[] = [];
      for await (const s of (await client(g)).secrets.list()) rows.push(s as Row);
      output(g).print(rows, (r: Row[]) => table(r, ["id", "name", "dest_host", "current_version", "revoked_at"]));
    }),
  );
  example(
    secret.command("grant <secret>").description("grant use of a secret"),
    "warren secret grant sec_... --subject-kind workload --subject-id agent",
  )
    .requiredOption("--subject-kind <kind>", "user | service_account | workload")
    .requiredOption("--subject-id <id>", "subject id")
    .action(
      action(async (g, id: string, flags: { subjectKind: string; subjectId: string }) => {
        const grant = await (await client(g)).secrets.grant(id, {
          subject_kind: `SANDBOX_SECRET_GRANT_SUBJECT_KIND_${flags.subjectKind.toUpperCase()}` as never,
          subject_id: flags.subjectId,
        });
        output(g).print(grant, (r: Row) => record(r));
      }),
    );
  example(
    secret.command("rotate <secret>").description("rotate a secret; the new value is read from stdin"),
    'printf %s "$NEW" | warren secret rotate sec_...',
  ).action(
    action(async (g, id: string) => {
      const value = await readStdin();
      if (!value) throw new UsageError("the new value is read from stdin: pipe it in");
      output(g).print(await (await client(g)).secrets.rotate(id, value), (r: Row) => record(r));
    }),
  );
  example(secret.command("revoke <secret>").description("revoke a secret"), "warren secret revoke sec_...").action(
    action(async (g, id: string) => {
      output(g).print(await (await client(g)).secrets.revoke(id), (r: Row) => record(r));
    }),
  );
}

function flatten(prefix: string, value: Row | undefined): Row {
  return Object.fromEntries(Object.entries(value ?? {}).map(([k, v]) => [`${prefix}.${k}`, v]));
}

function tailLine(item: TailEvent): string {
  if (item.event === "end") return `-- end: ${JSON.stringify(item.data)}\n`;
  const d = item.data;
  const ns = typeof d.ts_wall_ns === "string" ? d.ts_wall_ns : "";
  const at = ns ? new Date(Number(BigInt(ns) / 1_000_000n)).toISOString() : "";
  return `${at} ${String(d.name ?? "")} ${JSON.stringify(d.payload ?? {})}\n`;
}

async function volumeIdOf(warren: Warren, ref: string): Promise<string> {
  try {
    return (await warren.volumes.get(ref)).id as string;
  } catch (error) {
    if ((error as { code?: string }).code !== "not_found") throw error;
  }
  for await (const v of warren.volumes.list()) if (v.name === ref) return v.id as string;
  throw new UsageError(`no volume "${ref}"`);
}

export type { GlobalOptions };
