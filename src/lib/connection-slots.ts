// Connection slots per client address and overall, for servers that face the network (the
// session plane, the SSH gateway, the egress gateway): one address holding many idle
// connections must not take what every other client needs. A slot is taken at accept and given
// back once, at close. Their default sizes come from the process's descriptor budget below.

export interface SlotLimits {
  /** Connections from one address at once. */
  perAddress: number;
  /** Connections at once, every address together. */
  overall: number;
}

import { readFileSync } from "node:fs";
import net from "node:net";
import type { Duplex } from "node:stream";

/**
 * Whose slots a connection takes: an IPv4 address (also written IPv4-mapped) is one client;
 * an IPv6 address counts with its /64, since one host usually holds a whole /64 and could
 * otherwise open connections from as many addresses as it likes.
 */
export function clientOf(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1] as string;
  if (net.isIPv6(address)) return `${expandV6(address).slice(0, 4).join(":")}::/64`;
  return address;
}

/** The eight groups of an IPv6 address, as lowercase hex without leading zeros. */
function expandV6(address: string): string[] {
  const bare = address.split("%")[0] as string;
  const [head = "", tail] = bare.split("::");
  const left = head ? head.split(":") : [];
  const right = tail ? tail.split(":") : [];
  const fill = tail === undefined ? [] : Array(Math.max(0, 8 - left.length - right.length)).fill("0");
  return [...left, ...fill, ...right].map((group) => Number.parseInt(group || "0", 16).toString(16));
}

