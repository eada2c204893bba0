// Property test of the compatibility checker against a real validator (ajv, draft 2020-12):
// whenever the checker accepts a new version, every payload the old version accepts must pass it.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import AjvModule from "ajv/dist/2020.js";
import { COMPATIBILITY_RULES, checkBackwardCompatible } from "./compat.js";

// ajv is CommonJS; under NodeNext its default export is the module object.
const Ajv2020 = AjvModule.default;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };

const SEED = 0x5eed_2020;
const PAIRS = 500;
const CANDIDATES_PER_PAIR = 40;

// ---------------------------------------------------------------------------------------------
// Seeded randomness (mulberry32), so a failure names a reproducible case.

type Rng = () => number;

function mulberry32(seed: number): Rng {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const int = (rng: Rng, lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo + 1));
const chance = (rng: Rng, p: number) => rng() < p;
function pick<T>(rng: Rng, items: readonly T[]): T {
  return items[Math.floor(rng() * items.length)] as T;
}
function subset<T>(rng: Rng, items: readonly T[], p = 0.5): T[] {
  return items.filter(() => chance(rng, p));
}

const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const clone = <T>(v: T): T => structuredClone(v);

// ---------------------------------------------------------------------------------------------
// Random schemas from a small grammar covering the keywords the checker reasons about.

const VALUE_POOL: readonly Json[] = [
  0,
  1,
  2,
  3,
  7,
  -1,
  2.5,
  "a",
  "b",
  "ab",
  "abc",
  "x",
  "",
  null,
  true,
  false,
  [1, 2],
  [],
  { a: 1 },
  {},
];
const PATTERNS = ["^a", "b$", "^[a-c]*$", "x", "^.{0,2}$"];
const NAMES = ["a", "b", "c", "d", "x1", "x2"];
const LEAF_TYPES = ["string", "integer", "number", "boolean", "null"];

interface Gen {
  rng: Rng;
  defs: Obj;
  /** Mutations name their new $defs apart from the old ones, so no $ref is captured by accident. */
  prefix: string;
}

function genSchema(g: Gen, depth: number): Json {
  const { rng } = g;
  const kind =
    depth <= 0
      ? pick(rng, ["leaf", "leaf", "leaf", "enum", "const", "any"])
      : pick(rng, [
          ...["leaf", "leaf", "enum", "object", "object", "array", "anyOf", "oneOf", "allOf", "ref", "not", "any"],
          ...["tree", "union"],
        ]);
  switch (kind) {
    case "enum":
      return { enum: uniqueValues(rng, int(rng, 1, 4)) };
    case "const":
      return { const: pick(rng, VALUE_POOL) };
    case "any":
      return pick<Json>(rng, [true, {}, { type: ["string", "integer"] }, { type: ["number", "null"] }]);
    case "object":
      return genObject(g, depth);
    case "array":
      return genArray(g, depth);
    case "anyOf":
    case "oneOf":
      return { [kind]: Array.from({ length: int(rng, 1, 3) }, () => genSchema(g, depth - 1)) };
    case "allOf":
      return { allOf: [genSchema(g, depth - 1), genLeaf(rng)] };
    case "ref": {
      const name = `${g.prefix}${Object.keys(g.defs).length}`;
      g.defs[name] = true; // reserve the name before nested definitions take the next ones
      g.defs[name] = genSchema(g, depth - 1);
      return { $ref: `#/$defs/${name}` };
    }
    case "union": {
      // Objects told apart by a required discriminator, the usual shape of a oneOf.
      const kinds = subset(rng, ["a", "b", "c"], 0.7);
      const branch = (kind: string): Json => {
        const object = genObject(g, depth - 1) as Obj;
        const properties = { ...(isObj(object.properties) ? object.properties : {}), kind: { const: kind } };
        const required = [...(Array.isArray(object.required) ? object.required : []), "kind"];
        return { ...object, properties, required };
      };
      return { oneOf: (kinds.length > 0 ? kinds : ["a"]).map(branch) };
    }
    case "tree": {
      // A recursive definition: the checker must follow the cycle through the payload's nesting.
      const name = `${g.prefix}${Object.keys(g.defs).length}`;
      const kids = { type: "array", items: { $ref: `#/$defs/${name}` } };
      g.defs[name] = { type: "object", properties: { v: genLeaf(rng), kids } };
      if (chance(rng, 0.5)) (g.defs[name] as Obj).additionalProperties = false;
      return { $ref: `#/$defs/${name}` };
    }
    case "not":
      return { ...(genLeaf(rng) as Obj), not: genLeaf(rng) };
    default:
      return genLeaf(rng);
  }
}

