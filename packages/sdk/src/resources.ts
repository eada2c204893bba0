// Every contract group other than sandboxes: thin typed calls over the Transport.
import { WarrenError } from "./errors.js";
import { type Int64Input, wireInt64 } from "./numbers.js";
import { pages } from "./pagination.js";
import { type TailOptions, tailRun } from "./tail.js";
import type { CallOptions, Transport } from "./transport.js";
import type { Body, Ok, operations, Query } from "./types.js";
import type { PushOptions, PushResult } from "./volume-push.js";

const seg = encodeURIComponent;
type ListQuery<Op extends keyof operations> = Omit<Query<Op>, "page_token">;

export class Projects {
  constructor(private readonly t: Transport) {}
  create(body: Body<"CreateProject">, o: CallOptions = {}) {
    return this.t.json<Ok<"CreateProject">>("POST", "/v1/projects", { body, ...o }).then((r) => r.project);
  }
  get(id: string, o: CallOptions = {}) {
    return this.t.json<Ok<"GetProject">>("GET", `/v1/projects/${seg(id)}`, o).then((r) => r.project);
  }
  /** `ifMatch`: the project's `version`; a change meanwhile is PreconditionFailedError. */
  update(id: string, body: Body<"UpdateProject">, o: CallOptions & { ifMatch?: string | number } = {}) {
    const headers = o.ifMatch !== undefined ? { "if-match": String(o.ifMatch) } : undefined;
    return this.t
      .json<Ok<"UpdateProject">>("PATCH", `/v1/projects/${seg(id)}`, { body, headers, ...o })
      .then((r) => r.project);
  }
  /** `cascade`: also delete its runs, keys and volumes (otherwise a project holding any is FailedPreconditionError). */
  async delete(id: string, o: CallOptions & { cascade?: boolean } = {}) {
    const { cascade, ...rest } = o;
    await this.t.json("DELETE", `/v1/projects/${seg(id)}`, {
      query: { cascade: cascade ? "true" : undefined },
      ...rest,
    });
  }
  list(query: ListQuery<"ListProjects"> = {}, o: CallOptions = {}) {
    return pages(this.t, "/v1/projects", query, (p: Ok<"ListProjects">) => p.projects, o.signal);
  }
}

export class Runs {
  constructor(private readonly t: Transport) {}
  start(body: Body<"StartRun"> = {}, o: CallOptions = {}) {
    return this.t.json<Ok<"StartRun">>("POST", "/v1/runs", { body, ...o }).then((r) => r.run);
  }
  complete(id: string, status: Body<"CompleteRun">["status"], o: CallOptions = {}) {
    return this.t
      .json<Ok<"CompleteRun">>("POST", `/v1/runs/${seg(id)}:complete`, { body: { status }, ...o })
      .then((r) => r.run);
  }
  get(id: string, o: CallOptions = {}) {
    return this.t.json<Ok<"GetRun">>("GET", `/v1/runs/${seg(id)}`, o).then((r) => r.run);
  }
  list(query: ListQuery<"ListRuns"> = {}, o: CallOptions = {}) {
    return pages(this.t, "/v1/runs", query, (p: Ok<"ListRuns">) => p.runs, o.signal);
  }
  /** The run's events as they become durable; resumes from its last cursor after a dropped connection. */
  tail(runId: string, options: TailOptions = {}) {
    return tailRun(this.t, runId, options);
  }
}

/** A 26-character ULID-shaped event id, so a retried annotate converges on one annotation. */
export function newEventId(now = Date.now()): string {
  const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  let time = "";
  let value = now;
  for (let i = 0; i < 10; i++) {
    time = alphabet[value % 32] + time;
    value = Math.floor(value / 32);
  }
  const random = [...globalThis.crypto.getRandomValues(new Uint8Array(16))].map((byte) => alphabet[byte % 32]).join("");
  return time + random;
}

