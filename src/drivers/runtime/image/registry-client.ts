// An OCI distribution (registry v2) client over fetch: manifests and indexes (resolved to
// one platform), blobs streamed to disk with their sha256 checked on the way, and the
// Bearer-token dance Docker Hub and GHCR use (anonymous, or Basic credentials at the token
// endpoint). Plain HTTP only for loopback and registries configured as insecure.
import { createHash } from "node:crypto";
import { type FileHandle, open, rename, rm } from "node:fs/promises";
import { ImageError } from "./errors.js";
import { type ImageReference, isLoopbackHost, isSha256Digest, registryBaseUrl } from "./reference.js";

export const MEDIA_TYPES = {
  ociIndex: "application/vnd.oci.image.index.v1+json",
  ociManifest: "application/vnd.oci.image.manifest.v1+json",
  dockerManifestList: "application/vnd.docker.distribution.manifest.list.v2+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
  ociConfig: "application/vnd.oci.image.config.v1+json",
  dockerConfig: "application/vnd.docker.container.image.v1+json",
  ociLayer: "application/vnd.oci.image.layer.v1.tar",
  ociLayerGzip: "application/vnd.oci.image.layer.v1.tar+gzip",
  ociLayerZstd: "application/vnd.oci.image.layer.v1.tar+zstd",
  dockerLayerGzip: "application/vnd.docker.image.rootfs.diff.tar.gzip",
} as const;

const MANIFEST_ACCEPT = [
  MEDIA_TYPES.ociIndex,
  MEDIA_TYPES.ociManifest,
  MEDIA_TYPES.dockerManifestList,
  MEDIA_TYPES.dockerManifest,
].join(", ");
const INDEX_TYPES = new Set<string>([MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerManifestList]);
const MANIFEST_TYPES = new Set<string>([MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest]);
const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
const MAX_REDIRECTS = 5;

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: Platform;
  annotations?: Record<string, string>;
  urls?: string[];
}

export interface ImageManifest {
  schemaVersion: number;
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
}

export interface ImageIndex {
  schemaVersion: number;
  mediaType?: string;
  manifests: Descriptor[];
}

/** A manifest or index exactly as served, with its verified digest. */
export interface FetchedManifest {
  digest: string;
  mediaType: string;
  bytes: Buffer;
}

export interface ResolvedImage {
  /** Digest of the platform-specific image manifest. */
  digest: string;
  manifest: ImageManifest;
  /** The manifests and indexes walked to get there, outermost first, last one the image manifest. */
  documents: FetchedManifest[];
}

export interface RegistryCredentials {
  username: string;
  password: string;
}

export interface RegistryClientOptions {
  /** Registries (`host[:port]` as written in references) reached over plain HTTP. */
  insecureRegistries?: readonly string[];
  /** Credentials per registry (`docker.io`, `ghcr.io`, `host:port`); anonymous otherwise. */
  credentials?: Readonly<Record<string, RegistryCredentials>>;
  /** The platform an index is resolved to; linux/amd64 by default. */
  platform?: Platform;
  /** Aborts a request whose response (or next body chunk) takes longer than this. */
  idleTimeoutMs?: number;
  /** Injected for tests (request counting); the global fetch otherwise. */
  fetch?: typeof fetch;
  userAgent?: string;
}

export type RepositoryRef = Pick<ImageReference, "registry" | "repository">;

export interface AuthChallenge {
  scheme: string;
  params: Record<string, string>;
}

