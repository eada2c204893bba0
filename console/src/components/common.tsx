// Shared pieces: the error line (the API's message), empty states, a paginated table's pager,
// a confirmation dialog for destructive actions, and the hook that loads data with them.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { messageOf } from "../api.js";

export function ErrorLine(props: { error: unknown }) {
  if (!props.error) return null;
  return (
    <p class="error" role="alert">
      {messageOf(props.error)}
    </p>
  );
}

export function Empty(props: { children: ComponentChildren }) {
  return <p class="empty">{props.children}</p>;
}

/** Loads `load()` now, again when `deps` change and every `pollMs` (when given). */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[], pollMs = 0) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const latest = useRef(0);
  const run = useCallback(async () => {
    const ticket = ++latest.current;
    try {
      const value = await load();
      if (ticket === latest.current) {
        setData(value);
        setError(null);
      }
    } catch (e) {
      if (ticket === latest.current) setError(e);
    } finally {
      if (ticket === latest.current) setLoading(false);
    }
  }, deps);
  useEffect(() => {
    // New deps: the last answer is another's (a sandbox page showing the previous sandbox's state).
    setData(null);
    setLoading(true);
    void run();
    if (pollMs <= 0) return;
    const timer = setInterval(() => void run(), pollMs);
    return () => clearInterval(timer);
  }, [run, pollMs]);
  return { data, error, loading, reload: run };
}

/** Page tokens of a list: the tokens of the pages before this one, for Previous. */
export function usePager() {
  const [tokens, setTokens] = useState<string[]>([""]);
  const token = tokens[tokens.length - 1] ?? "";
  return {
    token,
    page: tokens.length,
    next: (nextToken: string) => setTokens([...tokens, nextToken]),
    previous: () => setTokens(tokens.length > 1 ? tokens.slice(0, -1) : tokens),
    reset: () => setTokens([""]),
  };
}

export function Pager(props: { pager: ReturnType<typeof usePager>; next: string; label: string }) {
  const { pager, next } = props;
  return (
    <nav class="pager" aria-label={`${props.label} pages`}>
      <button type="button" disabled={pager.page <= 1} onClick={pager.previous}>
        Previous
      </button>
      <span>Page {pager.page}</span>
      <button type="button" disabled={!next} onClick={() => pager.next(next)}>
        Next
      </button>
    </nav>
  );
}

/** A button that asks before it acts (destructive actions), in a modal dialog. */
export function ConfirmButton(props: {
  label: string;
  question: string;
  onConfirm: () => Promise<void> | void;
  danger?: boolean;
}) {
  const dialog = useRef<HTMLDialogElement>(null);
  return (
    <>
      <button type="button" class={props.danger ? "danger" : ""} onClick={() => dialog.current?.showModal()}>
        {props.label}
      </button>
      <dialog ref={dialog} aria-label={props.label}>
        <p>{props.question}</p>
        <div class="row">
          <button
            type="button"
            class={props.danger ? "danger" : ""}
            onClick={async () => {
              dialog.current?.close();
              await props.onConfirm();
            }}
          >
            {props.label}
          </button>
          <button type="button" onClick={() => dialog.current?.close()}>
            Cancel
          </button>
        </div>
      </dialog>
    </>
  );
}

export function age(iso: string | undefined): string {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.floor(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}
