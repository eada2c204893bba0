// Admission of storage: the pool is a sparse file, so the sum of the sandboxes' sizes may
// exceed what the host can back, and one sandbox filling its filesystem could run the host
// (and every other sandbox) out of space. A create, restore or growth is admitted only when
// the worst case still fits: every live image filled to its size, every read-only file
// (templates, sealed snapshots) kept, beyond what the pool already holds on the host, within
// the host's free space minus a reserve, times the overcommit ratio (1: nothing promised that
// the host cannot back). Pure: pool.ts measures, sandbox-storage.ts decides and applies.

export interface PoolUsage {
  /** Free bytes of the host filesystem holding the pool's file (statfs f_bavail). */
  hostFreeBytes: number;
  /** Bytes the pool's file holds on the host now (its allocated blocks). */
  poolAllocatedBytes: number;
  /** Size (what it may fill) of every live sandbox's images, by sandbox id. */
  imageBytesById: Map<string, number>;
  /** Bytes of files that only shrink or stay: templates and sealed snapshots (allocated). */
  fixedBytes: number;
  /** Images being written into staging (imports): counted at their size. */
  stagingBytes: number;
}

export interface AdmissionPolicy {
  /** Host bytes never promised to sandboxes (the host's own headroom). */
  reserveBytes: number;
  /** How many times the backable bytes sandboxes may be promised (1: none overcommitted). */
  overcommit: number;
}

export interface StorageVerdict {
  admitted: boolean;
  /** Bytes the pool may still take from the host once this change is made. */
  mayStillWriteBytes: number;
  /** Bytes the host can back for the pool: free space minus the reserve, times the ratio. */
  backableBytes: number;
  /** Whether the request could be admitted if no other sandbox held storage. */
  couldEverFit: boolean;
}

/** Bytes every live image may fill, with `pending` (sizes a change is about to give) overriding by id. */
export function promisedImageBytes(usage: PoolUsage, pending: ReadonlyMap<string, number>): number {
  let total = 0;
  for (const [id, bytes] of usage.imageBytesById) total += Math.max(bytes, pending.get(id) ?? 0);
  for (const [id, bytes] of pending) if (!usage.imageBytesById.has(id)) total += bytes;
  return total;
}

/**
 * Whether sandbox `id` may hold `bytes` of images (its new total: both images after a
 * create, or after a growth), given what other changes under way (`pending`) will hold.
 */
export function decideStorage(
  usage: PoolUsage,
  pending: ReadonlyMap<string, number>,
  request: { id: string; bytes: number },
  policy: AdmissionPolicy,
): StorageVerdict {
  const withRequest = new Map(pending);
  withRequest.set(request.id, Math.max(request.bytes, pending.get(request.id) ?? 0));
  const promised = promisedImageBytes(usage, withRequest) + usage.fixedBytes + usage.stagingBytes;
  const mayStillWriteBytes = Math.max(0, promised - usage.poolAllocatedBytes);
  const backableBytes = Math.max(0, (usage.hostFreeBytes - policy.reserveBytes) * policy.overcommit);
  // Alone: the other sandboxes' data gone from the pool (what the pool holds beyond the fixed files).
  const aloneHeld = Math.max(0, usage.poolAllocatedBytes - usage.fixedBytes);
  const aloneBackable = Math.max(0, (usage.hostFreeBytes + aloneHeld - policy.reserveBytes) * policy.overcommit);
  return {
    admitted: mayStillWriteBytes <= backableBytes,
    mayStillWriteBytes,
    backableBytes,
    couldEverFit: request.bytes <= aloneBackable,
  };
}