/** Parses `Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="..."`. */
export function parseAuthChallenge(header: string): AuthChallenge | null {
  const match = /^\s*([A-Za-z][A-Za-z0-9-]*)\s*(.*)$/s.exec(header);
  if (!match) return null;
  const params: Record<string, string> = {};
  const paramRe = /([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?\s*/gy;
  const rest = match[2] ?? "";
  let param: RegExpExecArray | null = paramRe.exec(rest);
  while (param !== null) {
    params[(param[1] as string).toLowerCase()] =
      param[2] !== undefined ? param[2].replace(/\\(.)/g, "$1") : (param[3] ?? "");
    if (paramRe.lastIndex >= rest.length) break;
    param = paramRe.exec(rest);
  }
  return { scheme: (match[1] as string).toLowerCase(), params };
}

/** Picks the entry of an index for a platform; attestations and other platforms are skipped. */
export function selectPlatformManifest(index: ImageIndex, platform: Platform): Descriptor {
  const candidates = index.manifests.filter(
    (entry) => entry.platform?.os === platform.os && entry.platform?.architecture === platform.architecture,
  );
  const exact = candidates.find((entry) => (entry.platform?.variant ?? "") === (platform.variant ?? ""));
  const chosen = platform.variant === undefined ? (exact ?? candidates[0]) : exact;
  if (!chosen) {
    const wanted = `${platform.os}/${platform.architecture}${platform.variant ? `/${platform.variant}` : ""}`;
    const offered = index.manifests
      .map((entry) => (entry.platform ? `${entry.platform.os}/${entry.platform.architecture}` : "unknown"))
      .join(", ");
    throw new ImageError("not_found", `the image index has no ${wanted} image (it has: ${offered || "none"})`);
  }
  return chosen;
}

export function sha256Digest(bytes: Buffer): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

function assertSha256(digest: string): void {
  if (!isSha256Digest(digest)) throw new ImageError("unsupported", `unsupported digest "${digest}" (only sha256)`);
}

function isDescriptor(value: unknown): value is Descriptor {
  const v = value as Descriptor;
  return (
    typeof v === "object" &&
    v !== null &&
    typeof v.mediaType === "string" &&
    typeof v.digest === "string" &&
    typeof v.size === "number"
  );
}

/** Classifies a manifest document by its media type (header or body) and its shape. */
export function parseManifestDocument(
  fetched: FetchedManifest,
): { kind: "index"; index: ImageIndex } | { kind: "manifest"; manifest: ImageManifest } {
  let json: unknown;
  try {
    json = JSON.parse(fetched.bytes.toString("utf8"));
  } catch (error) {
    throw new ImageError("registry_error", `manifest ${fetched.digest} is not JSON`, { cause: error });
  }
  const doc = json as Partial<ImageIndex & ImageManifest>;
  if (doc.schemaVersion !== 2) {
    throw new ImageError("unsupported", `manifest schema version ${String(doc.schemaVersion)} is not supported`);
  }
  const mediaType = doc.mediaType ?? fetched.mediaType;
  if (INDEX_TYPES.has(mediaType) || (!MANIFEST_TYPES.has(mediaType) && Array.isArray(doc.manifests))) {
    if (!Array.isArray(doc.manifests) || !doc.manifests.every(isDescriptor)) {
      throw new ImageError("registry_error", `malformed image index ${fetched.digest}`);
    }
    return { kind: "index", index: doc as ImageIndex };
  }
  if (!isDescriptor(doc.config) || !Array.isArray(doc.layers) || !doc.layers.every(isDescriptor)) {
    throw new ImageError("registry_error", `malformed image manifest ${fetched.digest}`);
  }
  return { kind: "manifest", manifest: doc as ImageManifest };
}

interface CachedAuth {
  header: string;
  expiresAt: number;
}

export class RegistryClient {
  private readonly insecure: readonly string[];
  private readonly credentials: Readonly<Record<string, RegistryCredentials>>;
  private readonly platform: Platform;
  private readonly idleTimeoutMs: number;
  private readonly fetchImpl: typeof fetch;
  private readonly userAgent: string;
  private readonly auth = new Map<string, CachedAuth>();
  /** Bytes of manifests and blobs received from registries since this client was made (metrics). */
  receivedBytes = 0;

  constructor(options: RegistryClientOptions = {}) {
    this.insecure = options.insecureRegistries ?? [];
    this.credentials = options.credentials ?? {};
    this.platform = options.platform ?? { os: "linux", architecture: "amd64" };
    this.idleTimeoutMs = options.idleTimeoutMs ?? 60_000;
    this.fetchImpl = options.fetch ?? globalThis.fetch;
    this.userAgent = options.userAgent ?? "warren";
  }

  get targetPlatform(): Platform {
    return this.platform;
  }

  /** Fetches a manifest or index by tag or digest and checks its digest. */
  async fetchManifest(repo: RepositoryRef, tagOrDigest: string): Promise<FetchedManifest> {
    const byDigest = tagOrDigest.includes(":");
    if (byDigest) assertSha256(tagOrDigest);
    const { response, done } = await this.request(repo, `manifests/${tagOrDigest}`, MANIFEST_ACCEPT);
    try {
      const bytes = await this.readLimited(response, MAX_MANIFEST_BYTES, `manifest ${tagOrDigest}`);
      const digest = sha256Digest(bytes);
      if (byDigest && digest !== tagOrDigest) {
        throw new ImageError("digest_mismatch", `manifest ${tagOrDigest} has digest ${digest}`);
      }
      const claimed = response.headers.get("docker-content-digest");
      if (claimed?.startsWith("sha256:") && claimed !== digest) {
        throw new ImageError(
          "digest_mismatch",
          `manifest ${tagOrDigest}: registry says ${claimed}, content is ${digest}`,
        );
      }
      const mediaType = (response.headers.get("content-type") ?? "").split(";")[0]?.trim() ?? "";
      return { digest, mediaType, bytes };
    } finally {
      done();
    }
  }

  /** Resolves a reference to one platform-specific image manifest (following an index). */
  async resolve(ref: ImageReference): Promise<ResolvedImage> {
    const documents: FetchedManifest[] = [];
    let next = ref.digest ?? ref.tag ?? "latest";
    for (let depth = 0; depth < 3; depth++) {
      const fetched = await this.fetchManifest(ref, next);
      documents.push(fetched);
      const doc = parseManifestDocument(fetched);
      if (doc.kind === "manifest") return { digest: fetched.digest, manifest: doc.manifest, documents };
      next = selectPlatformManifest(doc.index, this.platform).digest;
      assertSha256(next);
    }
    throw new ImageError("unsupported", "image indexes nested too deeply");
  }

  /** A small blob (an image config) read into memory, digest checked. */
  async fetchBlobBytes(repo: RepositoryRef, digest: string, maxBytes = 16 * 1024 * 1024): Promise<Buffer> {
    assertSha256(digest);
    const { response, done } = await this.request(repo, `blobs/${digest}`, "*/*");
    try {
      const bytes = await this.readLimited(response, maxBytes, `blob ${digest}`);
      const actual = sha256Digest(bytes);
      if (actual !== digest) throw new ImageError("digest_mismatch", `blob ${digest} has digest ${actual}`);
      return bytes;
    } finally {
      done();
    }
  }

  /**
   * A blob's bytes as they arrive, for a consumer that processes them on the way (the layer
   * unpacker): nothing is buffered beyond the chunk in hand. The sha256 is checked after the
   * last chunk and a mismatch is thrown to the consumer from its final read, so whatever it
   * built from the stream must be discarded unless the iteration ended normally.
   * `expectedSize` caps what we accept; `onBytes` hears of every chunk (progress).
   */
  async *streamBlob(
    repo: RepositoryRef,
    digest: string,
    expectedSize?: number,
    onBytes?: (bytes: number) => void,
  ): AsyncGenerator<Buffer> {
    assertSha256(digest);
    const { response, done } = await this.request(repo, `blobs/${digest}`, "*/*");
    const hash = createHash("sha256");
    let size = 0;
    try {
      if (!response.body) throw new ImageError("registry_error", `blob ${digest}: empty response`);
      for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
        done.touch();
        size += chunk.length;
        this.receivedBytes += chunk.length;
        if (expectedSize !== undefined && size > expectedSize) {
          throw new ImageError(
            "digest_mismatch",
            `blob ${digest} is larger than its descriptor's ${expectedSize} bytes`,
          );
        }
        hash.update(chunk);
        onBytes?.(chunk.length);
        yield Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      }
      const actual = `sha256:${hash.digest("hex")}`;
      if (actual !== digest) throw new ImageError("digest_mismatch", `blob ${digest} has digest ${actual}`);
    } finally {
      done();
    }
  }

  /**
   * Streams a blob to `destination` (written to a temp name beside it, renamed when complete
   * and verified), hashing as it goes. `expectedSize` caps what we accept.
   */
  async downloadBlob(repo: RepositoryRef, digest: string, destination: string, expectedSize?: number): Promise<void> {
    assertSha256(digest);
    const partial = `${destination}.partial-${process.pid}-${Math.random().toString(36).slice(2)}`;
    let handle: FileHandle | undefined;
    try {
      handle = await open(partial, "wx", 0o644);
      // streamBlob checks the size as it goes and the digest before its iteration ends.
      for await (const chunk of this.streamBlob(repo, digest, expectedSize)) {
        let written = 0;
        while (written < chunk.length) written += (await handle.write(chunk, written)).bytesWritten;
      }
      await handle.sync();
      await handle.close();
      handle = undefined;
      await rename(partial, destination);
    } catch (error) {
      await handle?.close().catch(() => {});
      await rm(partial, { force: true });
      throw error;
    }
  }

  private async readLimited(response: Response, maxBytes: number, what: string): Promise<Buffer> {
    const declared = Number(response.headers.get("content-length") ?? "0");
    if (declared > maxBytes) throw new ImageError("registry_error", `${what} is ${declared} bytes, over the limit`);
    const chunks: Buffer[] = [];
    let size = 0;
    if (response.body) {
      for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
        size += chunk.length;
        this.receivedBytes += chunk.length;
        if (size > maxBytes) throw new ImageError("registry_error", `${what} is over ${maxBytes} bytes`);
        chunks.push(Buffer.from(chunk));
      }
    }
    return Buffer.concat(chunks);
  }

  /**
   * GET /v2/<repo>/<path>, answering an auth challenge once. The caller must call `done()`
   * (it stops the idle timer); `done.touch()` restarts the timer while a body streams.
   */
  private async request(
    repo: RepositoryRef,
    path: string,
    accept: string,
  ): Promise<{ response: Response; done: (() => void) & { touch(): void } }> {
    const url = `${registryBaseUrl(repo.registry, this.insecure)}/v2/${repo.repository}/${path}`;
    const scope = `repository:${repo.repository}:pull`;
    const authKey = `${repo.registry}|${scope}`;
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const touch = () => {
      clearTimeout(timer);
      timer = setTimeout(() => controller.abort(new Error(`no data for ${this.idleTimeoutMs} ms`)), this.idleTimeoutMs);
      timer.unref();
    };
    // Aborting a finished exchange is harmless; aborting an unfinished one frees its connection.
    const done = Object.assign(
      () => {
        clearTimeout(timer);
        controller.abort(new Error("request finished"));
      },
      { touch },
    );
    touch();
    try {
      const cached = this.auth.get(authKey);
      let authorization = cached && cached.expiresAt > Date.now() ? cached.header : undefined;
      let response = await this.get(url, accept, authorization, controller.signal);
      if (response.status === 401) {
        await response.body?.cancel();
        const challenge = parseAuthChallenge(response.headers.get("www-authenticate") ?? "");
        const granted = await this.authorize(repo.registry, challenge, scope, controller.signal);
        authorization = granted.header;
        this.auth.set(authKey, granted);
        response = await this.get(url, accept, authorization, controller.signal);
      }
      if (response.ok) {
        touch();
        return { response, done };
      }
      await response.body?.cancel();
      const what = `${repo.registry}/${repo.repository} ${path}`;
      if (response.status === 401 || response.status === 403) {
        throw new ImageError("unauthorized", `registry refused access to ${what} (HTTP ${response.status})`);
      }
      if (response.status === 404) throw new ImageError("not_found", `${what} not found`);
      throw new ImageError("registry_error", `${what}: HTTP ${response.status}`);
    } catch (error) {
      done();
      if (error instanceof ImageError) throw error;
      throw new ImageError("registry_error", `cannot reach ${url}: ${(error as Error).message}`, { cause: error });
    }
  }

  /** GET following redirects by hand so credentials never travel to another origin (a CDN). */
  private async get(
    url: string,
    accept: string,
    authorization: string | undefined,
    signal: AbortSignal,
  ): Promise<Response> {
    let current = url;
    const origin = new URL(url).origin;
    for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
      const headers: Record<string, string> = { accept, "user-agent": this.userAgent };
      if (authorization && new URL(current).origin === origin) headers.authorization = authorization;
      const response = await this.fetchImpl(current, { headers, redirect: "manual", signal });
      const location = response.headers.get("location");
      if (response.status < 300 || response.status >= 400 || !location) return response;
      await response.body?.cancel();
      current = new URL(location, current).toString();
    }
    throw new ImageError("registry_error", `too many redirects from ${url}`);
  }

  /** Turns a 401 challenge into an Authorization header (a Bearer token, or Basic). */
  private async authorize(
    registry: string,
    challenge: AuthChallenge | null,
    scope: string,
    signal: AbortSignal,
  ): Promise<CachedAuth> {
    const credentials = this.credentials[registry];
    const basic = credentials
      ? `Basic ${Buffer.from(`${credentials.username}:${credentials.password}`).toString("base64")}`
      : undefined;
    if (challenge?.scheme === "basic") {
      if (!basic) throw new ImageError("unauthorized", `${registry} wants credentials and none are configured`);
      return { header: basic, expiresAt: Number.POSITIVE_INFINITY };
    }
    if (challenge?.scheme !== "bearer" || !challenge.params.realm) {
      throw new ImageError("unauthorized", `${registry} answered 401 without a usable Bearer challenge`);
    }
    const realm = new URL(challenge.params.realm);
    if (challenge.params.service) realm.searchParams.set("service", challenge.params.service);
    realm.searchParams.set("scope", challenge.params.scope ?? scope);
    // Credentials only over HTTPS, or to a token endpoint on this host.
    const safeForSecrets = realm.protocol === "https:" || isLoopbackHost(realm.host);
    const headers: Record<string, string> = { accept: "application/json", "user-agent": this.userAgent };
    if (basic && safeForSecrets) headers.authorization = basic;
    const response = await this.fetchImpl(realm, { headers, signal });
    if (!response.ok) {
      await response.body?.cancel();
      throw new ImageError(
        "unauthorized",
        `token endpoint ${realm.origin}${realm.pathname} answered HTTP ${response.status}`,
      );
    }
    const body = (await response.json()) as { token?: unknown; access_token?: unknown; expires_in?: unknown };
    const token = typeof body.token === "string" ? body.token : body.access_token;
    if (typeof token !== "string" || token === "") {
      throw new ImageError("unauthorized", `token endpoint ${realm.origin}${realm.pathname} returned no token`);
    }
    // Docker's token spec: 60 seconds unless told otherwise; renew a little early.
    const lifetimeSeconds = typeof body.expires_in === "number" && body.expires_in > 0 ? body.expires_in : 60;
    return { header: `Bearer ${token}`, expiresAt: Date.now() + lifetimeSeconds * 900 };
  }
}