function assertLimits(limits: object): void {
  for (const [name, value] of Object.entries(limits))
    if (!Number.isInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer`);
}

export class ConnectionSlots {
  private readonly byAddress = new Map<string, number>();
  private held = 0;

  constructor(private readonly limits: SlotLimits) {
    assertLimits(limits);
  }

  /** How many slots are held now (every address). */
  get size(): number {
    return this.held;
  }

  /** Slots the client of `address` holds now. */
  heldBy(address: string): number {
    return this.byAddress.get(clientOf(address)) ?? 0;
  }

  /** A slot for `address`'s client (clientOf) and the function that gives it back (idempotent), or null when full. */
  take(remoteAddress: string): (() => void) | null {
    return this.takeFor(clientOf(remoteAddress));
  }

  /** A slot for a holder named as is (an organization, not an address), as take does. */
  takeFor(address: string): (() => void) | null {
    const mine = this.byAddress.get(address) ?? 0;
    if (this.held >= this.limits.overall || mine >= this.limits.perAddress) return null;
    this.byAddress.set(address, mine + 1);
    this.held++;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.held--;
      const left = (this.byAddress.get(address) ?? 1) - 1;
      if (left > 0) this.byAddress.set(address, left);
      else this.byAddress.delete(address);
    };
  }
}

/**
 * Writes a last answer and destroys the socket once it is flushed (or after a short linger):
 * `end()` alone only half-closes, and a client that keeps sending (a head trickled byte by
 * byte past its deadline) would hold the connection, and its slot, for as long as it likes.
 */
export function answerAndDestroy(socket: Duplex, answer: string, lingerMs = 1_000): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const linger = setTimeout(() => socket.destroy(), lingerMs);
  linger.unref();
  socket.once("close", () => clearTimeout(linger));
  socket.end(answer, () => socket.destroy());
}

/** How often Node's HTTP server checks request-head deadlines: a fraction of the deadline, at most 1 s (Node's default, 30 s, doubles a 30 s bound). */
export function headCheckIntervalMs(headersTimeoutMs: number): number {
  return Math.max(100, Math.min(1_000, Math.floor(headersTimeoutMs / 4)));
}

/**
 * The process's open-file limit (RLIMIT_NOFILE, soft; Node raises it to the hard limit at
 * start), read from /proc/self/limits; 1024 when it cannot be read.
 */
export function openFileLimit(): number {
  let limits = "";
  try {
    limits = readFileSync("/proc/self/limits", "utf8");
  } catch {
    // Not Linux (or no /proc): assume the common default.
  }
  const soft = /^Max open files\s+(\S+)/m.exec(limits)?.[1];
  if (soft === "unlimited") return 1_048_576;
  const value = Number(soft);
  return Number.isInteger(value) && value > 0 ? value : 1024;
}

/** How the servers that face clients share the process's descriptors (descriptorBudget). */
export interface DescriptorBudget {
  /** Descriptors left to the API, the store, the runtime (spawner, consoles, exec agents) and logs. */
  reserve: number;
  /** Session plane: client connections at once, from one address, and held by one organization. */
  plane: SlotLimits & { perOrganization: number };
  /** Egress gateway: connections at once, and from one source (one sandbox). */
  egress: { overall: number; perSource: number };
  /** SSH gateway: connections, and those not yet authenticated. */
  ssh: { connections: SlotLimits; unauthenticated: SlotLimits };
}

/**
 * Connection caps derived from the open-file limit, so that clients together can never take
 * the descriptors the API and the runtime need (the red team's WebSocket upgrades reached
 * 19,999 of 20,000 and another organization's create failed with EMFILE). A quarter of the
 * limit (at least min(2048, half)) is reserved; of the rest, the session plane gets half (each
 * client connection may hold 3: its own, an upgrade's upstream, a pooled upstream socket), the
 * egress gateway a quarter (2 each: the sandbox's and the upstream's) and the SSH gateway a
 * quarter (3 each: the client, the exec agent's, a forward's). Each is also capped at the
 * fixed bound it had before (plane 10,000, SSH 1024), generous hosts do not need more.
 */
export function descriptorBudget(openFiles: number): DescriptorBudget {
  const reserve = Math.max(Math.floor(openFiles / 4), Math.min(2048, Math.floor(openFiles / 2)));
  const rest = Math.max(0, openFiles - reserve);
  const atLeast1 = (value: number) => Math.max(1, Math.floor(value));
  const planeOverall = atLeast1(Math.min(10_000, rest / 2 / 3));
  const egressOverall = atLeast1(Math.min(8_192, rest / 4 / 2));
  const sshOverall = atLeast1(Math.min(1024, rest / 4 / 3));
  const sshUnauthenticated = atLeast1(Math.min(256, sshOverall / 4));
  return {
    reserve,
    plane: {
      overall: planeOverall,
      perAddress: atLeast1(Math.min(512, planeOverall / 8)),
      perOrganization: atLeast1(planeOverall / 4),
    },
    egress: { overall: egressOverall, perSource: atLeast1(Math.min(256, egressOverall / 4)) },
    ssh: {
      connections: { overall: sshOverall, perAddress: atLeast1(Math.min(128, sshOverall / 8)) },
      unauthenticated: { overall: sshUnauthenticated, perAddress: atLeast1(Math.min(32, sshUnauthenticated / 8)) },
    },
  };
}

let processBudget: DescriptorBudget | null = null;

/** descriptorBudget of this process's limit (read once). */
export function processDescriptorBudget(): DescriptorBudget {
  processBudget ??= descriptorBudget(openFileLimit());
  return processBudget;
}

/** Bounds of connections still in their handshake (StartupSlots). */
export interface StartupLimits extends SlotLimits {
  /** From this many held, random early drop begins (OpenSSH's MaxStartups `start`); default half of overall. */
  earlyDropFrom?: number;
}

/** What a new connection in its handshake gets: a place, none, or the place of the heaviest client's oldest. */
export type StartupDecision = { kind: "admit" } | { kind: "drop" } | { kind: "evict"; from: string };

/**
 * OpenSSH's MaxStartups with per-address accounting, as a pure rule. `held` places are taken,
 * `mine` by the new connection's client, `heaviest` is the client holding the most.
 *   - A client at its per-address bound is refused.
 *   - Below the overall bound: admitted, except that from `earlyDropFrom` on, a client that
 *     already holds a place is refused with a probability rising linearly to 1 at the bound
 *     (random early drop; `random` in [0, 1)). A client holding none is always admitted.
 *   - At the bound: a client holding fewer than the heaviest one minus one takes the place of
 *     the heaviest's oldest connection, so clients that filled the budget together can never
 *     lock out one more (a ninth address behind eight full ones gets in); else refused.
 */
export function decideStartup(
  state: { held: number; mine: number; heaviest: { client: string; held: number } | null },
  limits: StartupLimits,
  random: number,
): StartupDecision {
  if (state.mine >= limits.perAddress) return { kind: "drop" };
  if (state.held < limits.overall) {
    const from = Math.min(limits.overall, limits.earlyDropFrom ?? Math.ceil(limits.overall / 2));
    if (state.held < from || state.mine === 0) return { kind: "admit" };
    const dropChance = (state.held - from + 1) / (limits.overall - from);
    return random < dropChance ? { kind: "drop" } : { kind: "admit" };
  }
  if (state.heaviest && state.heaviest.held > state.mine + 1) return { kind: "evict", from: state.heaviest.client };
  return { kind: "drop" };
}

/**
 * The session plane's bound on connections not yet authenticated (accepted, no request
 * authorized on them yet), a quarter of its total, and one address's share of it (an eighth,
 * at most its share of the total): clients on many addresses that reconnect can take this
 * budget only, never the places of authenticated connections, and StartupSlots keeps room in
 * it for a client from one more address.
 */
export function planeStartupLimits(plane: SlotLimits): SlotLimits {
  const overall = Math.max(1, Math.floor(plane.overall / 4));
  return { overall, perAddress: Math.max(1, Math.min(plane.perAddress, Math.floor(overall / 8))) };
}

/**
 * Places for connections still in their handshake (decideStartup): taken at accept with a
 * function that ends the connection should its place be given to another client.
 */
export class StartupSlots {
  /** Each client's connections, oldest first (a Set keeps insertion order). */
  private readonly byClient = new Map<string, Set<{ release(): void; evict(): void }>>();
  private held = 0;

  constructor(
    private readonly limits: StartupLimits,
    private readonly random: () => number = Math.random,
  ) {
    assertLimits(limits);
  }

  get size(): number {
    return this.held;
  }

  heldBy(address: string): number {
    return this.byClient.get(clientOf(address))?.size ?? 0;
  }

  /** A place and the function that gives it back (idempotent), or null; `evict` ends the connection if another client takes its place. */
  take(remoteAddress: string, evict: () => void): (() => void) | null {
    const client = clientOf(remoteAddress);
    let heaviest: { client: string; held: number } | null = null;
    if (this.held >= this.limits.overall) {
      for (const [other, entries] of this.byClient) {
        if (!heaviest || entries.size > heaviest.held) heaviest = { client: other, held: entries.size };
      }
    }
    const decision = decideStartup(
      { held: this.held, mine: this.byClient.get(client)?.size ?? 0, heaviest },
      this.limits,
      this.random(),
    );
    if (decision.kind === "drop") return null;
    if (decision.kind === "evict") {
      const oldest = this.byClient.get(decision.from)?.values().next().value;
      oldest?.release();
      oldest?.evict();
    }
    let entries = this.byClient.get(client);
    if (!entries) {
      entries = new Set();
      this.byClient.set(client, entries);
    }
    const mine = entries;
    let given = false;
    const entry = {
      release: () => {
        if (given) return;
        given = true;
        this.held--;
        mine.delete(entry);
        if (mine.size === 0 && this.byClient.get(client) === mine) this.byClient.delete(client);
      },
      evict,
    };
    mine.add(entry);
    this.held++;
    return entry.release;
  }
}
