// Who is calling the gateway: the runtime names the sandbox holding a source address (and
// its network mode, which changes with the rules), the sandbox service its organization,
// project and run (which never change, so they are cached briefly).
import type { HostNetwork } from "../../drivers/runtime/interface.js";
import type { SandboxService } from "../sandboxes/service.js";
import type { EgressCaller } from "./types.js";

const TTL_MS = 10_000;
const MAX_ENTRIES = 10_000;

export function callerDirectory(
  runtime: Pick<HostNetwork, "sandboxAtAddress">,
  sandboxes: Pick<SandboxService, "egressIdentity">,
): (address: string) => Promise<EgressCaller | null> {
  const cache = new Map<string, { at: number; identity: { orgId: string; projectId: string; runId: string } }>();
  return async (address) => {
    const holder = runtime.sandboxAtAddress ? await runtime.sandboxAtAddress(address) : null;
    if (!holder) return null;
    const now = Date.now();
    let entry = cache.get(holder.id);
    if (!entry || now - entry.at > TTL_MS) {
      const identity = await sandboxes.egressIdentity(holder.id);
      if (!identity) {
        cache.delete(holder.id);
        return null;
      }
      if (cache.size >= MAX_ENTRIES) cache.clear();
      entry = { at: now, identity };
      cache.set(holder.id, entry);
    }
    return { sandboxId: holder.id, ...entry.identity, mode: holder.mode };
  };
}
