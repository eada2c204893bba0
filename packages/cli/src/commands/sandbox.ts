// warren sandbox create|list|get|exec|stop|wake|delete|ssh|snapshot|cp (cp.ts) and warren snapshot list|delete|restore.
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { Command } from "commander";
import type { CreateSandboxBody, Sandbox, SandboxRecord, SnapshotRecord } from "../../../sdk/src/index.js";
import {
  client,
  collect,
  EXIT,
  type GlobalOptions,
  integer,
  KEEP_ALIVE_COMMAND,
  output,
  pairs,
  record,
  table,
  UsageError,
} from "../context.js";
import { type Action, example } from "../program.js";
import { registerCp } from "./cp.js";
import { streamExec } from "./exec-stream.js";
import { registerProcessCommands } from "./processes.js";

const SANDBOX_COLUMNS = ["id", "name", "state", "image", "created_at"];

const sandboxRow = (s: SandboxRecord) => ({
  id: s.id,
  name: s.name ?? "",
  state: s.state,
  image: "image" in s ? s.image : `snapshot:${s.snapshot_id}`,
  created_at: s.created_at,
});

interface CreateFlags {
  image?: string;
  snapshot?: string;
  name?: string;
  network?: "public" | "gateway_only" | "none";
  memory?: number;
  cpu?: number;
  storage?: "standard" | "durable";
  workspaceGib?: number;
  ttl?: number;
  idleTimeout?: number;
  metadata?: string[];
  port?: string[];
  volume?: string[];
  secret?: string[];
  wait: boolean;
}

function createBody(flags: CreateFlags, command: string[]): CreateSandboxBody {
  const body: Record<string, unknown> = {};
  if (flags.snapshot) {
    body.snapshot_id = flags.snapshot;
    if (flags.image) body.image_override = flags.image;
  } else if (flags.image) body.image = flags.image;
  // Without a command the sandbox is kept alive (KEEP_ALIVE_COMMAND), not left to the image's CMD.
  body.command = command.length > 0 ? command : [...KEEP_ALIVE_COMMAND];
  if (flags.name) body.name = flags.name;
  if (flags.network) body.network_access = flags.network;
  if (flags.memory !== undefined || flags.cpu !== undefined) {
    body.resources = {
      ...(flags.memory !== undefined ? { memory_mb: flags.memory } : {}),
      ...(flags.cpu !== undefined ? { cpu_millis: flags.cpu } : {}),
    };
  }
  if (flags.storage) body.storage_class = flags.storage;
  if (flags.workspaceGib !== undefined) body.workspace_capacity_gib = flags.workspaceGib;
  if (flags.ttl !== undefined) body.ttl_seconds = flags.ttl;
  if (flags.idleTimeout !== undefined) body.idle_timeout_seconds = flags.idleTimeout;
  const metadata = pairs(flags.metadata);
  if (metadata) body.metadata = metadata;
  if (flags.port) body.ports = flags.port.map((p) => integer(p));
  if (flags.volume) {
    body.volumes = flags.volume.map((spec) => {
      const [volumeId, target] = spec.split(":");
      if (!volumeId || !target) throw new UsageError(`--volume "${spec}": VOLUME_ID:/target/path`);
      return { volume_id: volumeId, target_path: target };
    });
  }
  if (flags.secret) body.secrets = flags.secret.map((name) => ({ name }));
  return body as CreateSandboxBody;
}

function addCreateOptions(command: Command): Command {
  return command
    .option("--image <ref>", "OCI image (default: the deployment's); with --snapshot: image_override")
    .option("--name <name>", "unique name in the project")
    .option("--network <mode>", "public | gateway_only | none")
    .option("--memory <mib>", "memory in MiB", integer)
    .option("--cpu <millis>", "CPU in millis (1000 = one vCPU)", integer)
    .option("--storage <class>", "standard | durable")
    .option("--workspace-gib <gib>", "durable workspace capacity", integer)
    .option("--ttl <seconds>", "lifetime", integer)
    .option("--idle-timeout <seconds>", "stop after this long idle (60-86400)", integer)
    .option("--metadata <key=value>", "metadata entry (repeatable)", collect)
    .option("--port <port>", "guest TCP port to expose (repeatable)", collect)
    .option("--volume <id:/path>", "mount a volume's current version (repeatable)", collect)
    .option("--secret <name>", "bind a registered secret (repeatable)", collect)
    .option("--no-wait", "answer at once instead of waiting for running");
}

