// Cross-host kicks: a stop, wake, delete or quarantine change written through one server
// must wake the owner's reconciler, which alone acts on the sandbox (docs/hosts.md). The
// writer notifies `warren_host_kicks` with "<host id> <sandbox id>"; every reconciler
// listens and takes the kicks that name its host. A kick is only a hint: the owner reads the
// row, and after a gap in notifications it looks at every live sandbox of its own.
import type { Queryable } from "../../store/db.js";

export const HOST_KICKS_CHANNEL = "warren_host_kicks";
const KICK = /^(h_[0-9a-z_-]{1,64}) (sbx-[0-9a-f]{40})$/;

export function formatHostKick(hostId: string, sandboxId: string): string {
  return `${hostId} ${sandboxId}`;
}

/** The host and sandbox of a kick; null for anything else (a payload is never trusted to be ours). */
export function parseHostKick(payload: string): { hostId: string; sandboxId: string } | null {
  const match = KICK.exec(payload);
  return match ? { hostId: match[1] as string, sandboxId: match[2] as string } : null;
}

/** Notifies the owner's reconciler (delivered when the caller's transaction, if any, commits). */
export async function notifyOwner(q: Queryable, hostId: string, sandboxId: string): Promise<void> {
  await q.query("SELECT pg_notify($1, $2)", [HOST_KICKS_CHANNEL, formatHostKick(hostId, sandboxId)]);
}
