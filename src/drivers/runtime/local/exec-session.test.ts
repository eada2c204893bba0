// Streaming sessions on the exec agent, through the local driver on real runc: stdin in,
// stdout/stderr out, exit status; a pseudo-terminal inside the sandbox (echo, size, resize);
// output held while unacknowledged (flow control); and hostile frames from an "agent".
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import type { SandboxSession, SessionHandlers } from "../interface.js";
import { RuntimeError } from "../interface.js";
import { ExecAgent, encodeFrame } from "./exec-agent.js";
import { encodeSessionHeader, SESSION_WINDOW } from "./exec-session.js";
import { type RuntimeFixture, startRuntimeFixture, startSandbox } from "./test-support.js";

interface Collected {
  stdout: Buffer[];
  stderr: Buffer[];
  end: Promise<{ exit: number | null; lost?: string }>;
  text(): string;
}

function collector(options: { holdAcks?: boolean } = {}): {
  handlers: SessionHandlers;
  got: Collected;
  held: (() => void)[];
} {
  const held: (() => void)[] = [];
  let ended!: (end: { exit: number | null; lost?: string }) => void;
  const got: Collected = {
    stdout: [],
    stderr: [],
    end: new Promise((resolve) => {
      ended = resolve;
    }),
    text: () => Buffer.concat(got.stdout).toString("utf8"),
  };
  const take = (into: Buffer[]) => (data: Buffer, done: () => void) => {
    into.push(data);
    if (options.holdAcks) held.push(done);
    else done();
  };
  return { handlers: { onStdout: take(got.stdout), onStderr: take(got.stderr), onEnd: ended }, got, held };
}

async function waitFor(check: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out waiting");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("exec agent sessions on real sandboxes", { timeout: 120_000 }, () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  let id: string;
  before(async () => {
    f = await startRuntimeFixture("session");
    id = await startSandbox(f, made);
  });
  after(async () => {
    for (const sandbox of made) await f?.driver.destroy(sandbox).catch(() => undefined);
    await f?.cleanup();
  });

  it("feeds stdin, streams stdout and stderr apart, reports the exit status", async () => {
    const { handlers, got } = collector();
    const session = await f.driver.openSession(
      id,
      { argv: ["sh", "-c", "cat; echo oops >&2; exit 7"], pty: null },
      handlers,
    );
    session.write(Buffer.from("hello "));
    session.write(Buffer.from("world\n"));
    await waitFor(() => got.text() === "hello world\n");
    session.end();
    assert.deepEqual(await got.end, { exit: 7 });
    assert.equal(Buffer.concat(got.stderr).toString(), "oops\n");
  });

  it("runs a shell on a terminal inside the sandbox: echo, prompt, size and resize", async () => {
    const { handlers, got } = collector();
    const session = await f.driver.openSession(
      id,
      { argv: ["sh"], env: { PS1: "PROMPT> " }, pty: { rows: 33, cols: 101 } },
      handlers,
    );
    await waitFor(() => got.text().includes("PROMPT> "));
    session.write(Buffer.from("stty size; tty\n"));
    await waitFor(() => /33 101\r\n\/dev\/pts\/\d+\r\n/.test(got.text()));
    // The terminal echoes what was typed (the command line appears before its output).
    assert.match(got.text(), /stty size; tty\r\n33 101/);
    session.resize(40, 120);
    session.write(Buffer.from("stty size\n"));
    await waitFor(() => got.text().includes("40 120"));
    session.write(Buffer.from("exit 3\n"));
    assert.deepEqual(await got.end, { exit: 3 });
    assert.equal(got.stderr.length, 0, "a terminal session's output is all stdout");
  });

  it("gives a terminal command exactly fds 0-2 (the slave is not leaked, no master reaches it)", async () => {
    const { handlers, got } = collector();
    await f.driver.openSession(id, { argv: ["ls", "/proc/self/fd"], pty: { rows: 24, cols: 80 } }, handlers);
    assert.deepEqual(await got.end, { exit: 0 });
    // ls's own directory fd is the 3.
    assert.deepEqual(got.text().trim().split(/\s+/), ["0", "1", "2", "3"]);
  });

  it("holds the command while its output is not acknowledged, and loses nothing", async () => {
    const { handlers, got, held } = collector({ holdAcks: true });
    const total = 4 * SESSION_WINDOW;
    await f.driver.openSession(id, { argv: ["head", "-c", String(total), "/dev/zero"], pty: null }, handlers);
    const size = () => got.stdout.reduce((sum, b) => sum + b.length, 0);
    await waitFor(() => size() > 0);
    // A window of absence: output that ignored the held acknowledgements would pass the bound in it.
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.ok(size() <= SESSION_WINDOW + (64 << 10), `held at the window, got ${size()}`);
    // Acknowledging lets the rest come.
    const pump = setInterval(() => {
      for (const done of held.splice(0)) done();
    }, 5);
    try {
      assert.deepEqual(await got.end, { exit: 0 });
    } finally {
      clearInterval(pump);
    }
    assert.equal(size(), total);
  });

  it("keeps the window after the exit: a background writer with nobody reading ends the session cleanly", async () => {
    const { handlers, got } = collector({ holdAcks: true });
    // `yes` outlives the shell and writes as fast as it can; no output is acknowledged.
    await f.driver.openSession(id, { argv: ["sh", "-c", "yes & sleep 0.1; exit 6"], pty: null }, handlers);
    assert.deepEqual(await got.end, { exit: 6 }, "ended with its status, not as a broken protocol");
    const size = got.stdout.reduce((sum, b) => sum + b.length, 0);
    assert.ok(size <= SESSION_WINDOW + 33 * (64 << 10), `bounded output, got ${size}`);
    const { handlers: after, got: afterGot } = collector();
    await f.driver.openSession(id, { argv: ["echo", "agent still here"], pty: null }, after);
    assert.deepEqual(await afterGot.end, { exit: 0 });
    assert.equal(afterGot.text(), "agent still here\n");
  });

  it("refuses a command that does not exist, and a sandbox that is not running", async () => {
    const { handlers } = collector();
    await assert.rejects(
      f.driver.openSession(id, { argv: ["no-such-program"], pty: null }, handlers),
      (error: unknown) => error instanceof RuntimeError && error.code === "start_failed",
    );
    const stopped = await startSandbox(f, made);
    await f.driver.stop(stopped);
    await assert.rejects(
      f.driver.openSession(stopped, { argv: ["true"], pty: null }, handlers),
      (error: unknown) => error instanceof RuntimeError && error.code === "not_running",
    );
  });
});

