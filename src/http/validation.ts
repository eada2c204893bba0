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

export function validatorCompiler({ schema, httpPart }: { schema: object; httpPart?: string }) {
  const ajv = httpPart === "body" ? bodyAjv : textAjv;
  return ajv.compile(schema);
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
