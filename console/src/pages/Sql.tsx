// The SQL editor (POST /v1/telemetry/sql) with the published relations listed, results as a
// table; and the saved data views: create or edit (PUT, a new version each time), run, chart.
import { useState } from "preact/hooks";
import { api } from "../api.js";
import { Chart, type RenderConfig, type Result, ResultTable } from "../components/Chart.js";
import { ConfirmButton, Empty, ErrorLine, useLoad } from "../components/common.js";

/** The fixed relations of docs/telemetry-sql.md "What a query sees" (annotation schemas add one each). */
const RELATIONS: [string, string][] = [
  [
    "runs",
    "id, project_id, label, parent_run_id, root_run_id, lineage_path, depth, status, started_at, ended_at, execute_as_workload",
  ],
  ["events", "event_id, project_id, run_id, lineage_path, ts_wall_ns, ts, name, kind, principal, payload"],
  [
    "annotations",
    "event_id, run_id, project_id, lineage_path, schema_name, schema_version, ts_wall_ns, ts, principal, target_event_id, range_start_ns, range_end_ns, payload, payload_json",
  ],
  [
    "sandboxes",
    "id, project_id, name, state, desired_state, image, lineage_path, storage_class, network_access, run_id, snapshot_id, metadata, created_at, updated_at, finished_at",
  ],
  [
    "snapshots",
    "id, project_id, source_sandbox_id, parent_snapshot_id, run_id, name, image, lineage_path, state, durability, size_bytes, created_at, sealed_at",
  ],
];

export function Sql() {
  const [sql, setSql] = useState("SELECT name, count(*) AS n FROM events GROUP BY name ORDER BY n DESC");
  const [result, setResult] = useState<Result | null>(null);
  const [error, setError] = useState<unknown>(null);
  const run = async () => {
    setError(null);
    try {
      setResult(await api.transport.json<Result>("POST", "/v1/telemetry/sql", { body: { sql, limit: 1000 } }));
    } catch (e) {
      setError(e);
    }
  };
  return (
    <section aria-labelledby="sql-title">
      <h1 id="sql-title">SQL</h1>
      <details>
        <summary>Published relations</summary>
        <dl class="facts">
          {RELATIONS.map(([name, cols]) => (
            <>
              <dt key={name}>
                <code>{name}</code>
              </dt>
              <dd key={`${name}-cols`}>{cols}</dd>
            </>
          ))}
          <dt>
            <code>&lt;schema name&gt;</code>
          </dt>
          <dd>one per live annotation schema: the annotations columns and its promoted fields</dd>
        </dl>
      </details>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void run();
        }}
      >
        <label for="sql-text">Query</label>
        <textarea
          id="sql-text"
          rows={6}
          value={sql}
          spellcheck={false}
          onInput={(e) => setSql((e.target as HTMLTextAreaElement).value)}
          onKeyDown={(e) => {
            if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
              e.preventDefault();
              void run();
            }
          }}
        />
        <button type="submit">Run (Ctrl+Enter)</button>
      </form>
      <ErrorLine error={error} />
      {result ? <ResultTable result={result} label="Query result" /> : null}
      {result && result.rows.length === 0 ? <Empty>No rows.</Empty> : null}
    </section>
  );
}

interface View {
  name: string;
  description: string;
  spec: { type: "sql.v1"; sql: string; render?: RenderConfig };
  spec_version: number;
  updated_at: string;
}

export function Views() {
  const views = useLoad(async () => (await api.views.list()) as unknown as View[], []);
  const [selected, setSelected] = useState<string>("");
  const [result, setResult] = useState<Result | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [editing, setEditing] = useState<View | null>(null);
  const current = views.data?.find((v) => v.name === selected) ?? null;
  const runView = async (name: string) => {
    setSelected(name);
    setError(null);
    setResult(null);
    try {
      setResult((await api.views.run(name)) as unknown as Result);
    } catch (e) {
      setError(e);
    }
  };
  return (
    <section aria-labelledby="views-title">
      <div class="row spread">
        <h1 id="views-title">Data views</h1>
        <button
          type="button"
          onClick={() =>
            setEditing({
              name: "",
              description: "",
              spec: {
                type: "sql.v1",
                sql: "SELECT name, count(*) AS n FROM events GROUP BY name",
                render: { chart: "bar", x: "name", y: "n" },
              },
              spec_version: 0,
              updated_at: "",
            })
          }
        >
          New view
        </button>
      </div>
      <ErrorLine error={views.error ?? error} />
      {editing ? (
        <ViewEditor
          view={editing}
          onDone={async (saved) => {
            setEditing(null);
            await views.reload();
            if (saved) await runView(saved);
          }}
        />
      ) : null}
      {views.data && views.data.length === 0 ? <Empty>No saved views yet.</Empty> : null}
      <ul class="views">
        {(views.data ?? []).map((v) => (
          <li key={v.name}>
            <button type="button" class="link" aria-pressed={selected === v.name} onClick={() => void runView(v.name)}>
              Run {v.name}
            </button>{" "}
            <small>
              v{v.spec_version} · {v.spec.render?.chart ?? "table"}
            </small>{" "}
            <button type="button" onClick={() => setEditing(v)}>
              Edit {v.name}
            </button>{" "}
            <ConfirmButton
              label={`Delete ${v.name}`}
              danger
              question={`Delete the view ${v.name}?`}
              onConfirm={async () => {
                try {
                  await api.views.delete(v.name);
                  await views.reload();
                } catch (e) {
                  setError(e);
                }
              }}
            />
          </li>
        ))}
      </ul>
      {current && result ? <Chart result={result} render={current.spec.render} title={current.name} /> : null}
    </section>
  );
}

function ViewEditor(props: { view: View; onDone: (saved: string | null) => Promise<void> }) {
  const [name, setName] = useState(props.view.name);
  const [description, setDescription] = useState(props.view.description);
  const [sql, setSql] = useState(props.view.spec.sql);
  const [render, setRender] = useState(JSON.stringify(props.view.spec.render ?? {}, null, 0));
  const [error, setError] = useState<unknown>(null);
  return (
    <form
      class="card"
      aria-label="Edit view"
      onSubmit={async (e) => {
        e.preventDefault();
        setError(null);
        try {
          const parsed = render.trim() ? (JSON.parse(render) as Record<string, unknown>) : undefined;
          await api.views.put(name, {
            description,
            spec: { type: "sql.v1", sql, ...(parsed ? { render: parsed } : {}) },
          } as never);
          await props.onDone(name);
        } catch (err) {
          setError(err instanceof SyntaxError ? new Error(`render is not JSON: ${err.message}`) : err);
        }
      }}
    >
      <label>
        Name{" "}
        <input
          value={name}
          disabled={props.view.spec_version > 0}
          onInput={(e) => setName((e.target as HTMLInputElement).value)}
        />
      </label>
      <label>
        Description <input value={description} onInput={(e) => setDescription((e.target as HTMLInputElement).value)} />
      </label>
      <label for="view-sql">SQL</label>
      <textarea id="view-sql" rows={4} value={sql} onInput={(e) => setSql((e.target as HTMLTextAreaElement).value)} />
      <label>
        Render (JSON: chart line, bar or table; x; y)
        <input value={render} onInput={(e) => setRender((e.target as HTMLInputElement).value)} />
      </label>
      <div class="row">
        <button type="submit">Save</button>
        <button type="button" onClick={() => void props.onDone(null)}>
          Cancel
        </button>
      </div>
      <ErrorLine error={error} />
    </form>
  );
}
