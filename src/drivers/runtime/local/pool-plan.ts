// What the warm pool (pool.ts) holds: the default image's members, then members of the
// images this host's creates used most recently, within one total budget. Pure, so the
// order and the bounds are tested without runc (pool-plan.test.ts).
import type { NetworkMode } from "../interface.js";

/** Network modes a pooled sandbox is made in (a `gateway_only` create takes the normal path). */
export const POOL_MODES: readonly NetworkMode[] = ["none", "public"];

/** A member's shape beyond the default resources and storage every member has. */
export interface PoolShape {
  image: string;
  mode: NetworkMode;
}

export const shapeKey = (shape: PoolShape): string => `${shape.mode} ${shape.image}`;

/**
 * The images recent creates used (beside the default one), each with the network modes it
 * was created in, bounded to `limit` images: a use moves an image to the front, and the
 * least recently used one falls out past the limit.
 */
export class RecentImages {
  /** Least recently used first (a Map keeps insertion order). */
  private readonly uses = new Map<string, Set<NetworkMode>>();

  constructor(private readonly limit: number) {}

  /** Records a use; true when what the pool should hold changed (a new image or mode, an eviction, a new order). */
  touch(image: string, mode: NetworkMode): boolean {
    if (this.limit <= 0) return false;
    const modes = this.uses.get(image);
    const wasFirst = modes !== undefined && [...this.uses.keys()].at(-1) === image;
    const newMode = !modes?.has(mode);
    this.uses.delete(image);
    this.uses.set(image, new Set([...(modes ?? []), mode]));
    for (const oldest of this.uses.keys()) {
      if (this.uses.size <= this.limit) break;
      this.uses.delete(oldest);
    }
    return newMode || !wasFirst;
  }

  /** The image goes (its members cannot be made: it is gone from its registry, say). */
  forget(image: string): void {
    this.uses.delete(image);
  }

  has(image: string): boolean {
    return this.uses.has(image);
  }

  /** Most recently used first. */
  list(): { image: string; modes: NetworkMode[] }[] {
    return [...this.uses]
      .reverse()
      .map(([image, modes]) => ({ image, modes: POOL_MODES.filter((mode) => modes.has(mode)) }));
  }
}

export interface PoolPlanInput {
  defaultImage: string;
  /** Members of the default image per network mode. */
  defaultSize: number;
  /** Most recently used first (RecentImages.list()). */
  recent: readonly { image: string; modes: readonly NetworkMode[] }[];
  /** Members per recent image and mode. */
  recentSize: number;
  /** Members in all: the pool's budget of storage reservations and cgroups. */
  maxMembers: number;
}

/**
 * How many members of each shape the pool should hold, in the order it fills them: the
 * default image's modes first, then the recent images, most recent first, until the budget
 * is spent. A shape absent from the plan has no members (its are destroyed).
 */
export function planMembers(input: PoolPlanInput): Map<string, { shape: PoolShape; count: number }> {
  const plan = new Map<string, { shape: PoolShape; count: number }>();
  let left = Math.max(0, input.maxMembers);
  const want = (shape: PoolShape, count: number) => {
    const n = Math.min(count, left);
    if (n <= 0 || plan.has(shapeKey(shape))) return;
    plan.set(shapeKey(shape), { shape, count: n });
    left -= n;
  };
  for (const mode of POOL_MODES) want({ image: input.defaultImage, mode }, input.defaultSize);
  for (const { image, modes } of input.recent) {
    if (image === input.defaultImage) continue;
    for (const mode of modes) want({ image, mode }, input.recentSize);
  }
  return plan;
}
