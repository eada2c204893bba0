// Image references as Docker spells them (`busybox`, `ghcr.io/o/r:tag`, `host:5000/r@sha256:...`),
// parsed into registry, repository, tag and digest with Docker Hub's defaults applied.
import { ImageError } from "./errors.js";

export interface ImageReference {
  /** Registry as named in references: `docker.io`, `ghcr.io`, `127.0.0.1:5000`, `[::1]:5000`. */
  registry: string;
  /** Repository path inside the registry: `library/busybox`. */
  repository: string;
  /** The tag, `latest` when neither a tag nor a digest was given; null for a digest-only reference. */
  tag: string | null;
  /** `sha256:<64 hex>` when the reference pins a digest (it then wins over the tag). */
  digest: string | null;
}

export const DOCKER_HUB = "docker.io";
const DOCKER_HUB_API_HOST = "registry-1.docker.io";
const DOCKER_HUB_ALIASES = new Set(["docker.io", "index.docker.io", "registry-1.docker.io"]);

const DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const DOMAIN_RE = new RegExp(
  `^(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[0-9a-fA-F:.]+\\])(?::[0-9]{1,5})?$`,
);
const PATH_COMPONENT_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG_RE = /^[\w][\w.-]{0,127}$/;
const SHA256_DIGEST_RE = /^sha256:[a-f0-9]{64}$/;
const DIGEST_RE = /^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$/;
const MAX_NAME_LENGTH = 255;

function invalid(input: string, why: string): ImageError {
  return new ImageError("invalid_reference", `invalid image reference "${input}": ${why}`);
}

/** True when `digest` is a well-formed `sha256:<64 lowercase hex>` digest. */
export function isSha256Digest(digest: string): boolean {
  return SHA256_DIGEST_RE.test(digest);
}

/** Parses a reference; throws ImageError("invalid_reference") when it is malformed. */
export function parseImageReference(input: string): ImageReference {
  if (input.length === 0) throw invalid(input, "empty");
  if (input !== input.trim()) throw invalid(input, "surrounding whitespace");

  let rest = input;
  let digest: string | null = null;
  const at = rest.indexOf("@");
  if (at !== -1) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST_RE.test(digest)) throw invalid(input, "malformed digest");
    if (digest.startsWith("sha256:") && !isSha256Digest(digest)) {
      throw invalid(input, "a sha256 digest has 64 lowercase hex digits");
    }
  }

  let tag: string | null = null;
  const lastSlash = rest.lastIndexOf("/");
  const colon = rest.lastIndexOf(":");
  if (colon > lastSlash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG_RE.test(tag)) throw invalid(input, "malformed tag");
  }
  if (rest.length === 0) throw invalid(input, "missing repository name");
  if (rest.length > MAX_NAME_LENGTH) throw invalid(input, `name longer than ${MAX_NAME_LENGTH} characters`);

  let registry = DOCKER_HUB;
  let repository = rest;
  const firstSlash = rest.indexOf("/");
  if (firstSlash !== -1) {
    const first = rest.slice(0, firstSlash);
    // Docker's rule: the first component is a registry when it looks like a host name.
    if (first.includes(".") || first.includes(":") || first === "localhost" || first !== first.toLowerCase()) {
      if (!DOMAIN_RE.test(first)) throw invalid(input, "malformed registry host");
      registry = DOCKER_HUB_ALIASES.has(first) ? DOCKER_HUB : first;
      repository = rest.slice(firstSlash + 1);
    }
  }
  const components = repository.split("/");
  for (const component of components) {
    if (!PATH_COMPONENT_RE.test(component)) {
      throw invalid(input, "repository components are lowercase letters, digits and single separators");
    }
  }
  if (registry === DOCKER_HUB && components.length === 1) repository = `library/${repository}`;
  if (tag === null && digest === null) tag = "latest";
  return { registry, repository, tag, digest };
}

/** The canonical spelling: `docker.io/library/busybox:latest`, `host:5000/r:tag@sha256:...`. */
export function formatImageReference(ref: ImageReference): string {
  let out = `${ref.registry}/${ref.repository}`;
  if (ref.tag !== null) out += `:${ref.tag}`;
  if (ref.digest !== null) out += `@${ref.digest}`;
  return out;
}

/** The host[:port] the registry API answers on (Docker Hub's API is not at docker.io). */
export function registryApiHost(registry: string): string {
  return registry === DOCKER_HUB ? DOCKER_HUB_API_HOST : registry;
}

/** The host part of `host[:port]`, brackets removed from an IPv6 literal. */
export function hostWithoutPort(hostPort: string): string {
  if (hostPort.startsWith("[")) {
    const end = hostPort.indexOf("]");
    return end === -1 ? hostPort : hostPort.slice(1, end);
  }
  const colon = hostPort.indexOf(":");
  return colon === -1 ? hostPort : hostPort.slice(0, colon);
}

/** Loopback as Docker treats it for plain HTTP: localhost, 127.0.0.0/8 and ::1. */
export function isLoopbackHost(hostPort: string): boolean {
  const host = hostWithoutPort(hostPort).toLowerCase();
  if (host === "localhost" || host === "::1" || host === "0:0:0:0:0:0:0:1") return true;
  const octets = host.split(".");
  return (
    octets.length === 4 &&
    octets[0] === "127" &&
    octets.every((octet) => /^[0-9]{1,3}$/.test(octet) && Number(octet) <= 255)
  );
}

/**
 * The base URL of a registry's API. Plain HTTP only for loopback and for registries listed
 * in `insecureRegistries` (exactly as `host[:port]`); HTTPS everywhere else.
 */
export function registryBaseUrl(registry: string, insecureRegistries: readonly string[] = []): string {
  const apiHost = registryApiHost(registry);
  const insecure =
    isLoopbackHost(apiHost) || insecureRegistries.includes(registry) || insecureRegistries.includes(apiHost);
  return `${insecure ? "http" : "https"}://${apiHost}`;
}