export class Annotations {
  constructor(private readonly t: Transport) {}
  /** Writes one annotation; `payload` is serialized to payload_json; an event_id is minted when none is given. */
  async annotate(
    input: Omit<Body<"Annotate">, "payload_json"> & { payload: unknown } & Partial<
        Pick<Body<"Annotate">, "payload_json">
      >,
    o: CallOptions = {},
  ) {
    const { payload, ...rest } = input;
    const body = { ...rest, payload_json: JSON.stringify(payload), event_id: rest.event_id ?? newEventId() };
    return this.t.json<Ok<"Annotate">>("POST", "/v1/annotations", { body, ...o });
  }
  annotateRange(body: Body<"AnnotateRange">, o: CallOptions = {}) {
    return this.t.json<Ok<"AnnotateRange">>("POST", "/v1/annotations:range", {
      body: { ...body, event_id: body.event_id ?? newEventId() },
      ...o,
    });
  }
  list(query: ListQuery<"ListAnnotations"> = {}, o: CallOptions = {}) {
    return pages(this.t, "/v1/annotations", query, (p: Ok<"ListAnnotations">) => p.annotations, o.signal);
  }
}

export class Schemas {
  constructor(private readonly t: Transport) {}
  register(body: Body<"RegisterAnnotationSchema">, o: CallOptions = {}) {
    return this.t
      .json<Ok<"RegisterAnnotationSchema">>("POST", "/v1/annotation-schemas", { body, ...o })
      .then((r) => r.schema);
  }
  get(name: string, version?: number, o: CallOptions = {}) {
    return this.t
      .json<Ok<"GetAnnotationSchema">>("GET", `/v1/annotation-schemas/${seg(name)}`, { query: { version }, ...o })
      .then((r) => r.schema);
  }
  list(query: Query<"ListAnnotationSchemas"> = {}, o: CallOptions = {}) {
    return this.t
      .json<Ok<"ListAnnotationSchemas">>("GET", "/v1/annotation-schemas", { query: query as never, ...o })
      .then((r) => r.schemas);
  }
  /** Archives `version` (0 or omitted: the latest live one). */
  archive(name: string, version?: Int64Input, o: CallOptions = {}) {
    return this.t
      .json<Ok<"ArchiveAnnotationSchema">>("POST", `/v1/annotation-schemas/${seg(name)}:archive`, {
        body: version !== undefined ? { version: wireInt64(version) } : {},
        ...o,
      })
      .then((r) => r.schema);
  }
}

export class DataViews {
  constructor(private readonly t: Transport) {}
  put(name: string, body: Body<"PutDataView">, o: CallOptions = {}) {
    return this.t.json<Ok<"PutDataView">>("PUT", `/v1/data-views/${seg(name)}`, { body, ...o }).then((r) => r.view);
  }
  list(o: CallOptions = {}) {
    return this.t.json<Ok<"ListDataViews">>("GET", "/v1/data-views", o).then((r) => r.views);
  }
  run(name: string, body: Body<"RunDataView"> = {}, o: CallOptions = {}) {
    return this.t.json<Ok<"RunDataView">>("POST", `/v1/data-views/${seg(name)}:run`, { body, ...o });
  }
  async delete(name: string, o: CallOptions = {}) {
    await this.t.json("DELETE", `/v1/data-views/${seg(name)}`, o);
  }
}

export interface VolumePushOptions {
  onProgress?: PushOptions["onProgress"];
  concurrency?: number;
  /** Reuse digests of unchanged files from earlier pushes (default true, as the CLI). */
  hashCache?: boolean | string;
  signal?: AbortSignal;
}

/** Pushes a local directory as a volume's version (Node's entry point: volume-push.ts). */
export type VolumePusher = (
  t: Transport,
  volumeId: string,
  dir: string,
  options: VolumePushOptions,
) => Promise<PushResult>;

export class Volumes {
  constructor(private readonly t: Transport) {}
  /** `quota_bytes`: a number (a safe integer), a bigint or a decimal string; sent as a decimal string. */
  create(input: Omit<Body<"CreateVolume">, "quota_bytes"> & { quota_bytes: Int64Input }, o: CallOptions = {}) {
    const body: Body<"CreateVolume"> = { ...input, quota_bytes: wireInt64(input.quota_bytes) };
    return this.t.json<Ok<"CreateVolume">>("POST", "/v1/volumes", { body, ...o }).then((r) => r.volume);
  }
  get(id: string, o: CallOptions = {}) {
    return this.t.json<Ok<"GetVolume">>("GET", `/v1/volumes/${seg(id)}`, o).then((r) => r.volume);
  }
  list(query: ListQuery<"ListVolumes"> = {}, o: CallOptions = {}) {
    return pages(this.t, "/v1/volumes", query, (p: Ok<"ListVolumes">) => p.volumes, o.signal);
  }
  async delete(id: string, o: CallOptions = {}) {
    await this.t.json("DELETE", `/v1/volumes/${seg(id)}`, o);
  }
  /** Pushes directory `dir` as the volume's new version: only blobs the organization lacks are uploaded. */
  push(volumeId: string, dir: string, options: VolumePushOptions = {}): Promise<PushResult> {
    const push = this.t.pushVolume;
    if (!push) return Promise.reject(new WarrenError("volumes.push reads a directory: it needs Node's entry point"));
    return push(this.t, volumeId, dir, options);
  }
}

