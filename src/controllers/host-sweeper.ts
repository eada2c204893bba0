// The judge of other hosts' heartbeats (docs/hosts.md, the failure model). Every host that
// can act runs it; all of its writes are conditional (state, epoch and heartbeat age checked
// in the statement, on the database's clock), so judges running at once agree and a host
// that renewed meanwhile is left alone. A host silent past UNREACHABLE_AFTER_SECONDS is
// `unreachable` (its sandboxes keep their state); past DEAD_AFTER_SECONDS, longer than the
// self-fence lease (so it has stopped acting on its own), it is `dead` with its epoch bumped:
// its sandboxes end `failed` with `host_lost` (their quota is free again), its running execs
// are indeterminate and its pending snapshots failed. When it returns its heartbeat finds no
// row of its epoch: it is fenced, re-joins and removes what it no longer owns.
import type { Clock } from "../lib/clock.js";
import type { Logger } from "../lib/logger.js";
import {
  DEAD_AFTER_SECONDS,
  type HostJudgement,
  judgeHost,
  UNREACHABLE_AFTER_SECONDS,
} from "../modules/hosts/liveness.js";
import { type HostMembership, SELF_FENCE_LEASE_MS } from "../modules/hosts/membership.js";
import type { IdentityService } from "../modules/identity/service.js";
import type { SandboxTransitions } from "../modules/sandboxes/transitions.js";
import * as snapshots from "../modules/snapshots/repo.js";
import type { Db, Queryable } from "../store/db.js";

const SWEEP_INTERVAL_MS = 2_000;
export const HOST_LOST_MESSAGE =
  "the sandbox's host stopped answering and was declared dead; restore it from a replicated snapshot";

export interface HostSweeperDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  identity: IdentityService;
  sandboxTransitions: SandboxTransitions;
  host: HostMembership | null;
}

export interface HostSweeperOptions extends Partial<HostJudgement> {
  /** Finished sandboxes of dead hosts are removed after this (no owner is left to purge them). */
  retentionSeconds: number;
}

export class HostSweeper {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> | null = null;
  private readonly judgement: HostJudgement;
  /** This server as a host; null on an `api` replica, which judges every host and is none. */
  private readonly host: HostMembership | null;

  constructor(
    private readonly deps: HostSweeperDeps,
    private readonly options: HostSweeperOptions,
  ) {
    this.host = deps.host;
    this.judgement = {
      unreachableAfterSeconds: options.unreachableAfterSeconds ?? UNREACHABLE_AFTER_SECONDS,
      deadAfterSeconds: options.deadAfterSeconds ?? DEAD_AFTER_SECONDS,
    };
    if (this.judgement.deadAfterSeconds * 1000 <= SELF_FENCE_LEASE_MS) {
      throw new Error("a host is declared dead only after its self-fence lease has run out");
    }
  }

  start(): void {
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.pass()
        .catch((error: unknown) => this.deps.log.warn({ err: (error as Error).message }, "host sweep failed"))
        .finally(() => {
          this.running = null;
        });
    }, SWEEP_INTERVAL_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  /** One judgement of every other host; what changed. A host that cannot act itself judges nobody. */
  async pass(): Promise<{ unreachable: string[]; dead: string[] }> {
    const changed = { unreachable: [] as string[], dead: [] as string[] };
    if (this.host && !this.host.canAct()) return changed;
    const { rows } = await this.deps.db.query<{ id: string; state: string; epoch: number; age: number }>(
      `SELECT id, state, epoch, extract(epoch FROM now() - heartbeat_at)::float8 AS age FROM hosts
        WHERE id <> $1 AND state <> 'dead'`,
      [this.host?.id ?? ""],
    );
    for (const row of rows) {
      const verdict = judgeHost({ state: row.state, heartbeatAgeSeconds: row.age }, this.judgement);
      if (verdict === "unreachable" && (await this.markUnreachable(row.id, row.epoch)))
        changed.unreachable.push(row.id);
      if (verdict === "dead" && (await this.declareDead(row.id, row.epoch))) changed.dead.push(row.id);
    }
    await this.purgeFinishedOfDeadHosts();
    return changed;
  }