const megabytes = (bytes: number) => (bytes / 1e6).toFixed(1);

async function createAndShow(flags: CreateFlags, cmd: string[], g: GlobalOptions) {
  const out = output(g);
  const warren = await client(g);
  const started = Date.now();
  const sandbox = await warren.sandboxes.create(createBody(flags, cmd), {
    wait: flags.wait,
    onState: (state) => out.progress(`waiting for running: ${state} (${((Date.now() - started) / 1000).toFixed(1)} s)`),
    onProgress: (p) =>
      out.progress(
        `waiting for running: materializing, image ${megabytes(p.bytes_done)} of ${megabytes(p.bytes_total)} MB (${((Date.now() - started) / 1000).toFixed(1)} s)`,
      ),
  });
  out.done();
  out.print({ ...(sandbox.record ?? { id: sandbox.id }), run_id: sandbox.runId }, (s: SandboxRecord) =>
    record({ ...sandboxRow(s), run_id: sandbox.runId }),
  );
}

export function registerSandboxCommands(program: Command, action: (fn: Action) => (...args: unknown[]) => void) {
  const sandbox = program.command("sandbox").alias("sbx").description("sandboxes");

  addCreateOptions(
    example(
      sandbox.command("create").argument("[command...]", "argv of the first process (after --)"),
      "warren sandbox create --name dev --network none -- sleep infinity",
    ).description("create a sandbox and wait until it is running"),
  ).action(
    action(async (g, cmd: string[], flags: CreateFlags) => {
      await createAndShow(flags, cmd, g);
    }),
  );

  example(sandbox.command("list").description("list sandboxes, newest first"), "warren sandbox list --json")
    .option("--name <name>", "exact name")
    .option("--limit <n>", "at most this many", integer)
    .action(
      action(async (g, flags: { name?: string; limit?: number }) => {
        const warren = await client(g);
        const rows: SandboxRecord[] = [];
        for await (const s of warren.sandboxes.list(flags.name ? { name: flags.name } : {})) {
          if (s.record) rows.push(s.record);
          if (flags.limit !== undefined && rows.length >= flags.limit) break;
        }
        output(g).print(rows, (r: SandboxRecord[]) => table(r.map(sandboxRow), SANDBOX_COLUMNS));
      }),
    );

  example(sandbox.command("get <sandbox>").description("show a sandbox (id or name)"), "warren sandbox get dev")
    .option("--wait <state>", "wait until it is in this state")
    .action(
      action(async (g, ref: string, flags: { wait?: string }) => {
        const warren = await client(g);
        const s = await warren.sandboxes.get(ref);
        const out = output(g);
        if (flags.wait) await s.waitUntil(flags.wait as never, { onState: (state) => out.progress(`state: ${state}`) });
        out.done();
        out.print(s.record, (r: SandboxRecord) =>
          record({
            ...sandboxRow(r),
            ...(r.state_reason ? { state_reason: `${r.state_reason.code}: ${r.state_reason.message}` } : {}),
            network_access: r.network_access,
            ...(r.ports.length ? { ports: r.ports.join(",") } : {}),
            ...(r.ssh ? { ssh: r.ssh } : {}),
            ...(r.progress
              ? { progress: `image ${megabytes(r.progress.bytes_done)} of ${megabytes(r.progress.bytes_total)} MB` }
              : {}),
          }),
        );
      }),
    );

  example(
    sandbox
      .command("exec <sandbox>")
      .argument("<command...>", "argv (after --); not a shell line: use sh -c '...' for one")
      .description(
        "run a command, its output streamed as it comes and stdin forwarded from a pipe or file; exits with its exit code (124 timed out, 125 indeterminate, 127 not started)",
      ),
    "warren sandbox exec dev -- sh -c 'echo hello; uname -a'",
  )
    .option("--timeout <seconds>", "1-3600", integer)
    .option("--env <key=value>", "environment variable for this command (repeatable)", collect)
    .option("--cwd <path>", "absolute working directory")
    .option("-t, --tty", "a terminal inside the sandbox (raw mode here, its size followed)", false)
    .action(
      action(
        async (
          g,
          ref: string,
          cmd: string[],
          flags: { timeout?: number; env?: string[]; cwd?: string; tty: boolean },
        ) => {
          const warren = await client(g);
          const s = await resolve(warren, ref);
          const env = pairs(flags.env);
          if (!g.json) {
            return streamExec(s, cmd, {
              tty: flags.tty,
              ...(flags.timeout !== undefined ? { timeout: flags.timeout } : {}),
              ...(env ? { env } : {}),
              ...(flags.cwd ? { cwd: flags.cwd } : {}),
            });
          }
          // --json: ExecSandbox's one answer (no stdin, env or cwd: the unary exec takes none).
          if (env || flags.cwd || flags.tty) throw new UsageError("--env, --cwd and --tty stream: they take no --json");
          const result = await s.exec(cmd, flags.timeout !== undefined ? { timeoutSeconds: flags.timeout } : {});
          process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
          return result.kind === "completed"
            ? Math.min(255, Math.max(0, result.exit))
            : result.kind === "timed_out"
              ? EXIT.execTimedOut
              : EXIT.execIndeterminate;
        },
      ),
    );

  for (const [verb, state] of [
    ["stop", "stopped"],
    ["wake", "running"],
  ] as const) {
    example(
      sandbox.command(`${verb} <sandbox>`).description(`${verb} a sandbox and wait until it is ${state}`),
      `warren sandbox ${verb} dev`,
    )
      .option("--no-wait", "answer once the request is accepted")
      .action(
        action(async (g, ref: string, flags: { wait: boolean }) => {
          const warren = await client(g);
          const s = await resolve(warren, ref);
          const out = output(g);
          await s.update({ state });
          if (flags.wait) await s.waitUntil(state, { onState: (st) => out.progress(`waiting for ${state}: ${st}`) });
          else await s.refresh();
          out.done();
          out.print(s.record, (r: SandboxRecord) => record(sandboxRow(r)));
        }),
      );
  }

  example(sandbox.command("delete <sandbox>").description("delete a sandbox"), "warren sandbox delete dev")
    .alias("rm")
    .action(
      action(async (g, ref: string) => {
        const warren = await client(g);
        const s = await resolve(warren, ref);
        await s.delete();
        output(g).print({ id: s.id, request_state: "requested" }, (r: { id: string }) => `deleting ${r.id}\n`);
      }),
    );

  example(
    sandbox
      .command("ssh <sandbox>")
      .argument("[command...]", "remote command (after --)")
      .description("open an SSH session through the deployment's SSH gateway (runs your ssh client)"),
    "warren sandbox ssh dev",
  ).action(
    action(async (g, ref: string, cmd: string[]) => {
      const warren = await client(g);
      const s = await warren.sandboxes.get(ref);
      const ssh = s.record?.ssh;
      if (!ssh) {
        throw new UsageError(
          `sandbox ${s.id} has no SSH endpoint: this deployment has no SSH gateway, or the sandbox is not running (state ${s.state})`,
        );
      }
      const args = ["-p", String(ssh.port), `${ssh.user}@${ssh.host}`, ...cmd];
      if (g.json) {
        process.stdout.write(`${JSON.stringify({ ssh, command: ["ssh", ...args] })}\n`);
        return EXIT.ok;
      }
      // The password is a short-lived SSH token for this sandbox, handed to ssh through
      // SSH_ASKPASS from this process's child environment: never in argv, never in a file.
      const { token } = await s.sshToken({ ttlSeconds: 300 });
      const dir = await mkdtemp(path.join(os.tmpdir(), "warren-ssh-"));
      const askpass = path.join(dir, "askpass");
      await writeFile(askpass, '#!/bin/sh\nprintf "%s\\n" "$WARREN_SSH_PASSWORD"\n', { mode: 0o700 });
      const env = { ...process.env, SSH_ASKPASS: askpass, SSH_ASKPASS_REQUIRE: "force", WARREN_SSH_PASSWORD: token };
      return await new Promise<number>((resolveExit, reject) => {
        // accept-new: the gateway's host key is learnt on first use and a changed one refused.
        const options = ["-o", "PubkeyAuthentication=no", "-o", "StrictHostKeyChecking=accept-new"];
        const child = spawn("ssh", [...options, ...args], { stdio: "inherit", env });
        child.once("exit", () => void rm(dir, { recursive: true, force: true }));
        child.once("error", (error) =>
          reject(
            new UsageError(`could not run ssh (${(error as NodeJS.ErrnoException).code}): install an OpenSSH client`),
          ),
        );
        child.once("exit", (code) => resolveExit(code ?? EXIT.error));
      });
    }),
  );

  example(
    sandbox.command("snapshot <sandbox>").description("snapshot a sandbox (ready, running or stopped)"),
    "warren sandbox snapshot dev --name before-upgrade --wait-remote",
  )
    .option("--name <name>", "snapshot name")
    .option("--wait-remote", "wait until it is replicated to the blob store")
    .option("--wait-timeout <seconds>", "1-25", integer)
    .action(
      action(async (g, ref: string, flags: { name?: string; waitRemote?: boolean; waitTimeout?: number }) => {
        const warren = await client(g);
        const s = await resolve(warren, ref);
        const out = output(g);
        const started = Date.now();
        const timer = setInterval(
          () =>
            out.progress(
              `snapshotting${flags.waitRemote ? " and replicating" : ""} ${((Date.now() - started) / 1000).toFixed(0)} s`,
            ),
          250,
        );
        try {
          const snap = await s.snapshot({
            ...(flags.name ? { name: flags.name } : {}),
            ...(flags.waitRemote ? { waitRemote: true, waitTimeoutSeconds: flags.waitTimeout ?? 25 } : {}),
          });
          out.done();
          out.print(snap, (r: Record<string, unknown>) => record(r));
        } finally {
          clearInterval(timer);
        }
      }),
    );

  // Last of the sandbox commands: the help and the completion list them in this order.
  registerCp(sandbox, action);
  registerProcessCommands(sandbox, action);

  const snapshot = program.command("snapshot").description("sandbox snapshots");
  example(snapshot.command("list").description("list snapshots, newest first"), "warren snapshot list")
    .option("--name <name>", "exact name")
    .action(
      action(async (g, flags: { name?: string }) => {
        const warren = await client(g);
        const rows: SnapshotRecord[] = [];
        for await (const snap of warren.snapshots.list(flags.name ? ({ name: flags.name } as never) : {}))
          rows.push(snap);
        output(g).print(rows, (r: SnapshotRecord[]) =>
          table(r as never, ["id", "name", "durability", "source_sandbox_id", "created_at"]),
        );
      }),
    );
  example(snapshot.command("delete <snapshot>").description("delete a snapshot"), "warren snapshot delete snap_...")
    .alias("rm")
    .action(
      action(async (g, id: string) => {
        await (await client(g)).snapshots.delete(id);
        output(g).print({ id, deleted: true }, () => `deleted ${id}\n`);
      }),
    );
  addCreateOptions(
    example(
      snapshot
        .command("restore <snapshot>")
        .argument("[command...]", "argv of the first process (after --)")
        .description("create a sandbox from a snapshot and wait until it is running"),
      "warren snapshot restore snap_... --name dev2",
    ),
  ).action(
    action(async (g, id: string, cmd: string[], flags: CreateFlags) => {
      await createAndShow({ ...flags, snapshot: id }, cmd, g);
    }),
  );
}

/** A handle for an id or name without a round trip when it is already an id. */
async function resolve(warren: Awaited<ReturnType<typeof client>>, ref: string): Promise<Sandbox> {
  return warren.sandboxes.get(ref);
}
