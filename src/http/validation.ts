// Request validation: bodies are checked strictly (no type coercion, no silently removed
// fields, no injected defaults); query strings and path parameters are coerced from text.
import AjvModule, { type ErrorObject } from "ajv";
import formatsModule from "ajv-formats";

// ajv and ajv-formats are CommonJS; under NodeNext their default export is the module object.
const Ajv = AjvModule.default;
const addFormats = formatsModule.default;

function build(coerce: boolean) {
  const ajv = new Ajv({
    allErrors: false,
    coerceTypes: coerce ? "array" : false,
    removeAdditional: false,
    useDefaults: false,
    strict: false,
  });
  addFormats(ajv);
  ajv.addKeyword({ keyword: "x-warren", schemaType: "object" });
  return ajv;
}

const bodyAjv = build(false);
const textAjv = build(true);

// Query and path numbers are decimal digits only: ajv's coercion is JavaScript's `+text`, which
// reads `0x10` as 16, `1e1` as 10, `0o7` as 7 and `" 5"` as 5 (docs/api-decisions.md "Numbers in
// query strings and paths").
const STRICT_INTEGER = /^-?(0|[1-9][0-9]*)$/;
const STRICT_NUMBER = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/;

/** The property names of a query or path schema whose values are numbers, and their pattern. */
function numericFields(schema: object): [string, RegExp][] {
  const properties = (schema as { properties?: Record<string, { type?: unknown }> }).properties ?? {};
  const out: [string, RegExp][] = [];
  for (const [name, child] of Object.entries(properties)) {
    if (child.type === "integer") out.push([name, STRICT_INTEGER]);
    else if (child.type === "number") out.push([name, STRICT_NUMBER]);
  }
  return out;
}

type Validate = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null };

export function validatorCompiler({ schema, httpPart }: { schema: object; httpPart?: string }) {
  if (httpPart === "body") return bodyAjv.compile(schema);
  const validate = textAjv.compile(schema);
  const numeric = numericFields(schema);
  if (numeric.length === 0) return validate;
  const strict: Validate = (data) => {
    const values = data as Record<string, unknown> | null;
    for (const [name, pattern] of numeric) {
      const value = values?.[name];
      const texts = Array.isArray(value) ? value : [value];
      for (const text of texts) {
        if (typeof text !== "string" || pattern.test(text)) continue;
        strict.errors = [
          {
            instancePath: `/${name}`,
            schemaPath: `#/properties/${name}/type`,
            keyword: "type",
            params: {},
            message: `must be a decimal ${pattern === STRICT_INTEGER ? "integer" : "number"} (digits only)`,
          },
        ];
        return false;
      }
    }
    const ok = validate(data);
    strict.errors = validate.errors ?? null;
    return ok;
  };
  return strict;
}

/** One readable sentence for the first failure, naming the field as a dotted path. */
export function describeValidationError(part: string, errors: ErrorObject[]): string {
  const error = errors[0];
  if (!error) return `${part} is invalid`;
  const field = `${part}${error.instancePath.replace(/\//g, ".")}`;
  // A union (anyOf) fails once per branch; name every allowed value, or every allowed type.
  const branches = errors.filter(
    (e) => e.instancePath === error.instancePath && /\/anyOf\/\d+\/[^/]+$/.test(e.schemaPath),
  );
  const allowedValues = branches.filter((e) => e.keyword === "const").map((e) => JSON.stringify(e.params.allowedValue));
  if (allowedValues.length > 1) return `${field}: must be one of ${allowedValues.join(", ")}`;
  if (branches.length > 1 && branches.every((e) => e.keyword === "type")) {
    return `${field}: must be ${branches.map((e) => String(e.params.type)).join(" or ")}`;
  }
  switch (error.keyword) {
    case "additionalProperties":
      return `${field}: unknown field "${String(error.params.additionalProperty)}"`;
    case "required":
      return `${field}: missing required field "${String(error.params.missingProperty)}"`;
    case "enum":
      return `${field}: must be one of ${(error.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(", ")}`;
    default:
      return `${field}: ${error.message ?? "is invalid"}`;
  }
}
