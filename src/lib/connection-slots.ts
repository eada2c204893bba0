// Connection slots per client address and overall, for servers that face the network (the
// session plane, the SSH gateway): one address holding many idle connections must not take
// what every other client needs. A slot is taken at accept and given back once, at close.

export interface SlotLimits {
  /** Connections from one address at once. */
  perAddress: number;
  /** Connections at once, every address together. */
  overall: number;
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

  /** Slots `address` holds now. */
  heldBy(address: string): number {
    return this.byAddress.get(address) ?? 0;
  }

  /** A slot for `address` and the function that gives it back (idempotent), or null when full. */
  take(address: string): (() => void) | null {
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