  private async markUnreachable(id: string, epoch: number): Promise<boolean> {
    const { rows } = await this.deps.db.query(
      `UPDATE hosts SET state = 'unreachable', state_changed_at = now()
        WHERE id = $1 AND epoch = $2 AND state NOT IN ('dead', 'unreachable')
          AND heartbeat_at < now() - make_interval(secs => $3) RETURNING id`,
      [id, epoch, this.judgement.unreachableAfterSeconds],
    );
    if (rows.length > 0) this.deps.log.warn({ host_id: id }, "a host stopped heartbeating: unreachable");
    return rows.length > 0;
  }

  /** Declares the host dead and ends its sandboxes, in one transaction; false when another judge did, or it renewed. */
  private async declareDead(id: string, epoch: number): Promise<boolean> {
    const transitions = this.deps.sandboxTransitions;
    const lost = await this.deps.db.tx(async (q) => {
      const bumped = await q.query<{ epoch: number }>(
        `UPDATE hosts SET state = 'dead', epoch = epoch + 1, state_changed_at = now()
          WHERE id = $1 AND epoch = $2 AND state <> 'dead' AND heartbeat_at < now() - make_interval(secs => $3)
          RETURNING epoch`,
        [id, epoch, this.judgement.deadAfterSeconds],
      );
      const next = bumped.rows[0]?.epoch;
      if (next === undefined) return null;
      const live = await q.query<{ id: string; desired_state: string }>(
        `SELECT id, desired_state FROM sandboxes WHERE host_id = $1 AND state NOT IN ('terminated', 'failed')
          ORDER BY id FOR UPDATE`,
        [id],
      );
      for (const sandbox of live.rows) {
        const deleted = sandbox.desired_state === "deleted";
        await transitions.transition(sandbox.id, deleted ? "terminated" : "failed", {
          q,
          change: { desired_state: deleted ? "deleted" : "stopped", idle_deadline: null },
          reason: { code: "host_lost", message: HOST_LOST_MESSAGE },
        });
      }
      // Every row of the host moves to the new epoch: the old process, if it comes back, can write none.
      await q.query("UPDATE sandboxes SET host_epoch = $2 WHERE host_id = $1", [id, next]);
      await q.query(
        `UPDATE sandbox_execs SET outcome = 'indeterminate', finished_at = $2
          WHERE host_id = $1 AND outcome = 'running'`,
        [id, this.deps.clock.now()],
      );
      await failPendingSnapshots(q, id);
      return live.rows.map((sandbox) => sandbox.id);
    });
    if (lost === null) return false;
    for (const sandboxId of lost) {
      await this.deps.identity.revokeSandboxKeys(sandboxId);
      transitions.notify(sandboxId);
    }
    this.deps.log.error(
      { host_id: id, sandboxes: lost.length },
      "a host was declared dead: its sandboxes are host_lost",
    );
    return true;
  }

  /** Finished sandboxes of dead hosts past retention: their owner is gone, so the judge removes them. */
  private async purgeFinishedOfDeadHosts(): Promise<void> {
    const before = new Date(this.deps.clock.now().getTime() - this.options.retentionSeconds * 1000);
    await this.deps.db.query(
      `DELETE FROM sandboxes WHERE state IN ('terminated', 'failed') AND finished_at < $1
          AND host_id IN (SELECT id FROM hosts WHERE state = 'dead')`,
      [before],
    );
  }
}

async function failPendingSnapshots(q: Queryable, hostId: string): Promise<void> {
  const { rows } = await q.query<{ id: string }>(
    "SELECT id FROM sandbox_snapshots WHERE host_id = $1 AND state = 'pending'",
    [hostId],
  );
  for (const row of rows)
    await snapshots.fail(q, row.id, "host_lost", "the host taking the snapshot was declared dead");
}
