// How long a host may stay silent (by the database's clock) before the others judge it:
// `unreachable`, then `dead` past a grace longer than the self-fence lease. Pure; the sweeper
// (controllers/host-sweeper.ts) writes the verdicts and placement skips hosts past the first.
export const UNREACHABLE_AFTER_SECONDS = 10;
export const DEAD_AFTER_SECONDS = 60;
export type HostVerdict = "unreachable" | "dead" | null;

export interface HostJudgement {
  unreachableAfterSeconds: number;
  deadAfterSeconds: number;
}

/** What a host whose last heartbeat is `ageSeconds` old (database clock) becomes; null: nothing changes. */
export function judgeHost(
  host: { state: string; heartbeatAgeSeconds: number },
  options: HostJudgement = { unreachableAfterSeconds: UNREACHABLE_AFTER_SECONDS, deadAfterSeconds: DEAD_AFTER_SECONDS },
): HostVerdict {
  if (host.state === "dead") return null;
  if (host.heartbeatAgeSeconds > options.deadAfterSeconds) return "dead";
  if (host.heartbeatAgeSeconds > options.unreachableAfterSeconds && host.state !== "unreachable") return "unreachable";
  return null;
}