function uniqueValues(rng: Rng, count: number): Json[] {
  const out: Json[] = [];
  for (let i = 0; i < count; i += 1) {
    const v = pick(rng, VALUE_POOL);
    if (!out.includes(v)) out.push(v);
  }
  return out;
}

function genLeaf(rng: Rng): Json {
  const type = pick(rng, LEAF_TYPES);
  const s: Obj = { type };
  if (type === "integer" || type === "number") {
    if (chance(rng, 0.4)) s.minimum = int(rng, -3, 3);
    if (chance(rng, 0.4)) s.maximum = int(rng, 2, 9);
    if (chance(rng, 0.15)) s.exclusiveMinimum = int(rng, -3, 3) - (type === "number" ? 0.5 : 0);
    if (chance(rng, 0.15)) s.exclusiveMaximum = int(rng, 3, 9);
    if (chance(rng, 0.2)) s.multipleOf = pick(rng, [1, 2, 3, 0.5]);
  }
  if (type === "string") {
    if (chance(rng, 0.3)) s.minLength = int(rng, 0, 2);
    if (chance(rng, 0.3)) s.maxLength = int(rng, 1, 4);
    if (chance(rng, 0.3)) s.pattern = pick(rng, PATTERNS);
  }
  return s;
}

function genObject(g: Gen, depth: number): Json {
  const { rng } = g;
  const s: Obj = chance(rng, 0.9) ? { type: "object" } : {};
  const names = subset(rng, NAMES.slice(0, 5), 0.45);
  if (names.length > 0 || chance(rng, 0.5)) {
    s.properties = Object.fromEntries(names.map((name) => [name, genSchema(g, depth - 1)]));
  }
  const required = subset(rng, names, 0.4);
  if (required.length > 0) s.required = required;
  const additional = rng();
  if (additional < 0.3) s.additionalProperties = false;
  else if (additional < 0.4) s.additionalProperties = true;
  else if (additional < 0.6) s.additionalProperties = genLeaf(rng);
  if (chance(rng, 0.2)) s.patternProperties = { "^x": genSchema(g, depth - 1) };
  if (chance(rng, 0.15)) s.minProperties = int(rng, 0, 2);
  if (chance(rng, 0.15)) s.maxProperties = int(rng, 1, 4);
  // Keywords the checker only accepts unchanged.
  if (chance(rng, 0.08)) s.propertyNames = { maxLength: 1 };
  if (chance(rng, 0.08)) s.dependentRequired = { a: ["b"] };
  return s;
}

function genArray(g: Gen, depth: number): Json {
  const { rng } = g;
  const s: Obj = { type: "array" };
  if (chance(rng, 0.3)) s.prefixItems = Array.from({ length: int(rng, 1, 2) }, () => genSchema(g, depth - 1));
  if (chance(rng, 0.75)) s.items = chance(rng, 0.15) ? false : genSchema(g, depth - 1);
  if (chance(rng, 0.25)) s.minItems = int(rng, 0, 2);
  if (chance(rng, 0.25)) s.maxItems = int(rng, 1, 4);
  if (chance(rng, 0.2)) s.uniqueItems = true;
  return s;
}

function genRoot(rng: Rng): Json {
  const g: Gen = { rng, defs: {}, prefix: "d" };
  const schema = genSchema(g, int(rng, 1, 3));
  return withDefs(schema, g.defs);
}

function withDefs(schema: Json, defs: Obj): Json {
  if (Object.keys(defs).length === 0) return schema;
  return isObj(schema) ? { ...schema, $defs: defs } : { $defs: defs, allOf: [schema] };
}

// ---------------------------------------------------------------------------------------------
// Mutations: each picks one subschema and widens, narrows or rewrites it, so the new versions
// are a mix of compatible and incompatible ones.

interface Slot {
  get: () => Json;
  set: (v: Json) => void;
}

