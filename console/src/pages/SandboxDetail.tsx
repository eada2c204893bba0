// One sandbox: its state and reason, metadata, endpoints, resources, volumes, the SSH command,
// the actions (stop, wake, snapshot, delete), its snapshots (restore into a new sandbox), the
// ambient run, and the terminal and file browser tabs.
import type { SandboxRecord, SnapshotRecord } from "@warren/sdk";
import { useState } from "preact/hooks";
import { api, listPage } from "../api.js";
import { age, ConfirmButton, Empty, ErrorLine, Pager, useLoad, usePager } from "../components/common.js";
import { Link, navigate } from "../router.js";
import { Files } from "./Files.js";
import { Terminal } from "./Terminal.js";

const SANDBOX_ID = /^sbx-[0-9a-f]{40}$/;

/** The sandbox's ambient run (the `sandboxes` relation of telemetry SQL holds it). */
async function ambientRunOf(id: string): Promise<string> {
  if (!SANDBOX_ID.test(id)) return "";
  const result = await api.transport.json<{ rows: unknown[][] }>("POST", "/v1/telemetry/sql", {
    body: { sql: `SELECT run_id FROM sandboxes WHERE id = '${id}'`, limit: 1 },
  });
  return String(result.rows[0]?.[0] ?? "");
}

export function SandboxDetail(props: { id: string; tab: string }) {
  const { id, tab } = props;
  const sandbox = useLoad(async () => (await api.sandboxes.get(id)).record as SandboxRecord, [id], 2000);
  const run = useLoad(() => ambientRunOf(id), [id]);
  const s = sandbox.data;
  const tabs: [string, string][] = [
    ["", "Overview"],
    ["terminal", "Terminal"],
    ["files", "Files"],
  ];
  return (
    <section aria-labelledby="sandbox-title">
      <p>
        <Link href="/sandboxes">Sandboxes</Link> /
      </p>
      <h1 id="sandbox-title">{s?.name || id}</h1>
      <ErrorLine error={sandbox.error} />
      {s ? (
        <p>
          <span class={`state state-${s.state}`} data-testid="sandbox-state">
            {s.state}
          </span>
          {s.state_reason ? ` ${s.state_reason.code}: ${s.state_reason.message}` : ""}
          {run.data ? (
            <>
              {" "}
              · <Link href={`/runs/${run.data}`}>Ambient run</Link>
            </>
          ) : null}
        </p>
      ) : null}
      <nav class="tabs" aria-label="Sandbox views">
        {tabs.map(([key, label]) => (
          <Link
            key={key}
            href={`/sandboxes/${id}${key ? `/${key}` : ""}`}
            aria-current={tab === key ? "page" : undefined}
          >
            {label}
          </Link>
        ))}
      </nav>
      {tab === "terminal" ? <Terminal sandboxId={id} running={s?.state === "running"} /> : null}
      {tab === "files" ? <Files sandboxId={id} /> : null}
      {tab === "" && s ? <Overview s={s} reload={sandbox.reload} /> : null}
    </section>
  );
}

