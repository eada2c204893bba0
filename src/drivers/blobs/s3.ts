// The S3 blob store (AWS S3 or a compatible server; s3rver in tests). A put is verified
// twice: the server checks the Content-MD5 (and, given one, the caller's sha256 as
// x-amz-checksum-sha256), and the ETag it answers must be the MD5 of what was sent, which
// also holds servers that ignore both headers (s3rver) to what they stored.
//
// The AWS SDK is loaded by `S3BlobStore.open`, not imported here: esbuild would hoist the
// import to the server bundle's top, and the SDK costs ~450 ms of every start (and, on
// Node 20, a warning) even when the fs store is configured.
import { createHash } from "node:crypto";
import type * as ClientS3 from "@aws-sdk/client-s3";
import type { ListObjectsV2CommandOutput, S3Client } from "@aws-sdk/client-s3";
import type * as Presigner from "@aws-sdk/s3-request-presigner";
import { BlobError, type BlobInfo, type BlobStore, checkRange, type PresignOptions, tooLarge } from "./interface.js";
import { checkKey } from "./keys.js";
import { checkPresignSeconds } from "./signed-url.js";

export interface S3BlobStoreOptions {
  bucket: string;
  /** An S3-compatible server's URL; empty for AWS. */
  endpoint?: string;
  region: string;
  /** Static credentials; when both are empty the SDK's default provider chain is used. */
  accessKeyId?: string;
  secretAccessKey?: string;
  /** Path-style URLs (`<endpoint>/<bucket>/<key>`), which most S3-compatible servers need. */
  forcePathStyle?: boolean;
  /** Prepended (with a `/`) to every key, so one bucket can hold several deployments. */
  prefix?: string;
  /** Attempts per call, retries included (the SDK's backoff between them). */
  maxAttempts?: number;
  /** The signing time of presigned URLs (tests move it). */
  now?: () => Date;
}

interface Sdk {
  s3: typeof ClientS3;
  presigner: typeof Presigner;
}

const MD5_ETAG = /^"?([0-9a-f]{32})"?$/;
/** Errors of a put whose bytes did not match the digest sent with them. */
const DIGEST_ERRORS = new Set(["BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch"]);

function statusOf(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
}

function isNotFound(error: unknown): boolean {
  const name = (error as Error).name;
  return name === "NoSuchKey" || name === "NotFound" || statusOf(error) === 404;
}

/** The first `limit` bytes of a response body (fewer when it ends first); the rest is not read. */
async function readPrefix(body: AsyncIterable<Uint8Array>, limit: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let size = 0;
  // Leaving the loop early destroys the body's stream (and its connection).
  for await (const piece of body) {
    const take = Math.min(piece.byteLength, limit - size);
    parts.push(Buffer.from(piece.buffer, piece.byteOffset, take));
    size += take;
    if (size >= limit) break;
  }
  return Buffer.concat(parts, size);
}

/**
 * BlobError unavailable for a failed call. The message names the operation, the error's
 * name and the HTTP status only: SDK messages and metadata stay out of it (and out of the
 * logs it reaches), so no credential or signed request text can leak.
 */
function unavailable(operation: string, error: unknown): BlobError {
  if (error instanceof BlobError) return error;
  const status = statusOf(error);
  // Service errors carry $metadata and a name from S3; network errors a Node error code.
  const name =
    status !== undefined ? (error as Error).name : ((error as NodeJS.ErrnoException).code ?? (error as Error).name);
  return new BlobError(
    "unavailable",
    `blob store (s3): ${operation} failed: ${name}${status !== undefined ? ` (HTTP ${status})` : ""}`,
  );
}

export class S3BlobStore implements BlobStore {
  readonly kind = "s3" as const;
  /** The SDK client (tests add middleware to it to corrupt a request in flight). */
  readonly client: S3Client;
  private readonly bucket: string;
  private readonly prefix: string;
  private readonly now: () => Date;

  /** Loads the AWS SDK and makes the client (it connects on the first call). */
  static async open(options: S3BlobStoreOptions): Promise<S3BlobStore> {
    const [s3, presigner] = await Promise.all([import("@aws-sdk/client-s3"), import("@aws-sdk/s3-request-presigner")]);
    return new S3BlobStore({ s3, presigner }, options);
  }