function slotsOf(root: { schema: Json }): Slot[] {
  const out: Slot[] = [];
  const visit = (container: Obj | Json[], key: string | number) => {
    const get = () => (container as Record<string | number, Json>)[key] as Json;
    out.push({ get, set: (v) => ((container as Record<string | number, Json>)[key] = v) });
    const s = get();
    if (!isObj(s)) return;
    for (const k of ["additionalProperties", "items", "not"]) if (k in s) visit(s, k);
    for (const k of ["properties", "patternProperties", "$defs"]) {
      const map = s[k];
      if (isObj(map)) for (const name of Object.keys(map)) visit(map, name);
    }
    for (const k of ["prefixItems", "anyOf", "oneOf", "allOf"]) {
      const list = s[k];
      if (Array.isArray(list)) for (const i of list.keys()) visit(list, i);
    }
  };
  visit(root as unknown as Obj, "schema");
  return out;
}

const BOUND_KEYS: Record<string, readonly string[]> = {
  number: ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"],
  string: ["minLength", "maxLength"],
  array: ["minItems", "maxItems"],
  object: ["minProperties", "maxProperties"],
};
const EXCLUSIVE_TWIN: Record<string, string> = {
  minimum: "exclusiveMinimum",
  exclusiveMinimum: "minimum",
  maximum: "exclusiveMaximum",
  exclusiveMaximum: "maximum",
};

type Mutation = (s: Obj, g: Gen) => Json;

function tweakBound(keys: readonly string[]): Mutation {
  return (s, { rng }) => {
    const key = pick(rng, keys);
    if (typeof s[key] === "number" && chance(rng, 0.3)) return withoutKey(s, key);
    const base = typeof s[key] === "number" ? (s[key] as number) : int(rng, 0, 3);
    const value = base + int(rng, -2, 2);
    return { ...s, [key]: keys === BOUND_KEYS.number ? value : Math.max(0, value) };
  };
}

// The same bound, made exclusive or inclusive: the off-by-one edge of every range.
const swapExclusive: Mutation = (s, { rng }) => {
  const present = Object.keys(EXCLUSIVE_TWIN).filter((key) => typeof s[key] === "number");
  if (present.length === 0) return { ...s, exclusiveMinimum: int(rng, -1, 2) };
  const key = pick(rng, present);
  return { ...withoutKey(s, key), [EXCLUSIVE_TWIN[key] as string]: s[key] as Json };
};

const GENERAL_MUTATIONS: readonly Mutation[] = [
  () => true,
  () => ({}),
  () => false,
  (_, g) => genSchema(g, 2),
  (s, { rng }) => {
    if (s.type === "integer") return { ...s, type: "number" };
    if (s.type === "number") return { ...s, type: "integer" };
    if (chance(rng, 0.4)) return withoutKey(s, "type");
    const type = typeof s.type === "string" ? [s.type, pick(rng, LEAF_TYPES)] : pick(rng, [...LEAF_TYPES, "object"]);
    return { ...s, type };
  },
  (s, { rng }) => {
    const values = Array.isArray(s.enum) ? [...s.enum] : uniqueValues(rng, 2);
    if (chance(rng, 0.5)) values.push(pick(rng, VALUE_POOL));
    else if (values.length > 1) values.splice(int(rng, 0, values.length - 1), 1);
    return chance(rng, 0.15) ? withoutKey(s, "enum") : { ...s, enum: [...new Set(values)] };
  },
  (s, { rng }) => (chance(rng, 0.4) ? withoutKey(s, "const") : { ...s, const: pick(rng, VALUE_POOL) }),
  (s, g) => ({ [pick(g.rng, ["anyOf", "oneOf"])]: [s, genSchema(g, 1)] }),
  (s, g) => mutateBranches(s, g),
  (s, g) => (isObj(s.not) || chance(g.rng, 0.3) ? withoutKey(s, "not") : { ...s, not: genLeaf(g.rng) }),
];

