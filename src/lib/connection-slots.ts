// Connection slots per client address and overall, for servers that face the network (the
// session plane, the SSH gateway): one address holding many idle connections must not take
// what every other client needs. A slot is taken at accept and given back once, at close.

export interface SlotLimits {
  /** Connections from one address at once. */
  perAddress: number;
  /** Connections at once, every address together. */
  overall: number;
}

import net from "node:net";

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

export class ConnectionSlots {
  private readonly byAddress = new Map<string, number>();
  private held = 0;

  constructor(private readonly limits: SlotLimits) {
    for (const [name, value] of Object.entries(limits))
      if (!Number.isInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer`);
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
    const address = clientOf(remoteAddress);
    const mine = this.heldBy(address);
    if (this.held >= this.limits.overall || mine >= this.limits.perAddress) return null;
    this.byAddress.set(address, mine + 1);
    this.held++;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.held--;
      const left = this.heldBy(address) - 1;
      if (left > 0) this.byAddress.set(address, left);
      else this.byAddress.delete(address);
    };
  }
}
