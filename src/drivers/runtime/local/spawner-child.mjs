// The small process that starts host tools for the server (see spawner.ts). Plain
// JavaScript on purpose: it runs without the TypeScript loader so that its memory, which
// every fork copies, stays a tenth of the server's.
import { spawn } from "node:child_process";

/** @param {Record<string, unknown>} message */
function reply(message) {
  if (process.connected) process.send?.(message);
}

/** @param {{ id: number, file: string, args: string[], cwd?: string, input?: string }} request */
function run(request) {
  const stdin = request.input === undefined ? "ignore" : "pipe";
  let child;
  try {
    child = spawn(request.file, request.args, { cwd: request.cwd, stdio: [stdin, "pipe", "pipe"] });
  } catch (error) {
    reply({ id: request.id, error: /** @type {Error} */ (error).message });
    return;
  }
  /** @type {Buffer[]} */
  const stdout = [];
  /** @type {Buffer[]} */
  const stderr = [];
  let failed = false;
  child.stdout?.on("data", (chunk) => stdout.push(chunk));
  child.stderr?.on("data", (chunk) => stderr.push(chunk));
  child.on("error", (error) => {
    failed = true;
    reply({ id: request.id, error: error.message });
  });
  child.on("close", (code, signal) => {
    if (failed) return;
    reply({
      id: request.id,
      code,
      signal,
      stdout: Buffer.concat(stdout).toString("utf8"),
      stderr: Buffer.concat(stderr).toString("utf8"),
    });
  });
  if (child.stdin) {
    child.stdin.on("error", () => undefined);
    child.stdin.end(request.input);
  }
}

/** @param {{ id: number, file: string, args: string[], cwd?: string }} request */
function detach(request) {
  try {
    const child = spawn(request.file, request.args, { cwd: request.cwd, stdio: "ignore", detached: true });
    child.on("error", (error) => reply({ id: request.id, error: error.message }));
    child.unref();
    if (child.pid !== undefined) reply({ id: request.id, pid: child.pid });
  } catch (error) {
    reply({ id: request.id, error: /** @type {Error} */ (error).message });
  }
}

process.on("message", (/** @type {any} */ request) => {
  if (request?.op === "run") run(request);
  else if (request?.op === "detach") detach(request);
});
// The server is gone: what was started detached lives on; nothing else is waited for.
process.on("disconnect", () => process.exit(0));