const TYPED_MUTATIONS: Record<string, readonly Mutation[]> = {
  number: [
    tweakBound(BOUND_KEYS.number as string[]),
    swapExclusive,
    (s, { rng }) => (chance(rng, 0.3) ? withoutKey(s, "multipleOf") : { ...s, multipleOf: pick(rng, [1, 2, 3, 4, 6]) }),
  ],
  string: [
    tweakBound(BOUND_KEYS.string as string[]),
    (s, { rng }) => (chance(rng, 0.4) ? withoutKey(s, "pattern") : { ...s, pattern: pick(rng, PATTERNS) }),
  ],
  object: [
    tweakBound(BOUND_KEYS.object as string[]),
    (s, g) => {
      const properties = isObj(s.properties) ? { ...s.properties } : {};
      const name = pick(g.rng, NAMES);
      if (name in properties && chance(g.rng, 0.5)) delete properties[name];
      else properties[name] = chance(g.rng, 0.3) ? {} : genSchema(g, 1);
      return { ...s, properties };
    },
    (s, { rng }) => addOrRemoveRequired(s, rng),
    (s, { rng }) => {
      const choice = pick(rng, [true, false, { type: "string" }, { type: "integer" }, { type: "number" }, undefined]);
      return choice === undefined ? withoutKey(s, "additionalProperties") : { ...s, additionalProperties: choice };
    },
    (s, g) => {
      if (isObj(s.patternProperties) && chance(g.rng, 0.4)) return withoutKey(s, "patternProperties");
      const patterns = isObj(s.patternProperties) ? { ...s.patternProperties } : {};
      patterns[pick(g.rng, ["^x", "^a", "1$"])] = genSchema(g, 1);
      return { ...s, patternProperties: patterns };
    },
    (s, { rng }) => {
      const keyword = pick(rng, ["propertyNames", "dependentRequired"]);
      if (keyword in s) return withoutKey(s, keyword);
      const value: Json = keyword === "propertyNames" ? { maxLength: 2 } : { b: ["a"] };
      return { ...s, [keyword]: value };
    },
  ],
  array: [
    tweakBound(BOUND_KEYS.array as string[]),
    (s, g) => (chance(g.rng, 0.3) ? withoutKey(s, "items") : { ...s, items: genSchema(g, 1) }),
    (s, g) => {
      const prefix = Array.isArray(s.prefixItems) ? [...s.prefixItems] : [];
      if (prefix.length > 0 && chance(g.rng, 0.4)) prefix.pop();
      else prefix.push(genSchema(g, 1));
      return { ...s, prefixItems: prefix };
    },
    (s) => (s.uniqueItems === true ? withoutKey(s, "uniqueItems") : { ...s, uniqueItems: true }),
    // No `contains`: ajv 8 accepts [] for { prefixItems: [{ type: "null" }], contains: {...} },
    // so it cannot serve as the oracle there (the table tests cover contains).
  ],
};

// Half the time a mutation that fits the schema's type, so the type-specific rules get exercised.
function pickMutation(s: Obj, rng: Rng): Mutation {
  const type =
    s.type === "integer" ? "number" : typeof s.type === "string" ? s.type : pick(rng, Object.keys(TYPED_MUTATIONS));
  const typed = TYPED_MUTATIONS[type];
  return typed && chance(rng, 0.5) ? pick(rng, typed) : pick(rng, GENERAL_MUTATIONS);
}

function withoutKey(s: Obj, key: string): Obj {
  const { [key]: _removed, ...rest } = s;
  return rest;
}

// Adding a required name sometimes comes with a default, which Confluent's rule accepts.
function addOrRemoveRequired(s: Obj, rng: Rng): Json {
  const required = Array.isArray(s.required) ? [...(s.required as string[])] : [];
  const name = pick(rng, NAMES);
  if (required.includes(name)) return { ...s, required: required.filter((r) => r !== name) };
  const out: Obj = { ...s, required: [...required, name] };
  if (chance(rng, 0.5)) {
    const properties = isObj(s.properties) ? { ...s.properties } : {};
    const current = properties[name];
    properties[name] = { ...(isObj(current) ? current : {}), default: pick(rng, VALUE_POOL) };
    out.properties = properties;
  }
  return out;
}

function mutateBranches(s: Obj, g: Gen): Json {
  const keyword = ["anyOf", "oneOf"].find((k) => Array.isArray(s[k]));
  if (!keyword) return { ...s, anyOf: [genSchema(g, 1), genSchema(g, 1)] };
  const branches = [...(s[keyword] as Json[])];
  const roll = g.rng();
  if (roll < 0.35) branches.push(genSchema(g, 1));
  else if (roll < 0.7 && branches.length > 1) branches.splice(int(g.rng, 0, branches.length - 1), 1);
  else return { ...withoutKey(s, keyword), [keyword === "anyOf" ? "oneOf" : "anyOf"]: branches };
  return { ...s, [keyword]: branches };
}

