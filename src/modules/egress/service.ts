// The organization egress allowlist: validated host names and `*.domain` wildcards, read by
// the gateway on every gateway_only request (so a change applies to the next request).
import type { Clock } from "../../lib/clock.js";
import { AppError } from "../../lib/errors.js";
import type { Db } from "../../store/db.js";
import { allowlistEntryProblem, MAX_ALLOWLIST_ENTRIES } from "./policy.js";
import * as repo from "./repo.js";

export class EgressAllowlistService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  list(orgId: string): Promise<string[]> {
    return repo.listAllowlist(this.db, orgId);
  }

  /** Replaces the list; every entry is checked first, duplicates are folded. Returns the stored list. */
  async replace(orgId: string, hosts: string[]): Promise<string[]> {
    if (hosts.length > MAX_ALLOWLIST_ENTRIES) {
      throw new AppError("invalid_argument", `an egress allowlist holds at most ${MAX_ALLOWLIST_ENTRIES} entries`);
    }
    for (const [index, host] of hosts.entries()) {
      const problem = allowlistEntryProblem(host);
      if (problem) throw new AppError("invalid_argument", `hosts[${index}] "${host.slice(0, 300)}": ${problem}`);
    }
    const unique = [...new Set(hosts)].sort();
    await this.db.tx((q) => repo.replaceAllowlist(q, orgId, unique, this.clock.now()));
    return unique;
  }
}