describe("a hostile agent's session frames", { timeout: 30_000 }, () => {
  async function agentPair(): Promise<{ agent: ExecAgent; peer: net.Socket; close(): void }> {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as net.AddressInfo).port;
    const accepted = new Promise<net.Socket>((resolve) => server.once("connection", resolve));
    const client = net.connect(port, "127.0.0.1");
    const peer = await accepted;
    const agent = new ExecAgent(client);
    peer.write(encodeFrame(0, "H", Buffer.from("warren-exec-agent 2")));
    await agent.hello;
    return {
      agent,
      peer,
      close: () => {
        client.destroy();
        peer.destroy();
        server.close();
      },
    };
  }

  const cases: [string, (execId: number) => Buffer][] = [
    ["stderr on a terminal session", (execId) => encodeFrame(execId, "E", Buffer.from("x"))],
    ["an acknowledgement of input never sent", (execId) => encodeFrame(execId, "a", Buffer.from([1, 0, 0, 0]))],
    [
      "output far beyond the window",
      // The window and the slack the host allows past it (33 chunks), then 8 chunks more.
      (execId) =>
        Buffer.concat(
          Array.from({ length: SESSION_WINDOW / (64 << 10) + 33 + 8 }, () =>
            encodeFrame(execId, "O", Buffer.alloc(64 << 10)),
          ),
        ),
    ],
    ["a done before the exit", (execId) => encodeFrame(execId, "D")],
  ];
  for (const [name, frames] of cases) {
    it(`ends the session, not the process, on ${name}`, async () => {
      const pair = await agentPair();
      try {
        const sent: Buffer[] = [];
        pair.peer.on("data", (chunk: Buffer) => sent.push(chunk));
        // Acknowledgements held, as a slow client would: the window is the agent's to keep.
        const { handlers, got } = collector({ holdAcks: true });
        const opening = pair.agent.openSession({ argv: ["sh"], env: [], cwd: "/" }, { rows: 1, cols: 1 }, handlers);
        await waitFor(() => sent.length > 0);
        // The request carries the session header: flags 1 (a terminal), rows, cols.
        const request = Buffer.concat(sent);
        assert.equal(String.fromCharCode(request[4] as number), "S");
        assert.deepEqual(request.subarray(9, 21), encodeSessionHeader({ rows: 1, cols: 1 }));
        const execId = request.readUInt32LE(0);
        pair.peer.write(encodeFrame(execId, "P", Buffer.from([9, 0, 0, 0])));
        const session: SandboxSession = await opening;
        assert.ok(session);
        pair.peer.write(frames(execId));
        const end = await got.end;
        assert.equal(end.exit, null);
        assert.match(end.lost ?? "", /broke the protocol/);
        assert.equal(pair.agent.alive, false);
      } finally {
        pair.close();
      }
    });
  }
});