function mutate(old: Json, rng: Rng): Json {
  const holder = { schema: clone(old) };
  const defs = isObj(holder.schema) && isObj(holder.schema.$defs) ? holder.schema.$defs : undefined;
  const g: Gen = { rng, defs: {}, prefix: "m" };
  for (let i = int(rng, 1, 3); i > 0; i -= 1) {
    const slot = pick(rng, slotsOf(holder));
    const current = slot.get();
    const node = isObj(current) ? current : {};
    slot.set(pickMutation(node, rng)(node, g));
  }
  // Keep every $defs entry (old and newly generated) reachable from the root.
  const merged = {
    ...(defs ?? {}),
    ...(isObj(holder.schema) && isObj(holder.schema.$defs) ? holder.schema.$defs : {}),
  };
  Object.assign(merged, g.defs);
  const schema = isObj(holder.schema) ? withoutKey(holder.schema, "$defs") : holder.schema;
  return withDefs(schema, merged);
}

// ---------------------------------------------------------------------------------------------
// Random payloads aimed at the old schema (then filtered by it), plus arbitrary JSON.

const STRINGS = ["", "a", "ab", "abc", "b", "ba", "cab", "x", "xyz", "aab", "abcdef", "😀a"];
const KEYS = ["a", "b", "c", "d", "x1", "x2", "zz"];

function randomJson(rng: Rng, depth: number): Json {
  const roll = int(rng, 0, depth > 0 ? 7 : 5);
  if (roll === 0) return null;
  if (roll === 1) return chance(rng, 0.5);
  if (roll === 2) return int(rng, -3, 12);
  if (roll === 3) return pick(rng, [1.5, -0.5, 2.5, 0.25]);
  if (roll <= 5) return pick(rng, STRINGS);
  if (roll === 6) return Array.from({ length: int(rng, 0, 3) }, () => randomJson(rng, depth - 1));
  return Object.fromEntries(subset(rng, KEYS, 0.3).map((k) => [k, randomJson(rng, depth - 1)]));
}

function resolve(root: Json, ref: string): Json {
  let current: Json = root;
  for (const token of ref.slice(2).split("/")) current = isObj(current) ? (current[token] as Json) : true;
  return current ?? true;
}

function genValue(schema: Json, root: Json, rng: Rng, depth: number): Json {
  if (!isObj(schema) || depth < 0 || chance(rng, 0.15)) return randomJson(rng, 2);
  if (typeof schema.$ref === "string" && chance(rng, 0.9))
    return genValue(resolve(root, schema.$ref), root, rng, depth);
  for (const k of ["anyOf", "oneOf", "allOf"]) {
    const list = schema[k];
    if (Array.isArray(list) && list.length > 0 && chance(rng, 0.8)) return genValue(pick(rng, list), root, rng, depth);
  }
  if ("const" in schema && chance(rng, 0.9)) return schema.const as Json;
  if (Array.isArray(schema.enum) && schema.enum.length > 0 && chance(rng, 0.9)) return pick(rng, schema.enum);
  const types = typeof schema.type === "string" ? [schema.type] : Array.isArray(schema.type) ? schema.type : undefined;
  const type = types ? pick(rng, types as string[]) : pick(rng, [...LEAF_TYPES, "object", "array"]);
  return genOfType(type, schema, root, rng, depth);
}

function genOfType(type: string, s: Obj, root: Json, rng: Rng, depth: number): Json {
  const num = (k: string, fallback: number) => (typeof s[k] === "number" ? (s[k] as number) : fallback);
  switch (type) {
    case "integer":
    case "number": {
      const lo = Math.ceil(Math.max(num("minimum", -4), num("exclusiveMinimum", -5) + 1));
      const hi = Math.floor(Math.min(num("maximum", 10), num("exclusiveMaximum", 11) - 1));
      const m = typeof s.multipleOf === "number" ? s.multipleOf : 1;
      const base = int(rng, lo, Math.max(lo, hi));
      const value = chance(rng, 0.5) ? Math.round(base / m) * m : base;
      return type === "number" && chance(rng, 0.3) ? value + 0.5 : value;
    }
    case "string":
      return chance(rng, 0.7) ? pick(rng, STRINGS) : "abcx".slice(int(rng, 0, 3), int(rng, 0, 4));
    case "boolean":
      return chance(rng, 0.5);
    case "null":
      return null;
    case "array":
      return genArrayValue(s, root, rng, depth);
    case "object":
      return genObjectValue(s, root, rng, depth);
    default:
      return randomJson(rng, 1);
  }
}

