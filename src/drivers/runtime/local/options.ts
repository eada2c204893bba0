// What a deployment configures of the local driver (container.ts maps config.ts onto it).
import type { Logger } from "../../../lib/logger.js";
import type { LayerCache } from "../image/layer-cache.js";
import type { RegistryClientOptions } from "../image/registry-client.js";
import type { UidRange } from "./namespace-owners.js";

export interface LocalRuntimeDriverOptions {
  /** Everything of this driver lives below it (see layout.ts). */
  root: string;
  /** The image cache to use; by default one at `<root>/images` over a RegistryClient(`registry`). */
  layerCache?: LayerCache;
  registry?: RegistryClientOptions;
  /** How long a tag's resolution is reused for creates before asking the registry again (default 0). */
  imageTagTtlMs?: number;
  /** Pool of /30 sandbox subnets for `public` networking (default 10.213.0.0/16). */
  subnetPool?: string;
  /**
   * IPv4 ranges sandboxes may not reach, beyond the private, loopback, link-local and
   * multicast ones always blocked: e.g. the host's LAN when it uses public addresses.
   */
  extraBlockedRanges?: string[];
  /**
   * The egress gateway sandboxes reach at `address` port 80 (redirected to `port` on the
   * host); without it the virtual address leads nowhere and gateway_only reaches nothing.
   */
  gateway?: { address: string; port: number };
  /** Install missing Debian packages at open (default true). */
  installPackages?: boolean;
  startTimeoutMs?: number;
  stopTimeoutMs?: number;
  /**
   * Run execs through a resident exec agent per sandbox (exec-agent.ts; default true). When
   * false, or when the agent cannot be built or started, every exec is its own `runc exec`.
   */
  execAgent?: boolean;
  /** Where the agent binary is built and cached (default `<tmpdir>/warren-exec-agent`). */
  execAgentCacheDir?: string;
  /** Start a sandbox's agent in the background right after start() (default true). */
  prestartExecAgent?: boolean;
  /** Size of every sandbox's root layer filesystem (what it writes outside /workspace); default 10. */
  rootLayerGiB?: number;
  /** Size of a standard sandbox's /workspace; default 10. */
  standardWorkspaceGiB?: number;
  /** Size of the XFS storage pool; default the size of the filesystem holding `root`. */
  storagePoolGiB?: number;
  /** Host space never promised to sandboxes' storage (storage/admission.ts); default 5 GiB. */
  storageReserveGiB?: number;
  /** Times what the host can back that sandboxes' storage may be promised; default 8 (1: nothing the host cannot back). */
  storageOvercommit?: number;
  /** A blank image template unused for this long is removed; default 10 minutes. */
  storageTemplateIdleMs?: number;
  /** A CA certificate (PEM) every sandbox trusts: the deployment's egress CA (trust.ts). */
  trustedCaPem?: string;
  /**
   * Sandboxes created from now on run in a user namespace of their own (user-namespace.ts),
   * so the kernel's per-user counts (inotify, fanotify) are theirs, not host root's; default true.
   */
  userNamespaces?: boolean;
  /**
   * Sandboxes created from now on have their ids 0..65535 mapped to a host block of their own
   * (id-mapping.ts; needs userNamespaces): root inside is an unprivileged host uid; default true (false: ids one to one).
   */
  idMapping?: boolean;
  /** The blocks of 65536 host ids mapped sandboxes draw from; default [2^31, 2^32 - 65536) (id-mapping.ts). */
  idMappingBlocks?: UidRange;
  /** The search-only tree holding what mapped sandboxes' bundles name; default /run/warren-mapped (tests only). */
  idMappingTreeDir?: string;
  /** Where the driver's background failures are told (a CPU weight it could not write). */
  log?: Logger;
  /** The host uids this driver's sandboxes' user namespaces are owned by; default [2^30, 2^31) (namespace-owners.ts). */
  namespaceOwnerUids?: UidRange;
  /** The machine-wide directory of owner claims; default /run/warren/userns-owners (tests only). */
  namespaceOwnerClaimsDir?: string;
}