function Overview(props: { s: SandboxRecord; reload: () => Promise<void> }) {
  const { s } = props;
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState("");
  const [sshPassword, setSshPassword] = useState("");
  const act = async (what: string, fn: () => Promise<unknown>) => {
    setError(null);
    setNotice("");
    try {
      await fn();
      setNotice(`${what}: requested`);
      await props.reload();
    } catch (e) {
      setError(e);
    }
  };
  const sandbox = () => api.sandboxes.get(s.id);
  const ssh = s.ssh ? `ssh -p ${s.ssh.port} ${s.ssh.user}@${s.ssh.host}` : "";
  return (
    <>
      <div class="row actions">
        <button
          type="button"
          disabled={s.state !== "running"}
          onClick={() => act("Stop", async () => (await sandbox()).stop({ wait: false }))}
        >
          Stop
        </button>
        <button
          type="button"
          disabled={s.state !== "stopped"}
          onClick={() => act("Wake", async () => (await sandbox()).wake({ wait: false }))}
        >
          Wake
        </button>
        <button type="button" onClick={() => act("Snapshot", async () => (await sandbox()).snapshot())}>
          Snapshot
        </button>
        <ConfirmButton
          label="Delete"
          danger
          question={`Delete ${s.name || s.id}? Its workspace is gone for good (snapshots stay).`}
          onConfirm={() =>
            act("Delete", async () => {
              await (await sandbox()).delete();
              navigate("/sandboxes");
            })
          }
        />
      </div>
      <Change s={s} onDone={props.reload} onError={setError} onNotice={setNotice} />
      <ErrorLine error={error} />
      {notice ? (
        <p role="status" class="notice">
          {notice}
        </p>
      ) : null}
      <dl class="facts">
        <dt>Id</dt>
        <dd>
          <code>{s.id}</code>
        </dd>
        <dt>Image</dt>
        <dd>{s.workload_image}</dd>
        <dt>Network</dt>
        <dd>{s.network_access}</dd>
        <dt>Storage</dt>
        <dd>
          {s.storage_class}
          {s.workspace_capacity_gib ? `, ${s.workspace_capacity_gib} GiB` : ""}
        </dd>
        <dt>Resources</dt>
        <dd>
          {s.resources
            ? `${(s.resources.cpu_millis ?? 0) / 1000} vCPU, ${s.resources.memory_mb ?? "?"} MiB`
            : "defaults"}
        </dd>
        <dt>Created</dt>
        <dd>
          {s.created_at} ({age(s.created_at)} ago)
        </dd>
        <dt>Lineage</dt>
        <dd>
          <code>{s.lineage_path}</code>
        </dd>
        <dt>Metadata</dt>
        <dd>
          {Object.keys(s.metadata).length === 0
            ? "none"
            : Object.entries(s.metadata).map(([k, v]) => (
                <div key={k}>
                  <code>{k}</code>={v}
                </div>
              ))}
        </dd>
        <dt>Endpoints</dt>
        <dd>
          {s.endpoints.length === 0
            ? "none listening"
            : s.endpoints.map((e) => (
                <div key={e.port}>
                  {e.port}:{" "}
                  <button
                    type="button"
                    onClick={async () => {
                      try {
                        const token = await (await sandbox()).endpointToken(e.port);
                        window.open(String((token as { url: string }).url), "_blank", "noopener");
                      } catch (err) {
                        setError(err);
                      }
                    }}
                  >
                    Open port {e.port}
                  </button>
                </div>
              ))}
        </dd>
        <dt>Volumes</dt>
        <dd>
          {s.volumes.length === 0
            ? "none"
            : s.volumes.map((v) => (
                <div key={v.volume_id}>
                  {v.name || v.volume_id} v{v.version} at <code>{v.target_path}</code>
                </div>
              ))}
        </dd>
        <dt>SSH</dt>
        <dd>
          {ssh ? (
            <>
              <code data-testid="ssh-command">{ssh}</code>{" "}
              <button type="button" onClick={() => void navigator.clipboard?.writeText(ssh)}>
                Copy
              </button>{" "}
              <button
                type="button"
                onClick={async () => {
                  try {
                    const token = await (await sandbox()).sshToken();
                    setSshPassword(String((token as { token: string }).token));
                  } catch (err) {
                    setError(err);
                  }
                }}
              >
                Issue a password
              </button>
              {sshPassword ? (
                <div>
                  Password (shown once): <code>{sshPassword}</code>
                </div>
              ) : null}
            </>
          ) : (
            "not available yet"
          )}
        </dd>
      </dl>
      <Snapshots sandboxId={s.id} />
    </>
  );
}