function genArrayValue(s: Obj, root: Json, rng: Rng, depth: number): Json {
  const min = typeof s.minItems === "number" ? s.minItems : 0;
  const max = typeof s.maxItems === "number" ? s.maxItems : min + 3;
  const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : [];
  return Array.from({ length: int(rng, min, Math.max(min, max)) }, (_, i) =>
    genValue(i < prefix.length ? (prefix[i] as Json) : (s.items ?? true), root, rng, depth - 1),
  );
}

function genObjectValue(s: Obj, root: Json, rng: Rng, depth: number): Json {
  const properties = isObj(s.properties) ? s.properties : {};
  const required = Array.isArray(s.required) ? (s.required as string[]) : [];
  const out: Obj = {};
  for (const name of Object.keys(properties)) {
    if (required.includes(name) || chance(rng, 0.6))
      out[name] = genValue(properties[name] as Json, root, rng, depth - 1);
  }
  for (const name of required) if (!(name in out)) out[name] = randomJson(rng, 1);
  // Extra keys exercise open content models, patternProperties and additionalProperties.
  for (const key of subset(rng, KEYS, 0.25)) {
    if (key in out) continue;
    const patterned = isObj(s.patternProperties) && key.startsWith("x") ? s.patternProperties["^x"] : undefined;
    const governed = patterned ?? (isObj(s.additionalProperties) ? s.additionalProperties : undefined);
    out[key] =
      governed !== undefined && chance(rng, 0.7) ? genValue(governed, root, rng, depth - 1) : randomJson(rng, 1);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The oracle.

// The checker follows Confluent in accepting a newly required property that has a default. ajv's
// `useDefaults` would be the wrong oracle for that: inserting defaults changes the instance that
// maxProperties, uniqueItems, oneOf and not then see, even when old and new are identical. The
// rule's meaning is "a missing property with a default counts as present", so the oracle drops
// those names from `required` and validates the payload as it is.
function withoutDefaultedRequired(schema: Json): Json {
  if (Array.isArray(schema)) return schema.map(withoutDefaultedRequired);
  if (!isObj(schema)) return schema;
  const out: Obj = Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, withoutDefaultedRequired(v)]));
  const properties = schema.properties;
  if (Array.isArray(schema.required) && isObj(properties)) {
    out.required = schema.required.filter((name) => {
      const property = properties[name as string];
      return !(isObj(property) && "default" in property);
    });
  }
  return out;
}

const SUBSCHEMA_MAPS = ["properties", "patternProperties", "$defs"];
const SUBSCHEMA_LISTS = ["prefixItems", "anyOf", "oneOf", "allOf"];
const SUBSCHEMAS = ["items", "additionalProperties", "not"]; // not propertyNames: only proved unchanged

/** The same schema with a `$comment` in every subschema: equivalent, but written differently. */
function annotated(schema: Json): Json {
  if (!isObj(schema)) return schema;
  const out: Obj = { ...schema, $comment: "copy" };
  for (const key of SUBSCHEMAS) if (key in schema) out[key] = annotated(schema[key] as Json);
  for (const key of SUBSCHEMA_LISTS) {
    const list = schema[key];
    if (Array.isArray(list)) out[key] = list.map(annotated);
  }
  for (const key of SUBSCHEMA_MAPS) {
    const map = schema[key];
    if (isObj(map)) out[key] = Object.fromEntries(Object.entries(map).map(([k, v]) => [k, annotated(v)]));
  }
  return out;
}

function pointerResolves(root: unknown, pointer: string): boolean {
  if (pointer === "") return true;
  let current = root;
  for (const raw of pointer.slice(1).split("/")) {
    const token = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (typeof current !== "object" || current === null || !Object.hasOwn(current, token)) return false;
    current = (current as Record<string, unknown>)[token];
  }
  return true;
}

// A schema whose $refs loop without consuming the payload overflows ajv's stack; count it as a rejection.
function safely(validate: (v: unknown) => boolean): (v: unknown) => boolean {
  return (v) => {
    try {
      return validate(v);
    } catch {
      return false;
    }
  };
}

interface Stats {
  pairs: number;
  skipped: number;
  compatible: number;
  compatibleWithPayloads: number;
  counterexamples: number;
  payloads: number;
  checkerMs: number;
}

