// The driver's images: pulls through the layer cache (unpacked, content-addressed layers
// under `<root>/images`), as the driver's errors, and the layer dirs a sandbox's overlay
// stacks (pulled again by digest when the cache lost them).
import { exists } from "../../../lib/fs.js";
import { ImageError } from "../image/errors.js";
import { LayerCache } from "../image/layer-cache.js";
import { parseImageReference } from "../image/reference.js";
import { RegistryClient, type RegistryClientOptions } from "../image/registry-client.js";
import { type PreparedImage, type PrepareImageOptions, RuntimeError } from "../interface.js";

const RECENT_IMAGES = 64;

export class ImageSource {
  private readonly cache: LayerCache;
  /** References prepared by this process, most recent last (placement's image hint; bounded). */
  private readonly recent = new Set<string>();

  constructor(options: {
    imagesDir: string;
    layerCache?: LayerCache | undefined;
    registry?: RegistryClientOptions | undefined;
    tagTtlMs?: number | undefined;
  }) {
    this.cache =
      options.layerCache ??
      new LayerCache({
        root: options.imagesDir,
        client: new RegistryClient(options.registry),
        tagTtlMs: options.tagTtlMs ?? 0,
      });
  }

  /** The image references this process has prepared from the layer cache, most recent first. */
  recentImages(): string[] {
    return [...this.recent].reverse();
  }

  async prepare(reference: string, options: PrepareImageOptions = {}): Promise<PreparedImage> {
    try {
      const { image, downloaded } = await this.cache.pull(
        reference,
        options.onProgress ? { onProgress: options.onProgress } : {},
      );
      const { entrypoint, cmd, env, workingDir, user } = image.config;
      this.recent.delete(reference);
      this.recent.add(reference);
      if (this.recent.size > RECENT_IMAGES) this.recent.delete(this.recent.values().next().value as string);
      return { reference, digest: image.digest, downloaded, config: { entrypoint, cmd, env, workingDir, user } };
    } catch (error) {
      if (error instanceof ImageError) {
        const code = error.code === "invalid_reference" ? "invalid_spec" : "image_unavailable";
        throw new RuntimeError(code, error.message, { cause: error });
      }
      throw error;
    }
  }

  pulledBytes(): number {
    return this.cache.receivedBytes();
  }

  /** The image's layer dirs, pulled again by digest if the cache lost them. */
  async lowerDirsOf(image: PreparedImage): Promise<string[]> {
    const cached = await this.cache.getImage(image.digest);
    if (cached && (await Promise.all(cached.lowerDirs.map(exists))).every(Boolean)) return cached.lowerDirs;
    try {
      const ref = { ...parseImageReference(image.reference), digest: image.digest };
      return (await this.cache.pull(ref)).image.lowerDirs;
    } catch (error) {
      throw new RuntimeError("image_unavailable", `image ${image.reference}: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }
}
