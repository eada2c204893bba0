// Time as the service sees it. Wall-clock stamps have millisecond precision so a stored
// timestamp round-trips exactly through JavaScript Dates (page tokens depend on it);
// event stamps are nanoseconds since the epoch, monotonic within the process.
export interface Clock {
  now(): Date;
  nowNs(): bigint;
}

export function systemClock(): Clock {
  const offsetNs = BigInt(Date.now()) * 1_000_000n - process.hrtime.bigint();
  let lastNs = 0n;
  return {
    now: () => new Date(Date.now()),
    nowNs: () => {
      let ns = offsetNs + process.hrtime.bigint();
      if (ns <= lastNs) ns = lastNs + 1n;
      lastNs = ns;
      return ns;
    },
  };
}