function runProperty(seed: number, pairs: number): Stats {
  const rng = mulberry32(seed);
  // Hundreds of one-off schemas: skip ajv's code optimiser and schema cache, which cost more than they save.
  const ajv = new Ajv2020({ strict: false, validateFormats: false, code: { optimize: false }, addUsedSchema: false });
  const stats: Stats = {
    pairs,
    skipped: 0,
    compatible: 0,
    compatibleWithPayloads: 0,
    counterexamples: 0,
    payloads: 0,
    checkerMs: 0,
  };
  for (let i = 0; i < pairs; i += 1) {
    const oldSchema = genRoot(rng);
    const newSchema = mutate(oldSchema, rng);
    let validateOld: (v: unknown) => boolean;
    let validateNew: (v: unknown) => boolean;
    try {
      validateOld = ajv.compile(clone(oldSchema) as object | boolean);
      validateNew = safely(ajv.compile(withoutDefaultedRequired(newSchema) as object | boolean));
    } catch {
      stats.skipped += 1;
      continue;
    }
    const started = performance.now();
    // An annotated copy differs in every subschema, so this exercises the reasoning rather than the
    // shortcut for unchanged subschemas.
    const reflexive = checkBackwardCompatible(oldSchema, annotated(oldSchema));
    assert.ok(
      reflexive.compatible,
      `pair ${i}: old is not compatible with itself\n${JSON.stringify({ oldSchema, reflexive })}`,
    );

    const result = checkBackwardCompatible(oldSchema, newSchema);
    // Again without the shortcut for unchanged subschemas: both verdicts must be sound.
    const rewritten = checkBackwardCompatible(oldSchema, annotated(newSchema));
    stats.checkerMs += performance.now() - started;
    assert.equal(result.compatible, result.incompatibilities.length === 0);
    for (const found of result.incompatibilities) {
      assert.ok(COMPATIBILITY_RULES.includes(found.rule), `unknown rule ${found.rule}`);
      assert.ok(pointerResolves(newSchema, found.pointer), `pair ${i}: pointer ${found.pointer} not in new schema`);
    }

    const seen = new Set<string>();
    const payloads: Json[] = [];
    for (let c = 0; c < CANDIDATES_PER_PAIR; c += 1) {
      const candidate = genValue(oldSchema, oldSchema, rng, 4);
      const key = JSON.stringify(candidate);
      if (seen.has(key)) continue;
      seen.add(key);
      if (safely(validateOld)(clone(candidate))) payloads.push(candidate);
    }
    stats.payloads += payloads.length;
    const rejected = payloads.find((p) => !validateNew(clone(p)));
    if (rejected !== undefined) stats.counterexamples += 1;
    if (!result.compatible && !rewritten.compatible) continue;
    stats.compatible += 1;
    if (payloads.length > 0) stats.compatibleWithPayloads += 1;
    const claim = result.compatible ? "checker said compatible" : "checker said compatible (rewritten copy)";
    assert.equal(
      rejected,
      undefined,
      `seed ${seed} pair ${i}: ${claim} but the new version rejects an old payload\n${JSON.stringify(
        { oldSchema, newSchema, payload: rejected },
        null,
        1,
      )}`,
    );
  }
  return stats;
}

describe("compatibility checker, property test against ajv", () => {
  it(`never accepts a version that rejects an old-valid payload (${PAIRS} seeded schema pairs)`, (t) => {
    const started = performance.now();
    const cpu = process.cpuUsage();
    const stats = runProperty(SEED, PAIRS);
    const { user, system } = process.cpuUsage(cpu);
    const seconds = (performance.now() - started) / 1000;
    t.diagnostic(`${JSON.stringify(stats)} in ${seconds.toFixed(2)}s (${((user + system) / 1e6).toFixed(2)}s CPU)`);
    // Non-vacuity: enough pairs of both kinds, with payloads to test.
    const tested = stats.pairs - stats.skipped;
    assert.ok(stats.skipped < stats.pairs * 0.1, `too many pairs skipped: ${stats.skipped}`);
    assert.ok(
      stats.compatibleWithPayloads >= tested * 0.2,
      `too few compatible pairs: ${stats.compatibleWithPayloads}`,
    );
    assert.ok(stats.counterexamples >= tested * 0.2, `too few breaking mutations: ${stats.counterexamples}`);
    assert.ok(stats.payloads >= tested * 5, `too few old-valid payloads: ${stats.payloads}`);
  });
});
