// What both entry points of @warren/sdk export (index.ts for Node, browser.ts for a
// browser bundle): the client, one property per contract group, and its types. Nothing here
// imports a Node module; what only Node can do (the `ws` socket, volume push) is handed in
// by index.ts through TransportOptions.
import { Annotations, DataViews, Projects, Runs, Schemas, Secrets, Volumes, Workloads } from "./resources.js";
import { Sandboxes, Snapshots } from "./sandboxes.js";
import { type CallOptions, Transport, type TransportOptions } from "./transport.js";
import type { Body, Ok } from "./types.js";

export * from "./errors.js";
export type { StreamSocket, StreamSocketEvents, StreamSocketOpener } from "./exec-stream.js";
export { ExecStream, type ExecStreamOptions, type ExecStreamResult } from "./exec-stream.js";
export {
  type Download,
  type FileEntry,
  type FileEvent,
  type FileInfo,
  SandboxFiles,
  type TransferProgress,
  type UploadOptions,
  type UploadSource,
} from "./files.js";
export { type Int64Input, int64, wireInt64 } from "./numbers.js";
export { toArray } from "./pagination.js";
export {
  type OutputOptions,
  Process,
  type ProcessOutput,
  type ProcessRecord,
  type ProcessSignal,
  SandboxProcesses,
  type StartProcessOptions,
} from "./processes.js";
export { newEventId } from "./resources.js";
export {
  type CreateOptions,
  type ExecOptions,
  type ExecResult,
  execResult,
  Sandbox,
  type SnapshotOptions,
  type WaitOptions,
} from "./sandboxes.js";
export { parseSse, type TailEvent, type TailOptions } from "./tail.js";
export type { CallOptions } from "./transport.js";
export type * from "./types.js";
export type { PushProgress, PushResult } from "./volume-push.js";

export const DEFAULT_BASE_URL = "http://127.0.0.1:8080";

export interface WarrenOptions extends Partial<Omit<TransportOptions, "baseUrl" | "apiKey">> {
  /** Default: WARREN_API_KEY. */
  apiKey?: string;
  /** Default: WARREN_API_URL, else http://127.0.0.1:8080. */
  baseUrl?: string;
}

/** The environment's variable `name`, where there is one (Node; not a browser). */
function environment(name: string): string | undefined {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  return env?.[name];
}

/** The client; each entry point exports it as `Warren` with its platform's socket and push. */
export class WarrenClient {
  readonly sandboxes: Sandboxes;
  readonly snapshots: Snapshots;
  readonly projects: Projects;
  readonly runs: Runs;
  readonly annotations: Annotations;
  readonly schemas: Schemas;
  readonly views: DataViews;
  readonly volumes: Volumes;
  readonly secrets: Secrets;
  readonly workloads: Workloads;
  readonly transport: Transport;

  constructor(options: WarrenOptions = {}) {
    const apiKey = options.apiKey ?? environment("WARREN_API_KEY") ?? "";
    const baseUrl = options.baseUrl ?? environment("WARREN_API_URL") ?? DEFAULT_BASE_URL;
    this.transport = new Transport({ ...options, apiKey, baseUrl });
    const t = this.transport;
    this.sandboxes = new Sandboxes(t);
    this.snapshots = new Snapshots(t);
    this.projects = new Projects(t);
    this.runs = new Runs(t);
    this.annotations = new Annotations(t);
    this.schemas = new Schemas(t);
    this.views = new DataViews(t);
    this.volumes = new Volumes(t);
    this.secrets = new Secrets(t);
    this.workloads = new Workloads(t);
  }

  whoami(o: CallOptions = {}): Promise<Ok<"WhoAmI">> {
    return this.transport.json("GET", "/v1/whoami", o);
  }

  usage(o: CallOptions = {}): Promise<Ok<"GetUsageSnapshot">["snapshot"]> {
    return this.transport.json<Ok<"GetUsageSnapshot">>("GET", "/v1/usage", o).then((r) => r.snapshot);
  }

  serviceConfig(o: CallOptions = {}): Promise<Ok<"GetServiceConfig">> {
    return this.transport.json("GET", "/v1/service-config", o);
  }

  feedback(body: Body<"CreateFeedback">, o: CallOptions = {}): Promise<Ok<"CreateFeedback">> {
    return this.transport.json("POST", "/v1/feedback", { body, ...o });
  }

  /** Telemetry SQL (docs/telemetry-sql.md): one read-only SELECT over the organization's telemetry. */
  sql(sql: string, options: CallOptions & { limit?: number } = {}): Promise<Ok<"RunTelemetrySql">> {
    const { limit, ...o } = options;
    return this.transport.json("POST", "/v1/telemetry/sql", { body: { sql, ...(limit ? { limit } : {}) }, ...o });
  }
}
