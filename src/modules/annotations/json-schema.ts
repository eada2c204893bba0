// Draft 2020-12 JSON Schema handling for annotation schemas: meta-schema validation at
// registration and compiled validators (cached per registered version) at ingest.
import Ajv2020Module, { type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import formatsModule from "ajv-formats";
import { AppError } from "../../lib/errors.js";
import { findTextProblem } from "../../lib/text.js";

// ajv is CommonJS; under NodeNext the default export is the module object.
const Ajv2020 = Ajv2020Module.default;
const addFormats = formatsModule.default;

const DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema";

function newAjv() {
  // ownProperties: a payload's keys are its own; otherwise a declared property named like one of
  // Object.prototype's (`constructor`, `toString`) is "present" in every payload that omits it.
  const ajv = new Ajv2020({
    allErrors: true,
    strict: false,
    validateSchema: true,
    useDefaults: false,
    ownProperties: true,
  });
  addFormats(ajv);
  return ajv;
}

// One instance for meta-validation; validators are compiled without registering ids so two
// organizations' schemas can never collide in ajv's registry.
const metaAjv = newAjv();

/** Parses and checks a registration's json_schema string; returns the parsed document. */
export function parseSchemaDocument(
  text: string,
  remoteRefs: (schema: unknown) => string[],
): Record<string, unknown> | boolean {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (error) {
    throw new AppError("invalid_argument", `json_schema is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof doc !== "boolean" && (doc === null || typeof doc !== "object" || Array.isArray(doc))) {
    throw new AppError("invalid_argument", "json_schema must be a JSON Schema object (or boolean)");
  }
  // Before any walk over the document: the checks below recurse, and jsonb refuses NUL and lone surrogates.
  const problem = findTextProblem(doc, "body.json_schema");
  if (problem) throw new AppError("invalid_argument", `${problem.path}: ${problem.problem}`);
  if (typeof doc === "object" && doc !== null) {
    const declared = (doc as Record<string, unknown>).$schema;
    if (declared !== undefined && declared !== DRAFT_2020_12 && declared !== `${DRAFT_2020_12}#`) {
      throw new AppError("invalid_argument", `json_schema must be draft 2020-12 ($schema ${DRAFT_2020_12})`);
    }
  }
  const remote = remoteRefs(doc);
  if (remote.length > 0) {
    throw new AppError("invalid_argument", `json_schema may only use local $refs; remote: ${remote.join(", ")}`);
  }
  if (!metaAjv.validateSchema(doc as object)) {
    throw new AppError(
      "invalid_argument",
      `json_schema is not a valid draft 2020-12 schema: ${describe(metaAjv.errors ?? [])}`,
    );
  }
  try {
    compileUncached(doc as Record<string, unknown>);
  } catch (error) {
    throw new AppError("invalid_argument", `json_schema cannot be compiled: ${(error as Error).message}`);
  }
  return doc as Record<string, unknown> | boolean;
}

function compileUncached(doc: Record<string, unknown> | boolean): ValidateFunction {
  const ajv = newAjv();
  const copy = typeof doc === "boolean" ? doc : { ...doc };
  if (typeof copy === "object") delete copy.$id;
  return ajv.compile(copy as object);
}

const compiled = new Map<string, ValidateFunction>();
const MAX_CACHED = 2000;

/** The validator of one registered schema version (keyed by its immutable id). */
export function validatorFor(schemaId: string, text: string): ValidateFunction {
  let validate = compiled.get(schemaId);
  if (!validate) {
    if (compiled.size >= MAX_CACHED) compiled.clear();
    validate = compileUncached(JSON.parse(text) as Record<string, unknown>);
    compiled.set(schemaId, validate);
  }
  return validate;
}

/** "path: message" for each failure, e.g. "/score: must be <= 1". */
export function describe(errors: ErrorObject[]): string {
  return errors
    .slice(0, 20)
    .map((error) => {
      const where = error.instancePath || "/";
      if (error.keyword === "additionalProperties") {
        return `${where}: unknown property "${String(error.params.additionalProperty)}"`;
      }
      if (error.keyword === "required")
        return `${where}: missing required property "${String(error.params.missingProperty)}"`;
      return `${where}: ${error.message ?? "is invalid"}`;
    })
    .join("; ");
}
