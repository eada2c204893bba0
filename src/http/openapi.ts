// The OpenAPI document's names: `named()` marks a wire schema as a component (its `title` is
// the name), and `finishDocument` hoists every marked schema into `components.schemas`,
// referenced with `$ref`, and names each operation's JSON bodies `<OperationId>Request` and
// `<OperationId>Response`. Validation and serialization see the schemas unchanged (a title
// is an annotation); only the document is rewritten. docs/api-decisions.md "The OpenAPI document".
import type { TSchema } from "@sinclair/typebox";

const NAME_PATTERN = /^[A-Z][A-Za-z0-9]*$/;
const registered = new Set<string>();

/**
 * `schema` as the component `name` of the OpenAPI document (the same object, titled). A name
 * is given once: two different schemas under one name fail the document's generation.
 */
export function named<T extends TSchema>(name: string, schema: T): T {
  if (!NAME_PATTERN.test(name)) throw new Error(`OpenAPI component name ${JSON.stringify(name)} is not PascalCase`);
  registered.add(name);
  return Object.assign(schema, { title: name });
}

/** The API's groups (the contract's tags, section 1, and this server's own), in the document's order. */
export const API_TAGS: { name: string; description: string }[] = [
  {
    name: "SandboxService",
    description: "Sandboxes: create, get, list, update, exec (also streamed), files, delete; snapshots; session tokens",
  },
  { name: "VolumeService", description: "Volumes and their immutable versions, with content-addressed chunked upload" },
  { name: "SecretService", description: "Write-only sandbox secrets, their grants, rotation and revocation" },
  { name: "WorkloadService", description: "Workload identities, launch ACLs and cloud federation registrations" },
  { name: "ProjectService", description: "Projects: the scope of runs, volumes and sandboxes" },
  { name: "RunService", description: "Runs and their lineage" },
  { name: "AnnotationService", description: "Annotation writes and the annotation read" },
  { name: "AnnotationSchemaService", description: "The versioned registry of annotation schemas" },
  { name: "TelemetryViewService", description: "Saved data views, the telemetry SQL gateway and the run tail" },
  { name: "UsageService", description: "Product quota reads" },
  { name: "IdentityService", description: "Who am I: the caller's organization and principal" },
  { name: "MetaService", description: "Unauthenticated discovery of the client-visible service URLs" },
  { name: "FeedbackService", description: "Product-feedback intake" },
  {
    name: "AdminService",
    description: "Operator routes: organizations, API keys, quotas, egress allowlists, hosts, metrics",
  },
];

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const isObject = (value: unknown): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** JSON text with sorted keys: two schemas are one component only when these are equal. */
function canonical(value: Json): string {
  return JSON.stringify(value, (_key, v: Json) =>
    isObject(v)
      ? Object.fromEntries(
          Object.keys(v)
            .sort()
            .map((k) => [k, v[k] as Json]),
        )
      : v,
  );
}

class Components {
  readonly schemas: Record<string, JsonObject>;
  private readonly texts = new Map<string, string>();

  constructor(existing: Record<string, JsonObject>) {
    this.schemas = existing;
    for (const [name, schema] of Object.entries(existing)) this.texts.set(name, canonical(schema));
  }

  /** `schema` as component `name`: a reference to it. */
  add(name: string, schema: JsonObject): JsonObject {
    const text = canonical(schema);
    const known = this.texts.get(name);
    if (known !== undefined && known !== text) {
      throw new Error(`OpenAPI component ${name} is given two different schemas: name one of them otherwise`);
    }
    if (known === undefined) {
      this.texts.set(name, text);
      this.schemas[name] = schema;
    }
    return { $ref: `#/components/schemas/${name}` };
  }

  /** `node` with each marked schema inside it (and itself) replaced by a reference. */
  hoist(node: Json): Json {
    if (Array.isArray(node)) return node.map((item) => this.hoist(item));
    if (!isObject(node)) return node;
    const out: JsonObject = {};
    for (const [key, value] of Object.entries(node)) out[key] = this.hoist(value);
    const title = out.title;
    const isSchema = out.type !== undefined || out.anyOf !== undefined || out.oneOf !== undefined;
    return typeof title === "string" && registered.has(title) && isSchema ? this.add(title, out) : out;
  }

  /** A body's schema: a reference already, else named `name` unless it is a plain scalar or empty. */
  nameBody(schema: Json | undefined, name: string): Json | undefined {
    if (!isObject(schema) || typeof schema.$ref === "string") return schema;
    const isShape = schema.type === "object" || schema.anyOf !== undefined || schema.oneOf !== undefined;
    if (!isShape) return schema;
    return this.add(name, { ...schema, title: name });
  }
}

const METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];

/**
 * The document as served and committed: the contract's `{id}:verb` paths, marked schemas as
 * components, bodies named after their operation.
 */
export function finishDocument<D extends object>(doc: D): D {
  const d = doc as unknown as JsonObject;
  const paths = isObject(d.paths) ? d.paths : {};
  // Custom verbs are written `:verb` in fastify paths (escaped as `::`); the generator reads
  // them as parameters, so they are put back to the contract's `{id}:verb` form.
  const renamed: JsonObject = {};
  for (const [route, item] of Object.entries(paths)) renamed[route.replace(/\}:\{([a-z]+)\}$/i, "}:$1")] = item;
  const components = isObject(d.components) ? d.components : {};
  const schemas = new Components(
    (isObject(components.schemas) ? components.schemas : {}) as Record<string, JsonObject>,
  );
  const finished = schemas.hoist(renamed) as JsonObject;
  for (const item of Object.values(finished)) {
    if (!isObject(item)) continue;
    for (const method of METHODS) {
      const op = item[method];
      if (!isObject(op) || typeof op.operationId !== "string") continue;
      const body = isObject(op.requestBody) && isObject(op.requestBody.content) ? op.requestBody.content : null;
      const json = body && isObject(body["application/json"]) ? body["application/json"] : null;
      if (json) json.schema = schemas.nameBody(json.schema, `${op.operationId}Request`) ?? null;
      const responses = isObject(op.responses) ? op.responses : {};
      for (const [status, response] of Object.entries(responses)) {
        if (!/^2\d\d$/.test(status) || !isObject(response) || !isObject(response.content)) continue;
        const answer = response.content["application/json"];
        if (isObject(answer)) answer.schema = schemas.nameBody(answer.schema, `${op.operationId}Response`) ?? null;
      }
    }
  }
  d.paths = finished;
  d.components = {
    ...components,
    schemas: Object.fromEntries(Object.entries(schemas.schemas).sort(([a], [b]) => (a < b ? -1 : 1))),
  };
  return doc;
}
