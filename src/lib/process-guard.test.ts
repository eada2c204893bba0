// installProcessGuard in a real child process: an exception thrown inside a socket's 'data'
// listener, and a rejection nobody handles, are logged and the process keeps answering HTTP;
// without the guard the same throw ends the process.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import net from "node:net";
import { describe, it } from "node:test";
import { eventually } from "../../test/support/eventually.js";
import { projectFile } from "./paths.js";

const CHILD = `
import http from "node:http";
import net from "node:net";
import { createLogger } from ${JSON.stringify(projectFile("src/lib/logger.ts"))};
import { installProcessGuard } from ${JSON.stringify(projectFile("src/lib/process-guard.ts"))};
if (process.argv.includes("--guard")) installProcessGuard(createLogger("info", process.stderr));
const sockets = net.createServer((socket) => {
  socket.on("data", (chunk) => {
    if (String(chunk).startsWith("reject")) Promise.reject(new Error("boom in a promise"));
    else throw new Error("boom in a data listener");
  });
});
const web = http.createServer((_, res) => res.end("alive"));
await new Promise((resolve) => sockets.listen(0, "127.0.0.1", resolve));
await new Promise((resolve) => web.listen(0, "127.0.0.1", resolve));
process.stdout.write(JSON.stringify({ socket: sockets.address().port, http: web.address().port }) + "\\n");
`;

async function startChild(guard: boolean) {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "--input-type=module", "-e", CHILD, "--", ...(guard ? ["--guard"] : [])],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const ports = await new Promise<{ socket: number; http: number }>((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes("\n")) resolve(JSON.parse(out));
    });
    child.on("exit", () => reject(new Error(`the child exited: ${stderr}`)));
  });
  return { child, ports, exited, stderr: () => stderr };
}

async function send(port: number, text: string): Promise<void> {
  const socket = net.connect(port, "127.0.0.1");
  socket.on("error", () => undefined);
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  socket.write(text);
  await new Promise((resolve) => setTimeout(resolve, 200));
  socket.destroy();
}

describe("installProcessGuard", () => {
  it("contains a throw in a socket listener and an unhandled rejection; the server keeps answering", async () => {
    const { child, ports, exited, stderr } = await startChild(true);
    try {
      await send(ports.socket, "throw");
      await send(ports.socket, "reject");
      // The child logs each when its loop gets to the data: wait for the lines, not a fixed time.
      await eventually("both failures logged", async () =>
        [/boom in a data listener/, /boom in a promise/, /uncaught error contained/].every((line) =>
          line.test(stderr()),
        ),
      ).catch(() => undefined); // the assertions below say which line is missing
      assert.match(stderr(), /boom in a data listener/);
      assert.match(stderr(), /boom in a promise/);
      assert.match(stderr(), /uncaught error contained/);
      const res = await fetch(`http://127.0.0.1:${ports.http}/`);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), "alive");
      assert.equal(child.exitCode, null);
    } finally {
      child.kill();
      await exited;
    }
  });

  it("is what keeps it alive: without it the same throw ends the process", async () => {
    const { child, ports, exited } = await startChild(false);
    try {
      await send(ports.socket, "throw");
      assert.equal(await exited, 1);
    } finally {
      child.kill();
    }
  });
});
