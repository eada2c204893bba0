// Where this server last found sandboxes that another host owns: for routing an unkeyed exec
// at once, never for authorizing it (docs/hosts.md "What crosses"). An exec through a
// non-owner reads the sandbox row to learn its owner; the next one within KNOWN_OWNER_MS goes
// straight to that owner, which reads the row itself and refuses (not_found, quarantined,
// sandbox_not_running) as it would have here, or answers `not_owner` (it ran nothing) when the
// row names another host, and the exec then reads the row here and routes again. So one
// store round trip is on the routed path either way, on the owner instead of here.

/** How long a sandbox's owner is remembered (a host row is cached as long: router.ts ROUTE_CACHE_MS). */
export const KNOWN_OWNER_MS = 1_000;
/** The most sandboxes remembered (the oldest are forgotten first). */
const MAX_KNOWN = 4_096;

export interface KnownOwner {
  orgId: string;
  hostId: string;
  epoch: number;
}

export class KnownOwners {
  private readonly owners = new Map<string, KnownOwner & { seenAt: number }>();

  /** Milliseconds on a monotonic clock. */
  constructor(private readonly now: () => number = () => performance.now()) {}

  /** The owner remembered for the sandbox, when it was found for this organization less than KNOWN_OWNER_MS ago. */
  get(sandboxId: string, orgId: string): KnownOwner | null {
    const known = this.owners.get(sandboxId);
    if (!known) return null;
    if (this.now() - known.seenAt >= KNOWN_OWNER_MS) {
      this.owners.delete(sandboxId);
      return null;
    }
    return known.orgId === orgId ? known : null;
  }

  remember(sandboxId: string, owner: KnownOwner): void {
    this.owners.delete(sandboxId);
    if (this.owners.size >= MAX_KNOWN) {
      const oldest = this.owners.keys().next().value;
      if (oldest !== undefined) this.owners.delete(oldest);
    }
    this.owners.set(sandboxId, { ...owner, seenAt: this.now() });
  }

  forget(sandboxId: string): void {
    this.owners.delete(sandboxId);
  }
}