function Snapshots(props: { sandboxId: string }) {
  const pager = usePager();
  const [error, setError] = useState<unknown>(null);
  const [command, setCommand] = useState("");
  const list = useLoad(
    () => listPage<SnapshotRecord>("/v1/snapshots", "snapshots", pager.token, { sandbox_id: props.sandboxId }, 20),
    [pager.token, props.sandboxId],
    3000,
  );
  return (
    <section aria-labelledby="snapshots-title">
      <h2 id="snapshots-title">Snapshots</h2>
      <ErrorLine error={list.error ?? error} />
      <label>
        Command of a restored sandbox{" "}
        <input
          value={command}
          placeholder="the image's (words split on spaces)"
          onInput={(e) => setCommand((e.target as HTMLInputElement).value)}
        />
      </label>
      {list.data && list.data.items.length === 0 ? <Empty>No snapshots of this sandbox.</Empty> : null}
      {list.data && list.data.items.length > 0 ? (
        <table>
          <thead>
            <tr>
              <th scope="col">Snapshot</th>
              <th scope="col">Durability</th>
              <th scope="col">Created</th>
              <th scope="col">Restore</th>
            </tr>
          </thead>
          <tbody>
            {list.data.items.map((snap) => (
              <tr key={snap.id}>
                <td>
                  <code>{snap.name || snap.id}</code>
                </td>
                <td>{snap.durability}</td>
                <td>{age(snap.created_at)} ago</td>
                <td>
                  <button
                    type="button"
                    onClick={async () => {
                      try {
                        const body = command.trim() ? { command: command.trim().split(/\s+/) } : {};
                        const child = await api.sandboxes.fromSnapshot(snap.id, body, { wait: false });
                        navigate(`/sandboxes/${child.id}`);
                      } catch (err) {
                        setError(err);
                      }
                    }}
                  >
                    Restore {snap.name || snap.id.slice(0, 12)}
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager pager={pager} next={list.data?.next ?? ""} label="Snapshots" />
    </section>
  );
}

/** Grow the durable workspace or switch the network mode (UpdateSandbox), with the switch's receipt. */
function Change(props: {
  s: SandboxRecord;
  onDone: () => Promise<void>;
  onError: (error: unknown) => void;
  onNotice: (text: string) => void;
}) {
  const { s } = props;
  const [network, setNetwork] = useState<string>(s.network_access);
  const [gib, setGib] = useState(String(s.workspace_capacity_gib ?? ""));
  const update = async (body: Record<string, unknown>, what: string) => {
    props.onError(null);
    try {
      const sandbox = await api.sandboxes.get(s.id);
      const answer = (await sandbox.update(body as never)) as { network_access_receipt?: unknown };
      props.onNotice(
        `${what}: requested${answer.network_access_receipt ? `; receipt ${JSON.stringify(answer.network_access_receipt)}` : ""}`,
      );
      await props.onDone();
    } catch (e) {
      props.onError(e);
    }
  };
  return (
    <div class="row actions">
      <label>
        Network mode
        <select value={network} onChange={(e) => setNetwork((e.target as HTMLSelectElement).value)}>
          <option value="public">public</option>
          <option value="gateway_only">gateway_only</option>
          <option value="none">none</option>
        </select>
      </label>
      <ConfirmButton
        label="Switch network"
        question={`Switch ${s.name || s.id} to network mode ${network}? Connections the new mode forbids are cut.`}
        onConfirm={() => update({ network_access: network }, `Network ${network}`)}
      />
      {s.storage_class === "durable" ? (
        <>
          <label>
            Workspace GiB
            <input type="number" min={1} value={gib} onInput={(e) => setGib((e.target as HTMLInputElement).value)} />
          </label>
          <ConfirmButton
            label="Grow workspace"
            question={`Grow the workspace of ${s.name || s.id} to ${gib} GiB? It cannot shrink again.`}
            onConfirm={() => update({ workspace_capacity_gib: Number(gib) }, `Workspace ${gib} GiB`)}
          />
        </>
      ) : null}
    </div>
  );
}
