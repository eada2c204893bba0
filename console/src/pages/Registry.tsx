// The registry pages: annotation schemas, volumes, secrets (metadata only: a value is written
// once and never shown), workloads with their launch ACLs, usage against quotas, and API keys
// with console sessions (the operator organization's owners: AdminListApiKeys).
import { useState } from "preact/hooks";
import { api, listPage } from "../api.js";
import { age, ConfirmButton, Empty, ErrorLine, Pager, useLoad, usePager } from "../components/common.js";

type Row = Record<string, unknown>;

/** A paginated (or whole, when `paged` is false) list as a table of the named fields. */
function ListTable(props: {
  title: string;
  route: string;
  itemsKey: string;
  fields: [string, string][];
  paged?: boolean;
  empty: string;
}) {
  const pager = usePager();
  const paged = props.paged !== false;
  const list = useLoad(
    async () =>
      paged
        ? listPage<Row>(props.route, props.itemsKey, pager.token)
        : {
            items: ((await api.transport.json<Row>("GET", props.route))[props.itemsKey] as Row[]) ?? [],
            next: "",
          },
    [props.route, pager.token],
  );
  const id = `${props.itemsKey}-title`;
  return (
    <section aria-labelledby={id}>
      <h1 id={id}>{props.title}</h1>
      <ErrorLine error={list.error} />
      {list.data && list.data.items.length === 0 ? <Empty>{props.empty}</Empty> : null}
      {list.data && list.data.items.length > 0 ? (
        <table>
          <thead>
            <tr>
              {props.fields.map(([, label]) => (
                <th scope="col" key={label}>
                  {label}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {list.data.items.map((item, i) => (
              <tr key={i}>
                {props.fields.map(([field]) => (
                  <td key={field}>{show(item[field])}</td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {paged ? <Pager pager={pager} next={list.data?.next ?? ""} label={props.title} /> : null}
    </section>
  );
}

function show(value: unknown): string {
  if (value === undefined || value === null || value === "") return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export const Schemas = () => (
  <ListTable
    title="Annotation schemas"
    route="/v1/annotation-schemas"
    itemsKey="schemas"
    paged={false}
    fields={[
      ["name", "Name"],
      ["version", "Version"],
      ["state", "State"],
      ["created_at", "Created"],
    ]}
    empty="No annotation schemas registered."
  />
);

export const Volumes = () => (
  <ListTable
    title="Volumes"
    route="/v1/volumes"
    itemsKey="volumes"
    fields={[
      ["name", "Name"],
      ["id", "Id"],
      ["current_version", "Version"],
      ["quota_bytes", "Quota (bytes)"],
      ["created_at", "Created"],
    ]}
    empty="No volumes."
  />
);

export const Workloads = () => (
  <ListTable
    title="Workloads"
    route="/v1/workloads"
    itemsKey="workloads"
    fields={[
      ["name", "Name"],
      ["description", "Description"],
      ["launch_acl", "Launch ACL"],
      ["created_at", "Created"],
    ]}
    empty="No workloads registered."
  />
);

export function Secrets() {
  const [name, setName] = useState("");
  const [value, setValue] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [version, setVersion] = useState(0);
  return (
    <>
      <ListTable
        key={version}
        title="Secrets"
        route="/v1/secrets"
        itemsKey="secrets"
        fields={[
          ["name", "Name"],
          ["id", "Id"],
          ["delivery", "Delivery"],
          ["state", "State"],
          ["created_at", "Created"],
        ]}
        empty="No secrets."
      />
      <form
        class="card"
        aria-label="New secret"
        onSubmit={async (e) => {
          e.preventDefault();
          setError(null);
          try {
            await api.secrets.create({ name, value, delivery: "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT" } as never);
            setName("");
            setValue("");
            setVersion(version + 1);
          } catch (err) {
            setError(err);
          }
        }}
      >
        <h2>New secret</h2>
        <label>
          Name <input value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Value (written once, never shown again)
          <input
            type="password"
            autocomplete="off"
            value={value}
            onInput={(e) => setValue((e.target as HTMLInputElement).value)}
          />
        </label>
        <button type="submit">Create secret</button>
        <ErrorLine error={error} />
      </form>
    </>
  );
}

export function Usage() {
  const usage = useLoad(() => api.usage(), [], 10_000);
  return (
    <section aria-labelledby="usage-title">
      <h1 id="usage-title">Usage</h1>
      <ErrorLine error={usage.error} />
      {usage.data ? (
        <table>
          <thead>
            <tr>
              <th scope="col">Quota</th>
              <th scope="col">In use</th>
              <th scope="col">Reserved</th>
              <th scope="col">Limit</th>
              <th scope="col">Unit</th>
            </tr>
          </thead>
          <tbody>
            {usage.data.limits.map((q) => (
              <tr key={q.metric}>
                <td>{q.metric}</td>
                <td>
                  <meter
                    min={0}
                    max={Number(q.limit) || 1}
                    value={Number(q.current)}
                    aria-label={`${q.metric} in use`}
                  />{" "}
                  {q.current}
                </td>
                <td>{q.reserved}</td>
                <td>{q.limit}</td>
                <td>{q.unit}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}

interface KeyRow {
  key_id: string;
  key_name: string;
  kind: string;
  role: string;
  email: string;
  created_at: string;
  revoked_at: string;
  expires_at: string;
  session_of_key_id: string;
}

export function Keys(props: { orgId: string }) {
  const keys = useLoad(
    async () =>
      (
        await api.transport.json<{ api_keys: KeyRow[] }>(
          "GET",
          `/v1/admin/organizations/${encodeURIComponent(props.orgId)}/api-keys`,
        )
      ).api_keys,
    [props.orgId],
  );
  const [error, setError] = useState<unknown>(null);
  return (
    <section aria-labelledby="keys-title">
      <h1 id="keys-title">API keys and console sessions</h1>
      <p class="hint">Listing keys takes an owner of the operator organization (the admin routes).</p>
      <ErrorLine error={keys.error ?? error} />
      {keys.data && keys.data.length === 0 ? <Empty>No keys.</Empty> : null}
      {keys.data && keys.data.length > 0 ? (
        <table data-testid="keys">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Kind</th>
              <th scope="col">Role</th>
              <th scope="col">Created</th>
              <th scope="col">State</th>
              <th scope="col">Revoke</th>
            </tr>
          </thead>
          <tbody>
            {keys.data.map((k) => {
              const expired = k.expires_at !== "" && Date.parse(k.expires_at) <= Date.now();
              const state = k.revoked_at ? "revoked" : expired ? "expired" : "live";
              return (
                <tr key={k.key_id} data-key-id={k.key_id}>
                  <td>
                    {k.key_name} <small>{k.session_of_key_id ? "console session" : "API key"}</small>
                  </td>
                  <td>{k.kind}</td>
                  <td>{k.role}</td>
                  <td>{age(k.created_at)} ago</td>
                  <td data-testid="key-state">{state}</td>
                  <td>
                    {state === "live" ? (
                      <ConfirmButton
                        label={`Revoke ${k.key_name}`}
                        danger
                        question={`Revoke ${k.key_name}? Everything using it is refused from now on${k.session_of_key_id ? "" : ", and its console sessions too"}.`}
                        onConfirm={async () => {
                          try {
                            await api.transport.json(
                              "POST",
                              `/v1/admin/api-keys/${encodeURIComponent(k.key_id)}:revoke`,
                            );
                            await keys.reload();
                          } catch (e) {
                            setError(e);
                          }
                        }}
                      />
                    ) : null}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}
