// Request values generated from the served OpenAPI document's schemas, for the fuzz test and
// the security matrix.
type Json = Record<string, unknown>;

/** A value the schema would plausibly accept: the first enum member, the minimum, one item, every property. */
export function sample(schema: Json): unknown {
  const branches = (schema.anyOf ?? schema.oneOf) as Json[] | undefined;
  if (branches?.[0]) return sample(branches[0]);
  if (schema.const !== undefined) return schema.const;
  if (Array.isArray(schema.enum)) return schema.enum[0];
  switch (schema.type) {
    case "string":
      if (schema.format === "date-time") return "2099-01-01T00:00:00.000Z";
      if (typeof schema.pattern === "string" && schema.pattern.startsWith("^[0-9]")) return "1";
      return "x".repeat(Math.max(1, Number(schema.minLength ?? 1)));
    case "integer":
    case "number":
      return Number(schema.minimum ?? 1);
    case "boolean":
      return true;
    case "array":
      return [sample((schema.items as Json) ?? {})];
    case "object": {
      const out: Json = {};
      for (const [key, child] of Object.entries((schema.properties as Record<string, Json>) ?? {}))
        out[key] = sample(child);
      const patterns = schema.patternProperties as Record<string, Json> | undefined;
      if (patterns && Object.keys(out).length === 0) {
        const first = Object.values(patterns)[0];
        if (first) out.k = sample(first);
      }
      return out;
    }
    default:
      return "x";
  }
}

/**
 * The document with every `#/components/schemas/...` reference replaced by a copy of its
 * schema (the document names its shapes; the samplers read them whole). Siblings of a
 * reference (a description) are kept.
 */
export function inlineRefs<T>(doc: T): T {
  const schemas = ((doc as Json).components as { schemas?: Record<string, unknown> } | undefined)?.schemas ?? {};
  const inline = (node: unknown, seen: string[]): unknown => {
    if (Array.isArray(node)) return node.map((item) => inline(item, seen));
    if (typeof node !== "object" || node === null) return node;
    const { $ref, ...rest } = node as Json;
    const out: Json = {};
    if (typeof $ref === "string" && $ref.startsWith("#/components/schemas/")) {
      const name = $ref.slice("#/components/schemas/".length);
      if (seen.includes(name)) throw new Error(`schema ${name} refers to itself`);
      Object.assign(out, inline(schemas[name], [...seen, name]));
    } else if ($ref !== undefined) {
      out.$ref = $ref;
    }
    for (const [key, value] of Object.entries(rest)) out[key] = inline(value, seen);
    return out;
  };
  return inline(doc, []) as T;
}
