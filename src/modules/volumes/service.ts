// VolumeService: volumes and their immutable versions. A push is opened (StartVolumePush),
// its missing blobs uploaded through presigned URLs (RequestVolumeBlobUploads), its manifest
// uploaded, and published (PublishVolumeVersion): every blob verified, the quota checked and
// the version recorded under the volume's lock, so concurrent publishes are serialized.
import type { VolumeSettings } from "../../config.js";
import { BlobError, type BlobStore } from "../../drivers/blobs/interface.js";
import type { Clock } from "../../lib/clock.js";
import { AppError, invalid, notFound } from "../../lib/errors.js";
import { newId } from "../../lib/ids.js";
import type { Logger } from "../../lib/logger.js";
import { type Cursor, decodeCursor, pageOf } from "../../lib/page-token.js";
import type { Db, Queryable } from "../../store/db.js";
import type { UploadObserver } from "../blobs/service.js";
import { type Credential, requireOrgScoped } from "../identity/credential.js";
import type { ProjectService } from "../projects/service.js";
import { BLOB_KEY, checkStoredBlob, mapLimit, volumeKeys } from "./blobs.js";
import * as gc from "./gc-repo.js";
import { type Digest, digestOf } from "./manifest.js";
import { ManifestParser, type ParsedManifest } from "./manifest-parser.js";
import * as repo from "./repo.js";
import type {
  StartVolumePushJson,
  VolumeBlobRefJson,
  VolumeBlobUploadJson,
  VolumeJson,
  VolumeVersionJson,
} from "./schemas.js";
import { MAX_QUOTA_BYTES } from "./schemas.js";

export const DESCRIPTION_MAX_BYTES = 4096;
/** How long a blob upload URL is valid (or less, when the push ends sooner). */
export const UPLOAD_URL_SECONDS = 900;
/** Blobs checked against the store at once. */
const VERIFY_CONCURRENCY = 8;
/** Expired pushes collected per pass. */
const COLLECT_BATCH = 50;

export function volumeView(row: repo.VolumeRow): VolumeJson {
  return {
    id: row.id,
    name: row.name,
    project_id: row.project_id,
    description: row.description,
    quota_bytes: String(row.quota_bytes),
    used_bytes: String(row.used_bytes),
    current_version_digest: row.current_version_digest,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    created_by: row.created_by,
  };
}

export function versionView(row: repo.VersionRow): VolumeVersionJson {
  return {
    volume_id: row.volume_id,
    version_digest: row.version_digest,
    parent_version_digest: row.parent_version_digest,
    file_count: String(row.file_count),
    size_bytes: String(row.size_bytes),
    created_at: row.created_at.toISOString(),
    created_by: row.created_by,
  };
}

function parseQuota(raw: string): bigint {
  if (!/^[0-9]{1,16}$/.test(raw)) throw invalid("quota_bytes must be a decimal string of bytes");
  const quota = BigInt(raw);
  if (quota > MAX_QUOTA_BYTES) throw invalid(`quota_bytes must be at most ${MAX_QUOTA_BYTES} (2 TiB)`);
  return quota;
}

const pushGone = () => new AppError("failed_precondition", "the push has expired; start a new one");

