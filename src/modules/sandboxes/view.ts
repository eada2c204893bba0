// Pure helpers of the sandbox service: the wire views of a row and of a network receipt,
// and the create-request rules the schema cannot state (metadata bytes, argv, a restore's
// workspace capacity).
import { ImageError } from "../../drivers/runtime/image/errors.js";
import { parseImageReference } from "../../drivers/runtime/image/reference.js";
import type { NetworkApplied } from "../../drivers/runtime/interface.js";
import { AppError } from "../../lib/errors.js";
import type { SandboxRow } from "./repo.js";
import type { SandboxJson } from "./schemas.js";

export const METADATA_MAX_VALUE_BYTES = 4096;

/** A sandbox id as the API mints them (newSandboxId); anything else is no sandbox. */
export const SANDBOX_ID = /^sbx-[0-9a-f]{40}$/;

/** Whether a sandbox is still shown: live, or finished within the retention period. */
export function isVisible(row: Pick<SandboxRow, "finished_at">, now: Date, retentionSeconds: number): boolean {
  if (!row.finished_at) return true;
  return row.finished_at.getTime() + retentionSeconds * 1000 > now.getTime();
}

export function checkMetadata(metadata: Record<string, string> | undefined): void {
  if (!metadata) return;
  let bytes = 0;
  for (const value of Object.values(metadata)) bytes += Buffer.byteLength(value, "utf8");
  if (bytes > METADATA_MAX_VALUE_BYTES) {
    throw new AppError(
      "invalid_argument",
      `metadata values may hold at most ${METADATA_MAX_VALUE_BYTES} bytes in total`,
    );
  }
}

export function checkArgv(field: string, argv: string[] | undefined): void {
  if (argv && (argv[0] ?? "") === "")
    throw new AppError("invalid_argument", `${field}[0] must be a non-empty executable`);
  if (argv?.some((arg) => arg.includes("\0")))
    throw new AppError("invalid_argument", `${field} entries may not contain NUL`);
}

/** A malformed image reference is the create's 400, not a `failed` sandbox later (the same parser as the pull's). */
export function checkImageReference(field: string, reference: string | undefined): void {
  if (reference === undefined) return;
  try {
    parseImageReference(reference);
  } catch (error) {
    if (error instanceof ImageError) throw new AppError("invalid_argument", `${field}: ${error.message}`);
    throw error;
  }
}

/** Ports are reached through the session plane, which a sandbox without a network cannot serve. */
export function checkPorts(ports: number[] | undefined, network: "public" | "gateway_only" | "none"): void {
  if (ports?.length && network === "none") {
    throw new AppError(
      "invalid_argument",
      "ports need a network: a sandbox with network_access none cannot serve them (use public or gateway_only)",
    );
  }
}

/**
 * `ssh` is where the SSH gateway listens (null: none); a sandbox carries it while it runs
 * (and is not quarantined), with its own id as the user.
 */
export function sandboxView(
  row: SandboxRow,
  endpoints: SandboxJson["endpoints"] = [],
  ssh: { host: string; port: number } | null = null,
): SandboxJson {
  const view: SandboxJson = {
    id: row.id,
    state: row.quarantined ? "quarantined" : row.state,
    // One of two variants: a root carries image, a child the snapshot it was restored from.
    ...(row.snapshot_id ? { snapshot_id: row.snapshot_id } : { image: row.image }),
    storage_class: row.storage_class,
    placement_class: row.placement_class,
    endpoints,
    lineage_path: row.lineage_path,
    metadata: row.metadata,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    volumes: (row.volumes ?? []).map((v) => ({
      volume_id: v.volume_id,
      version: v.version,
      target_path: v.target_path,
      name: v.name,
    })),
    workload_image: row.workload_image,
    network_access: row.network_access,
    ports: row.ports,
  };
  if (row.expires_at) view.expires_at = row.expires_at.toISOString();
  if (ssh && row.state === "running" && !row.quarantined) view.ssh = { host: ssh.host, port: ssh.port, user: row.id };
  // A stopped sandbox shows why its last wake failed (reconciler startProcess); a quarantine's
  // reason left from before a release is not one.
  const refusedWake = row.state === "stopped" && row.state_reason_code !== "operator_quarantine";
  if (
    row.state_reason_code &&
    (row.state === "failed" || row.quarantined || row.state === "attention" || refusedWake)
  ) {
    view.state_reason = { code: row.state_reason_code, message: row.state_reason_message ?? "" };
  }
  if (row.name) view.name = row.name;
  view.resources = { memory_mb: row.resources.memory_mb, cpu_millis: row.resources.cpu_millis };
  if (row.created_by) view.created_by = row.created_by;
  if (row.last_activity_at && row.last_activity_source) {
    view.last_activity = { at: row.last_activity_at.toISOString(), source: row.last_activity_source };
  }
  if (row.storage_class === "durable" && row.workspace_capacity_gib)
    view.workspace_capacity_gib = row.workspace_capacity_gib;
  if (row.idle_timeout_seconds) view.idle_timeout_seconds = row.idle_timeout_seconds;
  if (row.idle_deadline && row.state === "running") view.idle_deadline = row.idle_deadline.toISOString();
  return view;
}

/**
 * The workspace capacity of a restore: the snapshot's stamped capacity unless the create
 * names a larger one (never smaller: the files are already there); a standard restore
 * keeps the snapshot's workspace size but stamps none.
 */
export function restoredCapacity(
  storageClass: "standard" | "durable",
  asked: number | undefined,
  source: { workspaceCapacityGiB: number | null },
): number | null {
  if (storageClass !== "durable") return null;
  const stamped = source.workspaceCapacityGiB;
  if (stamped === null) {
    if (asked === undefined) {
      throw new AppError(
        "invalid_argument",
        "this snapshot has no recorded workspace capacity: name workspace_capacity_gib",
      );
    }
    return asked;
  }
  if (asked !== undefined && asked < stamped) {
    throw new AppError(
      "workspace_shrink_unsupported",
      `the snapshot's workspace is ${stamped} GiB; a restore may grow it but not shrink it`,
    );
  }
  return asked ?? stamped;
}

/** The contract's receipt names Kubernetes objects; here they are the namespace and nftables rules applied. */
export function receiptView(receipt: NetworkApplied) {
  return {
    network_access: receipt.mode,
    pod_uid: receipt.namespace.name,
    pod_resource_version: String(receipt.namespace.inode),
    policies: receipt.rules.map((rule) => ({
      policy_name: `${rule.family} ${rule.table} ${rule.chain}`,
      policy_endpoint_name: rule.rule,
      policy_endpoint_uid: String(rule.handle),
      policy_endpoint_resource_version: String(rule.handle),
    })),
  };
}
