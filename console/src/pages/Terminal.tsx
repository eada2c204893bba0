// A terminal in the sandbox: xterm.js over the streaming exec's WebSocket (the SDK's
// execStream, authenticated by the session cookie), a shell with a PTY sized to the view.
import { FitAddon } from "@xterm/addon-fit";
import { Terminal as XTerm } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import type { ExecStream } from "@warren/sdk";
import { useEffect, useRef, useState } from "preact/hooks";
import { api, messageOf } from "../api.js";

export function Terminal(props: { sandboxId: string; running: boolean }) {
  const host = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState("connecting");
  const [session, setSession] = useState(0);
  useEffect(() => {
    if (!props.running || !host.current) return;
    const term = new XTerm({ cursorBlink: true, fontSize: 14, convertEol: false, screenReaderMode: true });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(host.current);
    fit.fit();
    let stream: ExecStream | null = null;
    let closed = false;
    const decoder = new TextDecoder();
    void (async () => {
      const sandbox = await api.sandboxes.get(props.sandboxId);
      stream = sandbox.execStream(["/bin/sh", "-i"], {
        tty: { rows: term.rows, cols: term.cols },
        env: { TERM: "xterm-256color" },
        onStdout: (data) => term.write(decoder.decode(data, { stream: true })),
        onStderr: (data) => term.write(decoder.decode(data, { stream: true })),
      });
      try {
        await stream.started;
        if (!closed) setStatus("connected");
        term.focus();
        const result = await stream.wait();
        if (!closed) setStatus(result.kind === "completed" ? `exited ${result.exit}` : result.kind);
      } catch (error) {
        if (!closed) setStatus(`closed: ${messageOf(error)}`);
      }
    })();
    const input = term.onData((data) => void stream?.write(data).catch(() => undefined));
    const resize = term.onResize(({ rows, cols }) => stream?.resize(rows, cols));
    const onWindow = () => fit.fit();
    window.addEventListener("resize", onWindow);
    return () => {
      closed = true;
      window.removeEventListener("resize", onWindow);
      input.dispose();
      resize.dispose();
      stream?.kill();
      term.dispose();
    };
  }, [props.sandboxId, props.running, session]);
  if (!props.running) return <p class="empty">The terminal opens once the sandbox is running.</p>;
  return (
    <section aria-label="Terminal">
      <p role="status" data-testid="terminal-status">
        Terminal: {status}{" "}
        <button type="button" onClick={() => setSession(session + 1)}>
          New session
        </button>
      </p>
      <div class="terminal" ref={host} data-testid="terminal" />
    </section>
  );
}