export class VolumeService {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly blobs: BlobStore,
    private readonly projects: ProjectService,
    private readonly settings: VolumeSettings,
    /** Parses and checks uploaded manifests in worker threads, a bounded number at once. */
    readonly manifestParser = new ManifestParser(),
  ) {}

  async create(
    cred: Credential,
    input: { name: string; project_id?: string | undefined; quota_bytes: string; description?: string | undefined },
  ): Promise<VolumeJson> {
    requireOrgScoped(cred, "create volumes");
    const quota = parseQuota(input.quota_bytes);
    if (Buffer.byteLength(input.description ?? "", "utf8") > DESCRIPTION_MAX_BYTES) {
      throw invalid(`description must be at most ${DESCRIPTION_MAX_BYTES} bytes (4 KiB)`);
    }
    return this.db.tx(async (q) => {
      const project = await this.projects.resolve(q, cred, input.project_id);
      const now = this.clock.now();
      const row = await repo.insertVolume(q, {
        id: newId("vol"),
        org_id: cred.orgId,
        project_id: project.id,
        name: input.name,
        description: input.description ?? "",
        quota_bytes: String(quota),
        used_bytes: "0",
        current_version_digest: "",
        created_at: now,
        updated_at: now,
        created_by: cred.principalId,
      });
      if (!row) throw new AppError("already_exists", `a volume named "${input.name}" already exists in this project`);
      return volumeView(row);
    });
  }

  async get(cred: Credential, id: string): Promise<VolumeJson> {
    requireOrgScoped(cred, "read volumes");
    return volumeView(await this.load(this.db, cred, id));
  }

  async list(cred: Credential, input: { projectId?: string | undefined; pageSize: number; pageToken?: string }) {
    requireOrgScoped(cred, "list volumes");
    const project = await this.projects.resolve(this.db, cred, input.projectId);
    const after = decodeCursor("volumes", input.pageToken);
    const rows = await repo.listVolumes(this.db, cred.orgId, project.id, after, input.pageSize + 1);
    const page = pageOf("volumes", rows, input.pageSize, (row): Cursor => ({ at: row.created_at, id: row.id }));
    return { volumes: page.items.map(volumeView), next_page_token: page.nextPageToken };
  }

  /**
   * Removes the volume, its versions and pushes. Sandboxes that pinned a version keep it:
   * their copy is in the host's cache, and the version's manifest and blobs stay stored.
   */
  async delete(cred: Credential, id: string): Promise<Record<string, never>> {
    requireOrgScoped(cred, "delete volumes");
    if (!(await repo.deleteVolume(this.db, cred.orgId, id, this.clock.now()))) throw notFound("volume");
    return {};
  }

  async startPush(cred: Credential, volumeId: string): Promise<StartVolumePushJson> {
    requireOrgScoped(cred, "push volumes");
    await this.collectExpiredPushes().catch((error: unknown) =>
      this.log.warn({ err: (error as Error).message }, "collecting expired volume pushes failed"),
    );
    const volume = await this.load(this.db, cred, volumeId);
    const now = this.clock.now();
    const ttl = this.settings.pushTtlSeconds;
    const id = newId("vpu");
    const manifestKey = volumeKeys.pushManifest(cred.orgId, id);
    await repo.insertPush(this.db, {
      id,
      org_id: cred.orgId,
      volume_id: volume.id,
      parent_version_digest: volume.current_version_digest,
      manifest_key: manifestKey,
      expires_at: new Date(now.getTime() + ttl * 1000),
      created_at: now,
      created_by: cred.principalId,
      published_digest: null,
    });
    return {
      push_id: id,
      manifest_upload_url: await this.blobs.presignPut(manifestKey, { expiresInSeconds: ttl }),
      expires_in_seconds: ttl,
      max_manifest_bytes: String(this.settings.maxManifestBytes),
    };
  }

  /**
   * Per blob: present (stored and verified: skip it) or a presigned PUT of its address. A
   * stored blob not verified yet is read back now; one whose bytes do not match is deleted
   * and gets an upload URL like a missing one.
   */
  async requestUploads(cred: Credential, pushId: string, refs: VolumeBlobRefJson[]): Promise<VolumeBlobUploadJson[]> {
    requireOrgScoped(cred, "push volumes");
    const push = await this.openPush(cred, pushId);
    const wanted = new Map<Digest, number>();
    for (const ref of refs) wanted.set(ref.digest as Digest, Number(ref.size_bytes));
    const verified = await this.verifyAll(cred.orgId, wanted, false);
    const uploads = new Map<Digest, string>();
    const secondsLeft = Math.floor((push.expires_at.getTime() - this.clock.now().getTime()) / 1000);
    const expiresInSeconds = Math.max(1, Math.min(UPLOAD_URL_SECONDS, secondsLeft));
    const missing = [...wanted.keys()].filter((digest) => !verified.has(digest));
    await repo.recordPushBlobs(this.db, push.id, cred.orgId, missing);
    await mapLimit(missing, 32, async (digest) => {
      uploads.set(digest, await this.blobs.presignPut(volumeKeys.blob(cred.orgId, digest), { expiresInSeconds }));
    });
    return refs.map((ref) => {
      const url = uploads.get(ref.digest as Digest);
      return { digest: ref.digest, present: url === undefined, upload_url: url ?? "" };
    });
  }

  /**
   * Verifies the manifest and every blob it names, then records the version under the
   * volume's lock: the push's parent must still be the current version (else 409 with the
   * current digest, to rebase on), and the volume's distinct blobs must fit its quota.
   */
  async publish(cred: Credential, pushId: string): Promise<VolumeVersionJson> {
    requireOrgScoped(cred, "publish volume versions");
    const push = await this.loadPush(cred, pushId);
    if (push.published_digest) return this.versionOf(push.volume_id, push.published_digest);
    if (push.expires_at < this.clock.now()) throw pushGone();
    const manifest = await this.readPushManifest(cred.orgId, push);
    const verified = await this.verifyAll(cred.orgId, manifest.blobs, true);
    const missing = [...manifest.blobs.keys()].filter((digest) => !verified.has(digest));
    if (missing.length > 0) {
      throw new AppError("failed_precondition", `${missing.length} blob(s) of the manifest are not uploaded`, {
        details: { missing_digests: missing.slice(0, 100) },
      });
    }
    const bytes = manifest.canonical;
    const versionDigest = digestOf(bytes);
    const version = await this.db.tx(async (q) => {
      const volume = await repo.getVolume(q, cred.orgId, push.volume_id, true);
      if (!volume) throw notFound("volume");
      const current = volume.current_version_digest;
      if (current === versionDigest) return this.versionIn(q, volume.id, current);
      if (current !== push.parent_version_digest) {
        throw new AppError(
          "operation_conflict",
          `the volume moved on to ${current} since this push started; start a new push (its parent is the current version)`,
          { details: { current_version_digest: current } },
        );
      }
      const head = current ? await repo.getVersion(q, volume.id, current) : null;
      if (head && head.content_digest === manifest.contentDigest) {
        // The same files as the current version: nothing to publish.
        await repo.markPublished(q, push.id, current);
        return head;
      }
      // Stored only when a version is recorded, under the manifest's lock (the collector
      // removes a manifest no volume has under the same lock).
      await gc.lockManifest(q, cred.orgId, versionDigest);
      await this.blobs.putIfAbsent(volumeKeys.versionManifest(cred.orgId, versionDigest), bytes);
      return this.record(q, cred, volume, push, manifest, versionDigest);
    });
    await this.blobs.delete(push.manifest_key).catch(() => undefined);
    return versionView(version);
  }

  private async record(
    q: Queryable,
    cred: Credential,
    volume: repo.VolumeRow,
    push: repo.PushRow,
    manifest: ParsedManifest,
    versionDigest: Digest,
  ): Promise<repo.VersionRow> {
    const digests = [...manifest.blobs.keys()];
    const sizes = digests.map((digest) => manifest.blobs.get(digest) ?? 0);
    const added = await repo.newRefBytes(q, volume.id, digests, sizes);
    const used = Number(volume.used_bytes);
    const quota = Number(volume.quota_bytes);
    if (used + added > quota) {
      throw new AppError(
        "quota_exceeded",
        `the version needs ${added} more bytes; the volume uses ${used} of its ${quota}-byte quota`,
        {
          quota: {
            metric: "volume.bytes",
            limit: String(quota),
            current: String(used),
            reserved: String(added),
            retry_after_seconds: 0,
          },
        },
      );
    }
    // Mounting a version writes its files in full on the host (a file of one repeated chunk
    // too), so its materialized size is bounded by the quota as well (docs/volumes.md).
    if (manifest.sizeBytes > quota) {
      throw new AppError(
        "quota_exceeded",
        `the version's files hold ${manifest.sizeBytes} bytes as mounted, over the volume's ${quota}-byte quota`,
        {
          quota: {
            metric: "volume.materialized_bytes",
            limit: String(quota),
            current: "0",
            reserved: String(manifest.sizeBytes),
            retry_after_seconds: 0,
          },
        },
      );
    }
    const now = this.clock.now();
    // Touched under their row locks: a collection of one of them either committed before
    // (it is gone: refuse) or waits for this transaction and then sees it touched.
    const touched = await repo.touchVerified(q, volume.org_id, digests, now);
    const collected = digests.filter((digest) => !touched.has(digest));
    if (collected.length > 0) {
      throw new AppError(
        "failed_precondition",
        `${collected.length} blob(s) of the manifest were collected as unreferenced since they were verified; upload them again`,
        { details: { missing_digests: collected.slice(0, 100) } },
      );
    }
    const row: repo.VersionRow = {
      volume_id: volume.id,
      version_digest: versionDigest,
      parent_version_digest: push.parent_version_digest,
      content_digest: manifest.contentDigest,
      file_count: String(manifest.fileCount),
      size_bytes: String(manifest.sizeBytes),
      created_at: now,
      created_by: cred.principalId,
    };
    await repo.insertVersion(q, row);
    await repo.addRefs(q, volume.org_id, volume.id, digests, sizes);
    await repo.setCurrentVersion(q, volume.id, versionDigest, used + added, now);
    await repo.markPublished(q, push.id, versionDigest);
    return (await repo.getVersion(q, volume.id, versionDigest)) ?? row;
  }

  /**
   * The verified blobs among `wanted` (digest -> claimed size). Blobs not verified yet are
   * read back from the store; with `strict`, a stored blob whose bytes do not match its
   * digest is refused (it was deleted, so it can be uploaded again).
   */
  private async verifyAll(orgId: string, wanted: Map<Digest, number>, strict: boolean): Promise<Set<Digest>> {
    const digests = [...wanted.keys()];
    const known = new Map<string, number>();
    for (let i = 0; i < digests.length; i += 5000) {
      const slice = digests.slice(i, i + 5000);
      // An upload request touches what it answers present (the push may publish it later);
      // a publish touches its blobs in its transaction instead (record).
      const rows = strict
        ? await repo.verifiedBlobs(this.db, orgId, slice)
        : await repo.touchVerified(this.db, orgId, slice, this.clock.now());
      for (const [digest, size] of rows) {
        known.set(digest, size);
      }
    }
    const verified = new Set<Digest>();
    const unknown: Digest[] = [];
    for (const digest of digests) {
      const size = known.get(digest);
      if (size === undefined) unknown.push(digest);
      else if (size !== wanted.get(digest)) throw sizeMismatch(digest, size);
      else verified.add(digest);
    }
    const corrupt: Digest[] = [];
    await mapLimit(unknown, VERIFY_CONCURRENCY, async (digest) => {
      const check = await checkStoredBlob(this.blobs, orgId, digest);
      if (check.kind === "corrupt") corrupt.push(digest);
      if (check.kind !== "verified") return;
      // A digest names its bytes, so the size is the stored one; a claim otherwise is the client's mistake.
      await repo.recordVerified(this.db, orgId, digest, check.size, this.clock.now());
      if (check.size !== wanted.get(digest)) throw sizeMismatch(digest, check.size);
      verified.add(digest);
    });
    if (strict && corrupt.length > 0) {
      throw invalid(
        `${corrupt.length} uploaded blob(s) do not match their BLAKE3 digest and were discarded (first: ${corrupt[0]}); upload them again`,
      );
    }
    return verified;
  }

  private async readPushManifest(orgId: string, push: repo.PushRow): Promise<ParsedManifest> {
    const head = await this.blobs.head(push.manifest_key);
    if (!head) throw new AppError("failed_precondition", "the push's manifest has not been uploaded");
    if (head.size > this.settings.maxManifestBytes) {
      await this.blobs.delete(push.manifest_key);
      throw invalid(`the manifest is over max_manifest_bytes (${this.settings.maxManifestBytes}); it was discarded`);
    }
    // Bounded again as it is read: the object may have been replaced since the head.
    const bytes = await this.blobs
      .get(push.manifest_key, { maxBytes: this.settings.maxManifestBytes })
      .catch(async (error: unknown) => {
        if (!(error instanceof BlobError) || error.code !== "too_large") throw error;
        await this.blobs.delete(push.manifest_key);
        throw invalid(`the manifest is over max_manifest_bytes (${this.settings.maxManifestBytes}); it was discarded`);
      });
    if (!bytes) throw new AppError("failed_precondition", "the push's manifest has not been uploaded");
    try {
      return await this.manifestParser.parse(orgId, {
        bytes,
        maxFiles: this.settings.maxFiles,
        parent: push.parent_version_digest,
      });
    } catch (error) {
      // A refused manifest is removed so the same URL can carry a corrected one.
      await this.blobs.delete(push.manifest_key);
      throw error;
    }
  }

  /**
   * Blobs uploaded through Warren's own presigned URLs (the fs store) are hashed as they
   * stream in: one whose bytes match its key is recorded verified (a publish need not read
   * it back); one that does not is deleted and the upload refused.
   */
  uploadObserver(): UploadObserver {
    return {
      accepts: (key) => BLOB_KEY.test(key),
      stored: async (key, hex, size) => {
        const [, orgId, keyHex] = BLOB_KEY.exec(key) ?? [];
        if (!orgId || !keyHex) return;
        if (hex !== keyHex) {
          await this.blobs.delete(key);
          throw invalid("the uploaded bytes do not match the BLAKE3 digest of the blob's URL; they were discarded");
        }
        await repo.recordVerified(this.db, orgId, `blake3:${hex}`, size, this.clock.now());
      },
    };
  }

  /**
   * Removes pushes past their expiry: the uploaded manifest, the blobs they asked to upload
   * that nothing verified, then the record (objects first, so a crash leaves a record to retry).
   */
  async collectExpiredPushes(): Promise<number> {
    const expired = await repo.expiredPushes(this.db, this.clock.now(), COLLECT_BATCH);
    for (const push of expired) {
      const orphans = await repo.orphanedBlobsOf(this.db, push);
      await mapLimit(orphans, 16, (digest) => this.blobs.delete(volumeKeys.blob(push.org_id, digest)));
      await this.blobs.delete(push.manifest_key);
      await repo.deletePush(this.db, push.id);
    }
    return expired.length;
  }

  /**
   * Pins each volume's current version for a sandbox (inside the create's transaction):
   * another organization's or an unknown volume is not_found, one without a version 400.
   */
  async pin(
    q: Queryable,
    cred: Credential,
    mounts: { volume_id: string; target_path: string }[],
  ): Promise<PinnedVolume[]> {
    const pinned: PinnedVolume[] = [];
    for (const mount of mounts) {
      const volume = await repo.getVolume(q, cred.orgId, mount.volume_id);
      if (!volume) throw notFound("volume");
      if (!volume.current_version_digest) {
        throw invalid(`volume ${volume.id} has no version yet: push one before mounting it`);
      }
      pinned.push({
        volume_id: volume.id,
        version: volume.current_version_digest,
        target_path: mount.target_path,
        name: volume.name,
      });
    }
    return pinned;
  }

  /** Counts the project's volumes, for DeleteProject. */
  countInProject(q: Queryable, projectId: string): Promise<number> {
    return repo.countProjectVolumes(q, projectId);
  }

  deleteInProject(q: Queryable, projectId: string): Promise<void> {
    return repo.deleteProjectVolumes(q, projectId, this.clock.now());
  }

  private async load(q: Queryable, cred: Credential, id: string): Promise<repo.VolumeRow> {
    const row = await repo.getVolume(q, cred.orgId, id);
    if (!row) throw notFound("volume");
    return row;
  }

  private async loadPush(cred: Credential, id: string): Promise<repo.PushRow> {
    const push = await repo.getPush(this.db, cred.orgId, id);
    if (!push) throw notFound("volume push");
    return push;
  }

  private async openPush(cred: Credential, id: string): Promise<repo.PushRow> {
    const push = await this.loadPush(cred, id);
    if (push.published_digest) throw new AppError("failed_precondition", "the push is already published");
    if (push.expires_at < this.clock.now()) throw pushGone();
    return push;
  }

  private async versionOf(volumeId: string, digest: string): Promise<VolumeVersionJson> {
    return versionView(await this.versionIn(this.db, volumeId, digest));
  }

  private async versionIn(q: Queryable, volumeId: string, digest: string): Promise<repo.VersionRow> {
    const row = await repo.getVersion(q, volumeId, digest);
    if (!row) throw notFound("volume version");
    return row;
  }
}

export interface PinnedVolume {
  volume_id: string;
  version: string;
  target_path: string;
  name: string;
}

const sizeMismatch = (digest: string, size: number) =>
  invalid(`size_bytes of ${digest} does not match the stored blob (${size} bytes)`);
