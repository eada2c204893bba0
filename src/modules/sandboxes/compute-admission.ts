// Admission of memory and CPU against the host's capacity (issue 24 A9; docs/api-decisions.md
// "Host compute admission"). Pure: host-admission.ts reads what the live rows reserve from
// the store (under the host's admission lock) and the host's size from the runtime, decides
// here, and throws what this says.

/** What the host has: its memory in MiB and its CPUs in millis (1000 per CPU). */
export interface HostCompute {
  memoryMiB: number;
  cpuMillis: number;
}

export interface ComputePolicy {
  /** How many times the host's memory the running sandboxes' memory_mb may add up to. */
  memoryOvercommit: number;
  /** How many times the host's CPUs the running sandboxes' cpu_millis may add up to. */
  cpuOvercommit: number;
}

export type ComputeVerdict =
  | { admitted: true }
  /** `permanent`: this one sandbox asks for more than the whole host has (no wait helps). */
  | { admitted: false; resource: "memory" | "cpu"; permanent: boolean };

/** Whether a sandbox of `request` may run beside what running sandboxes already hold (`committed`). */
export function decideCompute(
  host: HostCompute,
  committed: HostCompute,
  request: HostCompute,
  policy: ComputePolicy,
): ComputeVerdict {
  if (request.memoryMiB > host.memoryMiB) return { admitted: false, resource: "memory", permanent: true };
  if (request.cpuMillis > host.cpuMillis) return { admitted: false, resource: "cpu", permanent: true };
  if (committed.memoryMiB + request.memoryMiB > host.memoryMiB * policy.memoryOvercommit) {
    return { admitted: false, resource: "memory", permanent: false };
  }
  if (committed.cpuMillis + request.cpuMillis > host.cpuMillis * policy.cpuOvercommit) {
    return { admitted: false, resource: "cpu", permanent: false };
  }
  return { admitted: true };
}
