// The host uid that owns each sandbox's user namespace (user-namespace.ts), handed out so no
// two sandboxes on the machine ever share one, even when several Warren servers (several
// runtime roots) run on it: each uid is claimed by an exclusive create of a file named after it
// in one machine-wide directory (/run/warren/userns-owners by default: a tmpfs, cleared at boot
// like the namespaces themselves), holding the claiming root and sandbox id. A sandbox records
// its uid in its dir (`userns.uid`), and its teardown releases the claim. Each server draws from
// its range (WARREN_SANDBOX_UID_RANGE, default [2^30, 2^31)); servers that do not share /run
// (each in a container of its own) need disjoint ranges, since their claims cannot see each other.
// With id mapping (id-mapping.ts) a sandbox claims a block of MAPPED_IDS uids instead (the
// `blocks` kind: claim files `range-<first>`, recorded in `userns.range`), drawn from
// [2^31, 2^32 - 65536) by default, disjoint from the single owners' default range.
import { createHash } from "node:crypto";
import { mkdir, open, readdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { RuntimeError } from "../interface.js";
import type { Layout, SandboxPaths } from "./layout.js";

export interface UidRange {
  first: number;
  count: number;
}

/** Owners are drawn from [2^30, 2^31) by default: far above any login or container-mapped uid range. */
export const DEFAULT_UID_RANGE: UidRange = { first: 0x4000_0000, count: 0x4000_0000 };
export const DEFAULT_CLAIMS_DIR = "/run/warren/userns-owners";
/** Claims tried for one sandbox before its create fails (the range is then nearly full). */
const MAX_PROBES = 4096;

/**
 * The uid a sandbox of the code before claims got (the sha256 of its id into the default
 * range): the owner of sandboxes made before, claimed for them when the driver opens.
 */
export function legacyOwnerUid(id: string): number {
  const digest = createHash("sha256").update(id).digest();
  return DEFAULT_UID_RANGE.first + (digest.readUInt32BE(0) % DEFAULT_UID_RANGE.count);
}

/**
 * The uids tried for sandbox `id`, in order: from where its id hashes to in `range`, onward
 * (wrapping). With `stride` the range counts blocks of that many uids, and each block's first is tried.
 */
export function ownerUidCandidates(id: string, range: UidRange, limit = MAX_PROBES, stride = 1): number[] {
  const start = createHash("sha256").update(id).digest().readUInt32BE(0) % range.count;
  const count = Math.min(limit, range.count);
  return Array.from({ length: count }, (_, i) => range.first + ((start + i) % range.count) * stride);
}

function claimText(root: string, id: string): string {
  return `${root}\n${id}\n`;
}

/** What is claimed: single owner uids, or blocks of `stride` uids (id mapping). */
export interface ClaimKind {
  stride: number;
  /** Prefix of the claim files' names (`<prefix><first uid>`). */
  prefix: string;
  /** The file in the sandbox's dir recording its claim. */
  recordFile: string;
  /** The error when every candidate is taken. */
  exhausted: string;
}

const OWNER_KIND: ClaimKind = {
  stride: 1,
  prefix: "",
  recordFile: "userns.uid",
  exhausted: "no free user-namespace owner uid in WARREN_SANDBOX_UID_RANGE",
};

export class NamespaceOwners {
  private readonly kind: ClaimKind;

  constructor(
    private readonly layout: Layout,
    private readonly range: UidRange = DEFAULT_UID_RANGE,
    private readonly dir: string = DEFAULT_CLAIMS_DIR,
    kind: ClaimKind = OWNER_KIND,
  ) {
    this.kind = kind;
  }

  private recordOf(paths: SandboxPaths): string {
    return path.join(paths.dir, this.kind.recordFile);
  }

  /** The uid recorded for the sandbox, or null (none made yet, or made before claims). */
  async recorded(paths: SandboxPaths): Promise<number | null> {
    const text = await readFile(this.recordOf(paths), "utf8").catch(() => "");
    return /^\d+$/.test(text.trim()) ? Number(text.trim()) : null;
  }

  /** Claims a uid no other sandbox on the machine holds and records it in the sandbox's dir. */
  async claim(id: string, paths: SandboxPaths): Promise<number> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    for (const uid of ownerUidCandidates(id, this.range, MAX_PROBES, this.kind.stride)) {
      if (await this.tryClaim(uid, id)) {
        await writeFile(this.recordOf(paths), `${uid}\n`);
        return uid;
      }
    }
    throw new RuntimeError("host_failure", this.kind.exhausted);
  }

  /** Releases the sandbox's claim (only while it is still this sandbox's). */
  async release(id: string, paths: SandboxPaths): Promise<void> {
    const uid = await this.recorded(paths);
    if (uid !== null) await this.releaseUid(uid, id);
  }

  /**
   * At open: claims of this root whose sandbox is gone are released; sandboxes with a user
   * namespace but no claim (made before claims) get theirs, at the uid they already have.
   */
  async reconcile(namespaced: (id: string) => Promise<boolean>): Promise<void> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const prefix = this.kind.prefix;
    for (const name of names) {
      if (!name.startsWith(prefix) || !/^\d+$/.test(name.slice(prefix.length))) continue;
      const uid = Number(name.slice(prefix.length));
      const text = await readFile(path.join(this.dir, name), "utf8").catch(() => "");
      const [root, id] = text.split("\n");
      if (root !== this.layout.root || !id) continue;
      const paths = this.layout.sandbox(id);
      if ((await this.recorded(paths).catch(() => null)) !== uid) await this.releaseUid(uid, id);
    }
    // Blocks (id mapping) came after claims: no sandbox has one unclaimed.
    if (this.kind.stride !== 1) return;
    for (const id of await readdir(this.layout.sandboxesDir).catch(() => [] as string[])) {
      let paths: SandboxPaths;
      try {
        paths = this.layout.sandbox(id);
      } catch {
        continue;
      }
      if ((await this.recorded(paths)) !== null || !(await namespaced(id))) continue;
      const uid = legacyOwnerUid(id);
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      // Taken by another sandbox: the two already share it (the old code's hash collision).
      if (await this.tryClaim(uid, id)) await writeFile(this.recordOf(paths), `${uid}\n`);
    }
  }

  private async tryClaim(uid: number, id: string): Promise<boolean> {
    try {
      const file = await open(path.join(this.dir, `${this.kind.prefix}${uid}`), "wx", 0o600);
      try {
        await file.writeFile(claimText(this.layout.root, id));
      } finally {
        await file.close();
      }
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
      throw error;
    }
  }

  private async releaseUid(uid: number, id: string): Promise<void> {
    const file = path.join(this.dir, `${this.kind.prefix}${uid}`);
    const text = await readFile(file, "utf8").catch(() => null);
    if (text === claimText(this.layout.root, id)) await rm(file, { force: true });
  }
}
