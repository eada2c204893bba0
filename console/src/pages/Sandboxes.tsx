// The sandboxes list: live (polled), filtered by state and searched by name, paginated; and
// the create form (image, name, network).
import type { SandboxRecord } from "@warren/sdk";
import { useState } from "preact/hooks";
import { api, listPage } from "../api.js";
import { age, Empty, ErrorLine, Pager, useLoad, usePager } from "../components/common.js";
import { Link, navigate } from "../router.js";

const STATES = ["", "running", "stopped", "requested", "materializing", "failed", "terminating", "terminated"];

export function Sandboxes() {
  const pager = usePager();
  const [name, setName] = useState("");
  const [state, setState] = useState("");
  const list = useLoad(
    () => listPage<SandboxRecord>("/v1/sandboxes", "sandboxes", pager.token, { name: name || undefined }),
    [pager.token, name],
    3000,
  );
  const shown = (list.data?.items ?? []).filter((s) => !state || s.state === state);
  return (
    <section aria-labelledby="sandboxes-title">
      <div class="row spread">
        <h1 id="sandboxes-title">Sandboxes</h1>
        <CreateSandbox />
      </div>
      <div class="row filters">
        <label>
          Name
          <input
            type="search"
            value={name}
            placeholder="exact name"
            onChange={(e) => {
              setName((e.target as HTMLInputElement).value.trim());
              pager.reset();
            }}
          />
        </label>
        <label>
          State
          <select value={state} onChange={(e) => setState((e.target as HTMLSelectElement).value)}>
            {STATES.map((s) => (
              <option value={s} key={s}>
                {s || "any"}
              </option>
            ))}
          </select>
        </label>
      </div>
      <ErrorLine error={list.error} />
      {list.data && shown.length === 0 ? (
        <Empty>No sandboxes{name || state ? " match" : " yet: create one above"}.</Empty>
      ) : null}
      {shown.length > 0 ? (
        <table>
          <caption class="sr-only">Sandboxes of this organization</caption>
          <thead>
            <tr>
              <th scope="col">Sandbox</th>
              <th scope="col">State</th>
              <th scope="col">Image</th>
              <th scope="col">Network</th>
              <th scope="col">Resources</th>
              <th scope="col">Age</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((s) => (
              <tr key={s.id}>
                <td>
                  <Link href={`/sandboxes/${s.id}`}>{s.name || s.id}</Link>
                </td>
                <td>
                  <span class={`state state-${s.state}`}>{s.state}</span>
                </td>
                <td>{"image" in s ? s.image : s.workload_image}</td>
                <td>{s.network_access}</td>
                <td>
                  {s.resources
                    ? `${(s.resources.cpu_millis ?? 0) / 1000} vCPU, ${s.resources.memory_mb ?? "?"} MiB`
                    : ""}
                </td>
                <td>{age(s.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager pager={pager} next={list.data?.next ?? ""} label="Sandboxes" />
    </section>
  );
}

function CreateSandbox() {
  const [open, setOpen] = useState(false);
  const [image, setImage] = useState("");
  const [name, setName] = useState("");
  const [network, setNetwork] = useState("");
  const [command, setCommand] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  if (!open) {
    return (
      <button type="button" onClick={() => setOpen(true)}>
        New sandbox
      </button>
    );
  }
  return (
    <form
      class="card"
      aria-label="New sandbox"
      onSubmit={async (e) => {
        e.preventDefault();
        setBusy(true);
        setError(null);
        try {
          const body: Record<string, unknown> = {};
          if (image) body.image = image;
          if (name) body.name = name;
          if (network) body.network_access = network;
          if (command.trim()) body.command = command.trim().split(/\s+/);
          const sandbox = await api.sandboxes.create(body, { wait: false });
          navigate(`/sandboxes/${sandbox.id}`);
        } catch (err) {
          setError(err);
        } finally {
          setBusy(false);
        }
      }}
    >
      <label>
        Image{" "}
        <input
          value={image}
          placeholder="the deployment's default"
          onInput={(e) => setImage((e.target as HTMLInputElement).value)}
        />
      </label>
      <label>
        Name <input value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
      </label>
      <label>
        Command{" "}
        <input
          value={command}
          placeholder="the image's (words split on spaces)"
          onInput={(e) => setCommand((e.target as HTMLInputElement).value)}
        />
      </label>
      <label>
        Network
        <select value={network} onChange={(e) => setNetwork((e.target as HTMLSelectElement).value)}>
          <option value="">default</option>
          <option value="none">none</option>
          <option value="public">public</option>
          <option value="gateway_only">gateway_only</option>
        </select>
      </label>
      <div class="row">
        <button type="submit" disabled={busy}>
          Create
        </button>
        <button type="button" onClick={() => setOpen(false)}>
          Cancel
        </button>
      </div>
      <ErrorLine error={error} />
    </form>
  );
}
