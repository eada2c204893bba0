// Runs: the list (paginated), and a run's page: its lineage (parent, children), the timeline
// of its events (virtualized, live over the run tail), an event's payload, and its annotations.
import type { Run, TailEvent } from "@warren/sdk";
import { useEffect, useRef, useState } from "preact/hooks";
import { api, listPage, messageOf } from "../api.js";
import { age, Empty, ErrorLine, Pager, useLoad, usePager } from "../components/common.js";
import { VirtualList } from "../components/VirtualList.js";
import { Link } from "../router.js";

export function Runs() {
  const pager = usePager();
  const list = useLoad(() => listPage<Run>("/v1/runs", "runs", pager.token), [pager.token], 5000);
  return (
    <section aria-labelledby="runs-title">
      <h1 id="runs-title">Runs</h1>
      <ErrorLine error={list.error} />
      {list.data && list.data.items.length === 0 ? <Empty>No runs yet. Every sandbox has an ambient run.</Empty> : null}
      {list.data && list.data.items.length > 0 ? (
        <table>
          <thead>
            <tr>
              <th scope="col">Run</th>
              <th scope="col">Label</th>
              <th scope="col">Status</th>
              <th scope="col">Started</th>
            </tr>
          </thead>
          <tbody>
            {list.data.items.map((run) => (
              <tr key={run.id}>
                <td>
                  <Link href={`/runs/${run.id}`}>{run.id}</Link>
                </td>
                <td>{run.label}</td>
                <td>{run.status}</td>
                <td>{age(run.started_at)} ago</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager pager={pager} next={list.data?.next ?? ""} label="Runs" />
    </section>
  );
}

interface TimelineEvent {
  event_id: string;
  name: string;
  kind: string;
  ts_wall_ns: string;
  schema_name?: string;
  payload?: unknown;
}

/** Annotations listed under the timeline: the latest ones (the timeline holds them all). */
const LISTED_ANNOTATIONS = 100;

/**
 * The tail's events kept in one array that only grows (never copied: a run of 100,000 events
 * would copy them every frame); a render is asked once per animation frame with the count.
 */
function useRunTail(runId: string) {
  const [count, setCount] = useState(0);
  const [status, setStatus] = useState("connecting");
  const all = useRef<TimelineEvent[]>([]);
  const annotations = useRef<TimelineEvent[]>([]);
  useEffect(() => {
    all.current = [];
    annotations.current = [];
    setCount(0);
    const abort = new AbortController();
    let frame = 0;
    const flush = () => {
      frame = 0;
      setCount(all.current.length);
    };
    void (async () => {
      try {
        for await (const item of api.runs.tail(runId, {
          signal: abort.signal,
          onOpen: () => setStatus("live"),
        }) as AsyncIterable<TailEvent>) {
          if (item.event === "end") {
            setStatus(`ended (${String(item.data.reason ?? "")})`);
            break;
          }
          const event = item.data as unknown as TimelineEvent;
          all.current.push(event);
          if (event.kind === "annotation") annotations.current.push(event);
          if (!frame) frame = requestAnimationFrame(flush);
        }
      } catch (error) {
        if (!abort.signal.aborted) setStatus(`closed: ${messageOf(error)}`);
      } finally {
        if (!abort.signal.aborted) flush();
      }
    })();
    return () => {
      abort.abort();
      if (frame) cancelAnimationFrame(frame);
    };
  }, [runId]);
  return { events: all.current, annotations: annotations.current, count, status };
}

function when(ns: string): string {
  const ms = Number(BigInt(ns) / 1_000_000n);
  return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

export function RunPage(props: { id: string }) {
  const run = useLoad(async () => (await api.runs.get(props.id)) as Run, [props.id], 5000);
  const children = useLoad(() => listPage<Run>("/v1/runs", "runs", "", { parent_run_id: props.id }, 20), [props.id]);
  const { events, annotations, count, status } = useRunTail(props.id);
  const [selected, setSelected] = useState<TimelineEvent | null>(null);
  const listed = annotations.slice(-LISTED_ANNOTATIONS).reverse();
  const r = run.data;
  return (
    <section aria-labelledby="run-title">
      <p>
        <Link href="/runs">Runs</Link> /
      </p>
      <h1 id="run-title">Run {props.id}</h1>
      <ErrorLine error={run.error} />
      {r ? (
        <dl class="facts">
          <dt>Label</dt>
          <dd>{r.label || "none"}</dd>
          <dt>Status</dt>
          <dd>{r.status}</dd>
          <dt>Started</dt>
          <dd>{r.started_at}</dd>
          <dt>Parent</dt>
          <dd>
            {r.parent_run_id ? <Link href={`/runs/${r.parent_run_id}`}>{r.parent_run_id}</Link> : "none (a root run)"}
          </dd>
          <dt>Children</dt>
          <dd>
            {(children.data?.items ?? []).length === 0
              ? "none"
              : children.data?.items.map((c) => (
                  <div key={c.id}>
                    <Link href={`/runs/${c.id}`}>{c.label || c.id}</Link>
                  </div>
                ))}
          </dd>
        </dl>
      ) : null}
      <h2>Timeline</h2>
      <p role="status" data-testid="tail-status">
        {count} events · tail {status}
      </p>
      {count === 0 ? <Empty>No events yet; new ones appear here as they commit.</Empty> : null}
      <VirtualList
        items={events}
        count={count}
        rowHeight={28}
        height={360}
        follow
        label="Events of the run"
        row={(e) => (
          <button
            type="button"
            class={`event kind-${e.kind}`}
            aria-pressed={selected?.event_id === e.event_id}
            onClick={() => setSelected(e)}
          >
            <span class="ts">{when(e.ts_wall_ns)}</span> <span class="name">{e.name}</span>
            {e.schema_name ? <span class="schema"> [{e.schema_name}]</span> : null}
          </button>
        )}
      />
      {selected ? (
        <figure>
          <figcaption>
            Event {selected.event_id} ({selected.name})
          </figcaption>
          {/* A scrolled region takes a tab stop (axe: scrollable-region-focusable). */}
          {/* biome-ignore lint/a11y/noNoninteractiveTabindex: see above */}
          <pre class="payload" tabIndex={0}>
            {JSON.stringify(selected.payload, null, 2)}
          </pre>
        </figure>
      ) : null}
      <h2>Annotations</h2>
      {annotations.length === 0 ? <Empty>No annotations on this run.</Empty> : null}
      {annotations.length > LISTED_ANNOTATIONS ? (
        <p class="hint">
          {annotations.length} annotations; the latest {LISTED_ANNOTATIONS} are listed (all are on the timeline).
        </p>
      ) : null}
      <ul class="annotations" data-testid="annotations">
        {listed.map((a) => (
          <li key={a.event_id}>
            <strong>{a.schema_name}</strong> at {when(a.ts_wall_ns)}: <code>{JSON.stringify(a.payload)}</code>
          </li>
        ))}
      </ul>
    </section>
  );
}