  private constructor(
    private readonly sdk: Sdk,
    options: S3BlobStoreOptions,
  ) {
    this.bucket = options.bucket;
    const prefix = (options.prefix ?? "").replace(/^\/+|\/+$/g, "");
    this.prefix = prefix ? `${prefix}/` : "";
    this.now = options.now ?? (() => new Date());
    this.client = new sdk.s3.S3Client({
      region: options.region,
      ...(options.endpoint ? { endpoint: options.endpoint } : {}),
      forcePathStyle: options.forcePathStyle ?? false,
      ...(options.accessKeyId || options.secretAccessKey
        ? { credentials: { accessKeyId: options.accessKeyId ?? "", secretAccessKey: options.secretAccessKey ?? "" } }
        : {}),
      // Checksums only where an operation requires them: the default (CRC32 on every put)
      // is not understood by many S3-compatible servers and lands in presigned URLs.
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
      maxAttempts: options.maxAttempts ?? 3,
      requestHandler: { connectionTimeout: 5_000, requestTimeout: 120_000 },
    });
  }

  /** This process's puts of each key, in turn (putIfAbsent). */
  private readonly putting = new Map<string, Promise<unknown>>();

  /**
   * Puts of one key from this process run one after the other: the later ones find the
   * object with their HEAD. Servers without conditional writes (s3rver, older MinIO) let
   * concurrent PUTs of one key interleave into a mixed object, and a later PUT's ETag check
   * could delete the one an earlier PUT stored.
   */
  async putIfAbsent(
    key: string,
    pieces: Uint8Array | readonly Uint8Array[],
    options: { sha256?: string } = {},
  ): Promise<{ written: boolean }> {
    checkKey(key);
    const previous = this.putting.get(key);
    const mine = (previous ? previous.catch(() => undefined) : Promise.resolve()).then(() =>
      this.putOnce(key, pieces, options),
    );
    this.putting.set(key, mine);
    try {
      return await mine;
    } finally {
      if (this.putting.get(key) === mine) this.putting.delete(key);
    }
  }

  private async putOnce(
    key: string,
    pieces: Uint8Array | readonly Uint8Array[],
    options: { sha256?: string },
  ): Promise<{ written: boolean }> {
    // One body for the request (its MD5 and length); a list of pieces is joined here.
    const data = pieces instanceof Uint8Array ? pieces : Buffer.concat(pieces);
    let checksumSha256: string | undefined;
    if (options.sha256 !== undefined) {
      const actual = createHash("sha256").update(data).digest();
      if (actual.toString("hex") !== options.sha256.toLowerCase()) {
        throw new BlobError("digest_mismatch", "blob store: the bytes do not match the sha256 they were written under");
      }
      checksumSha256 = actual.toString("base64");
    }
    if (await this.head(key)) return { written: false };
    const md5 = createHash("md5").update(data).digest();
    let etag: string | undefined;
    let kms = false;
    try {
      const out = await this.client.send(
        new this.sdk.s3.PutObjectCommand({
          Bucket: this.bucket,
          Key: this.prefix + key,
          Body: data,
          ContentLength: data.length,
          ContentMD5: md5.toString("base64"),
          ...(checksumSha256 ? { ChecksumSHA256: checksumSha256 } : {}),
          // Servers that support conditional writes refuse to replace an object that
          // appeared since the HEAD; the others overwrite it with the same content-addressed bytes.
          IfNoneMatch: "*",
        }),
      );
      etag = out.ETag;
      kms = out.ServerSideEncryption?.startsWith("aws:kms") ?? false;
    } catch (error) {
      if (statusOf(error) === 412) return { written: false };
      if (DIGEST_ERRORS.has((error as Error).name)) {
        throw new BlobError(
          "digest_mismatch",
          "blob store (s3): the server refused the bytes as not matching their digest",
        );
      }
      if (statusOf(error) === 409 && (await this.head(key))) return { written: false };
      throw unavailable("put", error);
    }
    // With SSE-KMS the ETag is not an MD5; the server checked the Content-MD5 then.
    const stored = MD5_ETAG.exec(etag ?? "")?.[1];
    if (!kms && stored !== undefined && stored !== md5.toString("hex")) {
      await this.delete(key);
      throw new BlobError("digest_mismatch", "blob store (s3): the server stored bytes other than those sent");
    }
    return { written: true };
  }