export class Secrets {
  constructor(private readonly t: Transport) {}
  /** The value is write-only: no answer ever carries it. */
  create(body: Body<"CreateSandboxSecret">, o: CallOptions = {}) {
    return this.t.json<Ok<"CreateSandboxSecret">>("POST", "/v1/secrets", { body, ...o }).then((r) => r.secret);
  }
  list(query: ListQuery<"ListSandboxSecrets"> = {}, o: CallOptions = {}) {
    return pages(this.t, "/v1/secrets", query, (p: Ok<"ListSandboxSecrets">) => p.secrets, o.signal);
  }
  grant(id: string, body: Omit<Body<"GrantSandboxSecret">, "id">, o: CallOptions = {}) {
    return this.t
      .json<Ok<"GrantSandboxSecret">>("POST", `/v1/secrets/${seg(id)}/grants`, { body, ...o })
      .then((r) => r.grant);
  }
  grants(id: string, o: CallOptions = {}) {
    return this.t.json<Ok<"ListSandboxSecretGrants">>("GET", `/v1/secrets/${seg(id)}/grants`, o);
  }
  async ungrant(id: string, subjectKind: string, subjectId: string, o: CallOptions = {}) {
    await this.t.json("DELETE", `/v1/secrets/${seg(id)}/grants/${seg(subjectKind)}/${seg(subjectId)}`, o);
  }
  /** Not retried after a connection failure: the server cannot tell a retried rotation from a second one. */
  rotate(id: string, value: string, o: CallOptions = {}) {
    return this.t
      .json<Ok<"RotateSandboxSecret">>("POST", `/v1/secrets/${seg(id)}:rotate`, {
        body: { value },
        retryOnConnectionError: false,
        ...o,
      })
      .then((r) => r.secret);
  }
  revoke(id: string, o: CallOptions = {}) {
    return this.t
      .json<Ok<"RevokeSandboxSecret">>("POST", `/v1/secrets/${seg(id)}:revoke`, { body: {}, ...o })
      .then((r) => r.secret);
  }
}

export class Workloads {
  constructor(private readonly t: Transport) {}
  create(body: Body<"CreateWorkload">, o: CallOptions = {}) {
    return this.t.json<Ok<"CreateWorkload">>("POST", "/v1/workloads", { body, ...o }).then((r) => r.workload);
  }
  get(name: string, o: CallOptions = {}) {
    return this.t.json<Ok<"GetWorkload">>("GET", `/v1/workloads/${seg(name)}`, o).then((r) => r.workload);
  }
  list(query: ListQuery<"ListWorkloads"> = {}, o: CallOptions = {}) {
    return pages(this.t, "/v1/workloads", query, (p: Ok<"ListWorkloads">) => p.workloads, o.signal);
  }
  async delete(name: string, o: CallOptions = {}) {
    await this.t.json("DELETE", `/v1/workloads/${seg(name)}`, o);
  }
  setLaunchAcl(name: string, acl: Body<"SetWorkloadLaunchAcl">["acl"], o: CallOptions = {}) {
    return this.t
      .json<Ok<"SetWorkloadLaunchAcl">>("PUT", `/v1/workloads/${seg(name)}/launch-acl`, { body: { acl }, ...o })
      .then((r) => r.workload);
  }
  addFederation(name: string, body: Omit<Body<"AddWorkloadFederation">, "name">, o: CallOptions = {}) {
    return this.t
      .json<Ok<"AddWorkloadFederation">>("POST", `/v1/workloads/${seg(name)}/federation`, { body, ...o })
      .then((r) => r.federation_config);
  }
  listFederation(name: string, o: CallOptions = {}) {
    return this.t.json<Ok<"ListWorkloadFederation">>("GET", `/v1/workloads/${seg(name)}/federation`, o);
  }
  async removeFederation(name: string, federationId: string, o: CallOptions = {}) {
    await this.t.json("DELETE", `/v1/workloads/${seg(name)}/federation/${seg(federationId)}`, o);
  }
}
