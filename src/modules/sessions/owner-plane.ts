// Where the session plane of a sandbox's owner listens, for a plane that is not the owner
// (docs/hosts.md "Routing"): each host publishes its plane's `host:port` in its hosts row
// (migration 0033); a plane relays a request for another host's sandbox there, and the
// owner checks the credential again. Read from the store, reused for a second.
import type { Db } from "../../store/db.js";
import { planeOfHost } from "../hosts/edges.js";

/** A host whose plane is published and may serve (not unreachable, dead or still joining). */
const SERVING = new Set(["ready", "draining", "cordoned"]);
const CACHE_MS = 1000;
const CACHE_ENTRIES = 1000;

export interface PlaneAddress {
  host: string;
  port: number;
}

export interface OwnerPlanes {
  /** This server's host id; null on a server that is no host (an `api` replica). */
  readonly selfId: string | null;
  /** The owner's plane listener when it may serve now; null: the owner is unavailable. */
  planeOf(hostId: string): Promise<PlaneAddress | null>;
}

/** `host:port` or `[v6]:port` as published; null when it is not one. */
export function parsePlaneAddress(raw: string | null): PlaneAddress | null {
  const match = raw ? /^(?:\[([0-9a-fA-F:]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(raw) : null;
  const port = Number(match?.[3]);
  if (!match || port < 1 || port > 65_535) return null;
  return { host: (match[1] ?? match[2]) as string, port };
}

export function storeOwnerPlanes(db: Db, selfId: () => string | null): OwnerPlanes {
  const cache = new Map<string, { plane: PlaneAddress | null; expiresAtMs: number }>();
  return {
    get selfId() {
      return selfId();
    },
    async planeOf(hostId) {
      const nowMs = Date.now();
      const hit = cache.get(hostId);
      if (hit && hit.expiresAtMs > nowMs) return hit.plane;
      const row = await planeOfHost(db, hostId);
      const plane = row && SERVING.has(row.state) ? parsePlaneAddress(row.plane_address) : null;
      if (cache.size >= CACHE_ENTRIES) cache.clear();
      cache.set(hostId, { plane, expiresAtMs: nowMs + CACHE_MS });
      return plane;
    },
  };
}