  async get(key: string, options: { maxBytes?: number } = {}): Promise<Buffer | null> {
    checkKey(key);
    try {
      const out = await this.client.send(
        new this.sdk.s3.GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }),
      );
      if (!out.Body) return Buffer.alloc(0);
      const body = out.Body as AsyncIterable<Uint8Array> & { destroy?: () => void };
      if (options.maxBytes === undefined) return Buffer.from(await out.Body.transformToByteArray());
      if (out.ContentLength !== undefined && out.ContentLength > options.maxBytes) {
        body.destroy?.();
        throw tooLarge(key, options.maxBytes);
      }
      // The length the server announced is not trusted either: at most one byte more is read.
      const data = await readPrefix(body, options.maxBytes + 1);
      if (data.length > options.maxBytes) throw tooLarge(key, options.maxBytes);
      return data;
    } catch (error) {
      if (isNotFound(error)) return null;
      throw unavailable("get", error);
    }
  }

  async getRange(key: string, offset: number, length: number): Promise<Buffer | null> {
    checkKey(key);
    checkRange(offset, length);
    // An empty range cannot be asked in HTTP: whether the object exists is all there is to say.
    if (length === 0) return (await this.head(key)) === null ? null : Buffer.alloc(0);
    try {
      const out = await this.client.send(
        new this.sdk.s3.GetObjectCommand({
          Bucket: this.bucket,
          Key: this.prefix + key,
          Range: `bytes=${offset}-${offset + length - 1}`,
        }),
      );
      if (!out.Body) return Buffer.alloc(0);
      // A server that ignores Range answers the whole object (200, no Content-Range): the
      // range is cut out of it. Either way no more of the body is read than the range needs,
      // so a server answering more than asked cannot make this hold a whole large object.
      const start = out.ContentRange === undefined ? offset : 0;
      const data = await readPrefix(out.Body as AsyncIterable<Uint8Array>, start + length);
      return data.subarray(Math.min(start, data.length), start + length);
    } catch (error) {
      if (isNotFound(error)) return null;
      // The object ends before the range starts.
      if (statusOf(error) === 416 || (error as Error).name === "InvalidRange") return Buffer.alloc(0);
      throw unavailable("get a range", error);
    }
  }

  async head(key: string): Promise<{ size: number } | null> {
    checkKey(key);
    try {
      const out = await this.client.send(
        new this.sdk.s3.HeadObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }),
      );
      return { size: out.ContentLength ?? 0 };
    } catch (error) {
      if (isNotFound(error)) return null;
      throw unavailable("head", error);
    }
  }

  async delete(key: string): Promise<void> {
    checkKey(key);
    try {
      await this.client.send(new this.sdk.s3.DeleteObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }));
    } catch (error) {
      if (isNotFound(error)) return;
      throw unavailable("delete", error);
    }
  }

  async *list(prefix: string): AsyncIterable<BlobInfo> {
    let token: string | undefined;
    do {
      let page: ListObjectsV2CommandOutput;
      try {
        page = await this.client.send(
          new this.sdk.s3.ListObjectsV2Command({
            Bucket: this.bucket,
            Prefix: this.prefix + prefix,
            ...(token ? { ContinuationToken: token } : {}),
          }),
        );
      } catch (error) {
        throw unavailable("list", error);
      }
      for (const object of page.Contents ?? []) {
        if (!object.Key?.startsWith(this.prefix)) continue;
        yield {
          key: object.Key.slice(this.prefix.length),
          size: object.Size ?? 0,
          modifiedAt: object.LastModified ?? new Date(0),
        };
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
  }

  async presignPut(key: string, options: PresignOptions): Promise<string> {
    checkKey(key);
    checkPresignSeconds(options.expiresInSeconds);
    return this.sdk.presigner.getSignedUrl(
      this.client,
      new this.sdk.s3.PutObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }),
      {
        expiresIn: options.expiresInSeconds,
        signingDate: this.now(),
      },
    );
  }

  async presignGet(key: string, options: PresignOptions): Promise<string> {
    checkKey(key);
    checkPresignSeconds(options.expiresInSeconds);
    return this.sdk.presigner.getSignedUrl(
      this.client,
      new this.sdk.s3.GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }),
      {
        expiresIn: options.expiresInSeconds,
        signingDate: this.now(),
      },
    );
  }

  async close(): Promise<void> {
    this.client.destroy();
  }
}
