// Backward-compatibility checker for annotation schemas (JSON Schema draft 2020-12): a new version
// must accept every payload the latest live version accepted. Pure functions, no I/O.
//
// The rules follow Confluent Schema Registry's JSON Schema checks (type widening, bounds only
// relaxed, enum only extended, ...) but the checker is sound rather than a structural diff: it says
// "compatible" only when it can prove that every payload of the old schema is valid under the new
// one, and otherwise refuses with a rule naming the keyword it could not prove. One deliberate
// exception, taken from Confluent: a newly required property that declares a `default` is accepted,
// because consumers fill the default in.

export const COMPATIBILITY_RULES = [
  "invalid_schema",
  "unsupported_dialect",
  "unsupported_keyword",
  "remote_ref",
  "unresolvable_ref",
  "cannot_prove_compatible",
  "schema_became_false",
  "type_narrowed",
  "const_added",
  "const_changed",
  "enum_added",
  "enum_value_removed",
  "minimum_increased",
  "exclusive_minimum_increased",
  "maximum_decreased",
  "exclusive_maximum_decreased",
  "multiple_of_changed",
  "min_length_increased",
  "max_length_decreased",
  "pattern_added",
  "pattern_changed",
  "format_added",
  "format_changed",
  "min_items_increased",
  "max_items_decreased",
  "unique_items_added",
  "min_properties_increased",
  "max_properties_decreased",
  "required_added_without_default",
  "property_added_to_open_content_model",
  "property_removed_from_closed_content_model",
  "additional_properties_narrowed",
  "pattern_property_added",
  "any_of_added",
  "any_of_branch_removed",
  "one_of_added",
  "one_of_branch_removed",
] as const;

export type CompatibilityRule = (typeof COMPATIBILITY_RULES)[number];

export interface Incompatibility {
  /** JSON pointer into the NEW schema ("" for the root or for a problem of the old schema). */
  pointer: string;
  rule: CompatibilityRule;
  message: string;
}

export interface CompatibilityResult {
  compatible: boolean;
  incompatibilities: Incompatibility[];
}

type JsonObject = { [key: string]: unknown };

/** A subschema in its document: `$ref`s resolve against `root`; `pointer` locates it there. */
interface Node {
  readonly schema: unknown;
  readonly root: unknown;
  readonly pointer: string;
}

/** One conjunct of the old ("antecedent") side; `done` records which expansions were applied. */
interface Conjunct {
  readonly node: Node;
  readonly done: number;
}

const EXPANDED = 1; // its $ref target and allOf branches are already in the list
const ANY_OF_SPLIT = 2;
const ONE_OF_SPLIT = 4;

type Origin = "anyOf" | "oneOf";

interface Context {
  steps: number;
  nextId: number;
  readonly ids: WeakMap<object, number>;
  /** Pairs being compared, with the instance depth they were entered at (cycle guard). */
  readonly active: Map<string, number>;
  /** Stable `{ not: branch }` objects, so cycle keys built from them repeat. */
  readonly negations: WeakMap<object, JsonObject>;
  /** Settled answers of sameSchema, by pair of nodes. */
  readonly same: Map<string, boolean>;
}

// Proving inclusion of recursive schemas can branch; past this many comparisons we refuse.
const MAX_STEPS = 20_000;
const MAX_DISJOINT_DEPTH = 3;

const DRAFT_2020_12 = new Set([
  "https://json-schema.org/draft/2020-12/schema",
  "https://json-schema.org/draft/2020-12/schema#",
]);

// Validation keywords this checker does not reason about. In the old schema they are ignored
// (dropping a constraint of the old side only enlarges it, which keeps the proof sound); in the
// new schema they are refused. `additionalItems` and `dependencies` are draft-07 keywords that ajv
// still enforces under 2020-12.
const UNSUPPORTED_KEYWORDS = [
  "unevaluatedProperties",
  "unevaluatedItems",
  "$dynamicRef",
  "$recursiveRef",
  "additionalItems",
  "dependencies",
];

// Keywords proved only when an old conjunct carries the same value (its $refs leading to the same
// schemas): their meaning depends only on that value and the instance, so the same value cannot
// reject an old payload.
const OPAQUE_GROUPS: readonly { keywords: readonly string[]; atoms: readonly Atom[] }[] = [
  { keywords: ["contains", "minContains", "maxContains"], atoms: ["array"] },
  { keywords: ["propertyNames"], atoms: ["object"] },
  { keywords: ["dependentRequired"], atoms: ["object"] },
  { keywords: ["dependentSchemas"], atoms: ["object"] },
  { keywords: ["if", "then", "else"], atoms: ["null", "boolean", "object", "array", "string", "integer", "fraction"] },
];

// Everything else (title, description, default, examples, $comment, $defs, unknown words) is an
// annotation under 2020-12 and constrains nothing.
const CONSTRAINING_KEYWORDS = new Set([
  "type",
  "enum",
  "const",
  "multipleOf",
  "maximum",
  "exclusiveMaximum",
  "minimum",
  "exclusiveMinimum",
  "maxLength",
  "minLength",
  "pattern",
  "format",
  "items",
  "prefixItems",
  "maxItems",
  "minItems",
  "uniqueItems",
  "maxProperties",
  "minProperties",
  "required",
  "properties",
  "patternProperties",
  "additionalProperties",
  "allOf",
  "anyOf",
  "oneOf",
  "not",
  "$ref",
  ...OPAQUE_GROUPS.flatMap((group) => group.keywords),
  ...UNSUPPORTED_KEYWORDS,
]);

// ---------------------------------------------------------------------------------------------
// Entry points

/** Proves that every payload `oldSchema` accepts is accepted by `newSchema`, or says why not. */
export function checkBackwardCompatible(oldSchema: unknown, newSchema: unknown): CompatibilityResult {
  const refused = precheck(oldSchema, newSchema);
  if (refused.length > 0) return result(refused);
  const ctx: Context = {
    steps: 0,
    nextId: 0,
    ids: new WeakMap(),
    active: new Map(),
    negations: new WeakMap(),
    same: new Map(),
  };
  const oldNode: Node = { schema: oldSchema, root: oldSchema, pointer: "" };
  const newNode: Node = { schema: newSchema, root: newSchema, pointer: "" };
  return result(compare(ctx, [{ node: oldNode, done: 0 }], newNode, 0, undefined));
}

/** Every `$ref` (or `$dynamicRef`) that does not point inside the same document. */
export function findRemoteRefs(schema: unknown): string[] {
  const refs = new Set<string>();
  walkSchemas(schema, "", (subschema) => {
    for (const keyword of ["$ref", "$dynamicRef"]) {
      const ref = subschema[keyword];
      if (typeof ref === "string" && !ref.startsWith("#")) refs.add(ref);
    }
  });
  return [...refs];
}

function result(issues: readonly Incompatibility[]): CompatibilityResult {
  const seen = new Set<string>();
  const unique = issues.filter((issue) => {
    const key = `${issue.pointer}\u0000${issue.rule}\u0000${issue.message}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
  return { compatible: unique.length === 0, incompatibilities: unique };
}

// Document-wide refusals, checked before any comparison.
function precheck(oldSchema: unknown, newSchema: unknown): Incompatibility[] {
  if (!isSchema(newSchema)) return [issue("", "invalid_schema", "the new version is not a JSON Schema")];
  if (!isSchema(oldSchema)) return [issue("", "invalid_schema", "the latest version is not a JSON Schema")];
  return [
    ...dialectIssues(oldSchema, "the latest version"),
    ...dialectIssues(newSchema, undefined),
    ...documentIssues(oldSchema, "the latest version"),
    ...documentIssues(newSchema, undefined),
  ];
}

// `owner` names the old document; its issues point at the new root because pointers index the new one.
function dialectIssues(schema: unknown, owner: string | undefined): Incompatibility[] {
  if (!isObject(schema) || !hasOwn(schema, "$schema")) return [];
  const dialect = schema.$schema;
  if (typeof dialect === "string" && DRAFT_2020_12.has(dialect)) return [];
  const who = owner ?? "the new version";
  return [
    issue(owner ? "" : "/$schema", "unsupported_dialect", `${who} declares $schema ${render(dialect)}; only 2020-12`),
  ];
}

function documentIssues(schema: unknown, owner: string | undefined): Incompatibility[] {
  const out: Incompatibility[] = [];
  const who = owner ?? "the new version";
  walkSchemas(schema, "", (subschema, pointer) => {
    if (pointer !== "" && hasOwn(subschema, "$id")) {
      const message = `${who} embeds $id at ${render(pointer)}, which changes how $refs resolve`;
      out.push(issue(owner ? "" : `${pointer}/$id`, "unsupported_keyword", message));
    }
    const ref = subschema.$ref;
    if (typeof ref === "string" && !ref.startsWith("#")) {
      const message = `${who} has the remote $ref ${render(ref)}; only refs inside the document are resolved`;
      out.push(issue(owner ? "" : `${pointer}/$ref`, "remote_ref", message));
    }
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// The inclusion proof: compare(olds, target) lists why the conjunction of `olds` may accept a
// payload `target` rejects; an empty list is a proof of inclusion.

function compare(
  ctx: Context,
  olds: readonly Conjunct[],
  target: Node,
  depth: number,
  origin: Origin | undefined,
): Incompatibility[] {
  if (isTrivial(target.schema)) return [];
  ctx.steps += 1;
  if (ctx.steps > MAX_STEPS) return [tooComplex(target)];
  const expanded = expandConjuncts(ctx, olds);
  if (expanded === "empty") return [];
  if (expanded.some((conjunct) => sameSchema(ctx, conjunct.node, target))) return [];
  return guardCycle(ctx, expanded, target, depth, () => [
    ...targetParts(target).flatMap((part) => compare(ctx, expanded, part, depth, origin)),
    ...compareSplit(ctx, expanded, target, depth, origin),
  ]);
}

// The target's $ref target and allOf branches are proved one by one before the old side's
// disjunctions are split, so an unchanged part is matched whole by sameSchema.
function targetParts(target: Node): Node[] {
  const schema = target.schema;
  if (!isObject(schema)) return [];
  const parts: Node[] = [];
  if (typeof schema.$ref === "string") {
    const resolved = resolveRef(target.root, schema.$ref);
    if (typeof resolved === "object") parts.push({ ...resolved, root: target.root });
  }
  const branches = schema.allOf;
  if (Array.isArray(branches) && branches.length > 0 && branches.every(isSchema)) {
    parts.push(...branches.map((branch, i) => child(target, branch, `/allOf/${i}`)));
  }
  return parts;
}

// An old anyOf/oneOf is a disjunction: the old side is included in the target when each branch
// (with the rest of the old conjuncts) is.
function compareSplit(
  ctx: Context,
  olds: readonly Conjunct[],
  target: Node,
  depth: number,
  origin: Origin | undefined,
): Incompatibility[] {
  ctx.steps += 1;
  if (ctx.steps > MAX_STEPS) return [tooComplex(target)];
  if (olds.some((conjunct) => sameSchema(ctx, conjunct.node, target))) return [];
  const split = disjunctionBranches(ctx, olds);
  if (split) {
    return split.lists.flatMap((list) => {
      const expanded = expandConjuncts(ctx, list);
      return expanded === "empty" ? [] : compareSplit(ctx, expanded, target, depth, split.keyword);
    });
  }
  const view = viewOf(olds);
  if (view.atoms.size === 0) return [];
  return compareTarget(ctx, olds, view, target, depth, origin);
}

function tooComplex(target: Node): Incompatibility {
  return issue(target.pointer, "cannot_prove_compatible", "the schemas are too complex to compare");
}

// A $ref cycle revisits the same pair. If a property or item was consumed on the way, the payload
// got smaller, so assuming the pair compatible is sound (induction on payload size); otherwise
// the cycle never consumes anything and we refuse.
function guardCycle(
  ctx: Context,
  olds: readonly Conjunct[],
  target: Node,
  depth: number,
  run: () => Incompatibility[],
): Incompatibility[] {
  const key = `${olds.map((c) => `${conjunctKey(ctx, c.node)}.${c.done}`).sort()}>${conjunctKey(ctx, target)}`;
  const entered = ctx.active.get(key);
  if (entered !== undefined) {
    if (entered < depth) return [];
    return [issue(target.pointer, "cannot_prove_compatible", "a $ref cycle that consumes no part of the payload")];
  }
  ctx.active.set(key, depth);
  try {
    return run();
  } finally {
    ctx.active.delete(key);
  }
}

function conjunctKey(ctx: Context, node: Node): string {
  return `${idOf(ctx, node.root)}:${idOf(ctx, node.schema)}`;
}

function idOf(ctx: Context, value: unknown): string {
  if (typeof value !== "object" || value === null) return String(value);
  let id = ctx.ids.get(value);
  if (id === undefined) {
    ctx.nextId += 1;
    id = ctx.nextId;
    ctx.ids.set(value, id);
  }
  return `#${id}`;
}

// Flattens `$ref` targets and `allOf` branches into the conjunct list. An old `$ref` that cannot
// be resolved is dropped: forgetting an old constraint only enlarges the old side.
function expandConjuncts(ctx: Context, olds: readonly Conjunct[]): Conjunct[] | "empty" {
  const byNode = new Map<string, Conjunct>();
  const queue = [...olds];
  for (let conjunct = queue.shift(); conjunct; conjunct = queue.shift()) {
    const schema = conjunct.node.schema;
    if (schema === false) return "empty";
    if (!isObject(schema)) continue;
    const key = conjunctKey(ctx, conjunct.node);
    const known = byNode.get(key);
    if (known) {
      byNode.set(key, { node: known.node, done: known.done | conjunct.done });
      continue;
    }
    if (!(conjunct.done & EXPANDED)) queue.push(...conjunctsInside(conjunct.node, schema));
    byNode.set(key, { node: conjunct.node, done: conjunct.done | EXPANDED });
  }
  return [...byNode.values()];
}

function conjunctsInside(node: Node, schema: JsonObject): Conjunct[] {
  const out: Conjunct[] = [];
  if (typeof schema.$ref === "string") {
    const target = resolveRef(node.root, schema.$ref);
    if (typeof target === "object") out.push({ node: { ...target, root: node.root }, done: 0 });
  }
  if (Array.isArray(schema.allOf)) {
    schema.allOf.forEach((branch, i) => {
      out.push({ node: child(node, branch, `/allOf/${i}`), done: 0 });
    });
  }
  return out;
}

// Splits the first old anyOf/oneOf not yet split into one conjunct list per branch. A oneOf branch
// also knows the other branches failed, which the target's own oneOf or not may need; that is
// recorded as `{ not: otherBranch }`.
function disjunctionBranches(
  ctx: Context,
  olds: readonly Conjunct[],
): { keyword: Origin; lists: Conjunct[][] } | undefined {
  for (const [index, conjunct] of olds.entries()) {
    const schema = conjunct.node.schema as JsonObject;
    for (const [keyword, flag] of [
      ["anyOf", ANY_OF_SPLIT],
      ["oneOf", ONE_OF_SPLIT],
    ] as const) {
      const branches = schema[keyword];
      if (conjunct.done & flag || !Array.isArray(branches) || branches.length === 0) continue;
      const rest = olds.map((c, i) => (i === index ? { node: c.node, done: c.done | flag } : c));
      const lists = branches.map((branch, j) => {
        const chosen = { node: child(conjunct.node, branch, `/${keyword}/${j}`), done: 0 };
        const excluded =
          keyword === "oneOf"
            ? branches.flatMap((other, k) => (k === j ? [] : [negation(ctx, conjunct.node, other)]))
            : [];
        return [...rest, chosen, ...excluded];
      });
      return { keyword, lists };
    }
  }
  return undefined;
}

function negation(ctx: Context, node: Node, branch: unknown): Conjunct {
  const pointer = `${node.pointer}/not`;
  if (typeof branch === "boolean") return { node: { schema: !branch, root: node.root, pointer }, done: 0 };
  if (!isObject(branch)) return { node: { schema: true, root: node.root, pointer }, done: 0 };
  let negated = ctx.negations.get(branch);
  if (!negated) {
    negated = { not: branch };
    ctx.negations.set(branch, negated);
  }
  return { node: { schema: negated, root: node.root, pointer }, done: 0 };
}

// ---------------------------------------------------------------------------------------------
// What the old side is known to accept, summarised from its conjuncts.

type Atom = "null" | "boolean" | "object" | "array" | "string" | "integer" | "fraction";

const ALL_ATOMS: readonly Atom[] = ["null", "boolean", "object", "array", "string", "integer", "fraction"];
const NUMERIC: readonly Atom[] = ["integer", "fraction"];

// "fraction" is a number that is not an integer, so integer -> number is plain set inclusion.
const TYPE_ATOMS = new Map<string, readonly Atom[]>([
  ["null", ["null"]],
  ["boolean", ["boolean"]],
  ["object", ["object"]],
  ["array", ["array"]],
  ["string", ["string"]],
  ["integer", ["integer"]],
  ["number", ["integer", "fraction"]],
]);

interface OldView {
  /** Object-schema conjuncts of the old side. */
  readonly nodes: readonly Node[];
  /** Kinds of JSON value the old side may accept. */
  readonly atoms: ReadonlySet<Atom>;
  /** When known, a finite superset of the payloads the old side accepts. */
  readonly values: readonly unknown[] | undefined;
  /** Schemas the old side must not match (from `not`). */
  readonly negated: readonly unknown[];
}

function viewOf(conjuncts: readonly Conjunct[]): OldView {
  const nodes = conjuncts.map((c) => c.node).filter((node) => isObject(node.schema));
  // An old `not: X` (written, or recorded by a oneOf split) removes what X surely accepts.
  const negated = nodes.flatMap((node) => {
    const schema = node.schema as JsonObject;
    return hasOwn(schema, "not") ? [plainSchema(child(node, schema.not, "/not"))] : [];
  });
  let atoms = new Set(ALL_ATOMS.filter((atom) => !negated.some((x) => acceptsWholeAtom(x, atom))));
  let values: unknown[] | undefined;
  for (const node of nodes) {
    const schema = node.schema as JsonObject;
    const typed = atomsOfType(schema.type);
    if (typed) atoms = new Set([...atoms].filter((atom) => typed.has(atom)));
    const listed = hasOwn(schema, "const") ? [schema.const] : Array.isArray(schema.enum) ? schema.enum : undefined;
    if (listed) values = (values ?? listed).filter((v) => listed.some((w) => deepEqual(v, w)));
  }
  if (values === undefined && [...atoms].every((atom) => atom === "null" || atom === "boolean")) {
    values = [...(atoms.has("null") ? [null] : []), ...(atoms.has("boolean") ? [true, false] : [])];
  }
  if (values === undefined) return { nodes, atoms, values, negated };
  const accepted = values.filter((v) => {
    const atom = atomOf(v);
    if (atom === undefined || !atoms.has(atom) || negated.some((x) => surelyAccepts(x, v))) return false;
    return nodes.every((node) => satisfiesScalars(node.schema as JsonObject, v));
  });
  return { nodes, atoms: new Set(accepted.map((v) => atomOf(v) as Atom)), values: accepted, negated };
}

/** Whether the old side may accept this concrete value (false only when it surely does not). */
function mayAccept(view: OldView, value: unknown): boolean {
  const atom = atomOf(value);
  if (atom === undefined || !view.atoms.has(atom)) return false;
  if (view.values && !view.values.some((w) => deepEqual(w, value))) return false;
  if (view.negated.some((x) => surelyAccepts(x, value))) return false;
  return view.nodes.every((node) => satisfiesScalars(node.schema as JsonObject, value));
}

// Follows a bare `{ $ref }` chain, so a negated `$ref` branch can still be read.
function plainSchema(node: Node): unknown {
  let schema = node.schema;
  for (let hops = 0; hops < 16 && isObject(schema) && typeof schema.$ref === "string"; hops += 1) {
    const constraining = Object.keys(schema).filter((keyword) => CONSTRAINING_KEYWORDS.has(keyword));
    if (constraining.length > 1) break;
    const target = resolveRef(node.root, schema.$ref);
    if (typeof target !== "object") break;
    schema = target.schema;
  }
  return schema;
}

function applies(view: OldView, atoms: readonly Atom[]): boolean {
  return atoms.some((atom) => view.atoms.has(atom));
}

/** With a finite old side: the old values of these kinds that fail `holds`. */
function finiteFailures(view: OldView, atoms: readonly Atom[], holds: (v: unknown) => boolean): unknown[] | undefined {
  if (!view.values) return undefined;
  return view.values.filter((v) => atoms.includes(atomOf(v) as Atom) && !holds(v));
}

function oldHasKeyword(view: OldView, keywords: readonly string[]): boolean {
  return view.nodes.some((node) => keywords.some((keyword) => hasOwn(node.schema as JsonObject, keyword)));
}

// ---------------------------------------------------------------------------------------------
// The target side: every constraint of the new schema must follow from the old conjuncts.

interface Step {
  readonly ctx: Context;
  readonly olds: readonly Conjunct[];
  readonly view: OldView;
  readonly target: Node;
  readonly schema: JsonObject;
  readonly depth: number;
  readonly origin: Origin | undefined;
}

type TargetCheck = (step: Step) => Incompatibility[];

function compareTarget(
  ctx: Context,
  olds: readonly Conjunct[],
  view: OldView,
  target: Node,
  depth: number,
  origin: Origin | undefined,
): Incompatibility[] {
  const schema = target.schema;
  if (schema === false) {
    return [issue(target.pointer, "schema_became_false", "false rejects payloads the latest version accepted")];
  }
  if (!isObject(schema)) return [issue(target.pointer, "invalid_schema", "not a JSON Schema")];
  const step: Step = { ctx, olds, view, target, schema, depth, origin };
  return TARGET_CHECKS.flatMap((check) => check(step));
}

function checkUnsupported(step: Step): Incompatibility[] {
  const found = UNSUPPORTED_KEYWORDS.filter((keyword) => hasOwn(step.schema, keyword));
  if (Array.isArray(step.schema.items)) found.push("items");
  return found.map((keyword) =>
    issue(at(step.target, keyword), "unsupported_keyword", `the checker cannot reason about ${render(keyword)} here`),
  );
}

function checkRef(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "$ref")) return [];
  const ref = step.schema.$ref;
  const pointer = at(step.target, "$ref");
  if (typeof ref !== "string") return [invalid(pointer, "$ref")];
  const resolved = resolveRef(step.target.root, ref);
  if (resolved === "remote") return [issue(pointer, "remote_ref", `${render(ref)} is not inside the document`)];
  if (resolved === "unresolvable") {
    return [issue(pointer, "unresolvable_ref", `${render(ref)} is not a JSON pointer to a schema in the document`)];
  }
  return []; // the target itself is compared by compare(), see targetParts
}

function checkAllOf(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "allOf") || branchNodes(step, "allOf")) return []; // branches: see targetParts
  return [invalid(at(step.target, "allOf"), "allOf")];
}

function checkAnyOf(step: Step): Incompatibility[] {
  const branches = branchNodes(step, "anyOf");
  if (!branches) return hasOwn(step.schema, "anyOf") ? [invalid(at(step.target, "anyOf"), "anyOf")] : [];
  const covered = (olds: readonly Conjunct[]) => coveringBranch(step, olds, branches) >= 0;
  if (covered(step.olds) || splitByType(step)?.every(covered)) return [];
  const pointer = at(step.target, "anyOf");
  return step.origin
    ? [issue(pointer, "any_of_branch_removed", `a branch of the latest version's ${step.origin} fits no branch here`)]
    : [issue(pointer, "any_of_added", "the latest version accepted payloads that fit no single branch of this anyOf")];
}

// oneOf needs a covering branch and proof that no other branch also matches an old payload.
function checkOneOf(step: Step): Incompatibility[] {
  const branches = branchNodes(step, "oneOf");
  if (!branches) return hasOwn(step.schema, "oneOf") ? [invalid(at(step.target, "oneOf"), "oneOf")] : [];
  const whole = oneOfIssues(step, step.olds, branches);
  if (whole.length === 0) return [];
  const byType = splitByType(step);
  if (byType?.every((olds) => oneOfIssues(step, olds, branches).length === 0)) return [];
  return whole;
}

// Any covering branch will do if the others provably reject what it covers; the first one found
// may be the wrong one when the old side is secretly empty (a value the old oneOf matched twice).
function oneOfIssues(step: Step, olds: readonly Conjunct[], branches: readonly Node[]): Incompatibility[] {
  const covers = branches.flatMap((branch, i) =>
    compare(step.ctx, olds, branch, step.depth, step.origin).length === 0 ? [i] : [],
  );
  const first = covers[0];
  if (first === undefined) {
    const pointer = at(step.target, "oneOf");
    return step.origin
      ? [issue(pointer, "one_of_branch_removed", `a branch of the latest version's ${step.origin} fits no branch here`)]
      : [
          issue(
            pointer,
            "one_of_added",
            "the latest version accepted payloads that fit no single branch of this oneOf",
          ),
        ];
  }
  const overlaps = (cover: number) =>
    branches.filter((branch, k) => k !== cover && !provablyDisjoint(step.ctx, olds, branch, step.depth));
  if (covers.some((cover) => overlaps(cover).length === 0)) return [];
  const message = `cannot prove this branch rejects the old payloads oneOf branch ${first} accepts (matching both fails oneOf)`;
  return overlaps(first).map((branch) => issue(branch.pointer, "cannot_prove_compatible", message));
}

function checkNot(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "not")) return [];
  const pointer = at(step.target, "not");
  if (!isSchema(step.schema.not)) return [invalid(pointer, "not")];
  if (provablyDisjoint(step.ctx, step.olds, child(step.target, step.schema.not, "/not"), step.depth)) return [];
  return [
    issue(pointer, "cannot_prove_compatible", "cannot prove that no payload the latest version accepted matches not"),
  ];
}

function branchNodes(step: Step, keyword: string): Node[] | undefined {
  const branches = step.schema[keyword];
  if (!Array.isArray(branches) || branches.length === 0 || !branches.every(isSchema)) return undefined;
  return branches.map((branch, i) => child(step.target, branch, `/${keyword}/${i}`));
}

function coveringBranch(step: Step, olds: readonly Conjunct[], branches: readonly Node[]): number {
  return branches.findIndex((branch) => compare(step.ctx, olds, branch, step.depth, step.origin).length === 0);
}

// A union type such as ["string", "null"] fits `oneOf: [{type: string}, {type: null}]` only
// type by type: the old side is the union of its parts of each JSON type.
const TYPE_PARTS: readonly { atoms: readonly Atom[]; node: Node }[] = [
  ["null", ["null"]],
  ["boolean", ["boolean"]],
  ["object", ["object"]],
  ["array", ["array"]],
  ["string", ["string"]],
  ["number", NUMERIC],
].map(([type, atoms]) => ({ atoms: atoms as readonly Atom[], node: { schema: { type }, root: null, pointer: "" } }));

function splitByType(step: Step): Conjunct[][] | undefined {
  const parts = TYPE_PARTS.filter((part) => applies(step.view, part.atoms));
  if (parts.length < 2) return undefined;
  return parts.map((part) => [...step.olds, { node: part.node, done: 0 }]);
}

function checkType(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "type")) return [];
  const pointer = at(step.target, "type");
  const allowed = atomsOfType(step.schema.type);
  if (!allowed) return [invalid(pointer, "type")];
  const lost = [...step.view.atoms].filter((atom) => !allowed.has(atom));
  if (lost.length === 0) return [];
  const names = lost.map((atom) => (atom === "fraction" ? "non-integer number" : atom));
  return [issue(pointer, "type_narrowed", `the latest version also accepted ${names.join(", ")}`)];
}

function checkConst(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "const")) return [];
  const expected = step.schema.const;
  const failures = finiteFailures(step.view, ALL_ATOMS, (v) => deepEqual(v, expected));
  if (failures?.length === 0) return [];
  const pointer = at(step.target, "const");
  if (failures && oldHasKeyword(step.view, ["const", "enum"])) {
    return [issue(pointer, "const_changed", `the latest version accepted ${render(failures)}`)];
  }
  return [issue(pointer, "const_added", `the latest version accepted more than ${render(expected)}`)];
}

function checkEnum(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "enum")) return [];
  const listed = step.schema.enum;
  const pointer = at(step.target, "enum");
  if (!Array.isArray(listed)) return [invalid(pointer, "enum")];
  const failures = finiteFailures(step.view, ALL_ATOMS, (v) => listed.some((w) => deepEqual(v, w)));
  if (failures?.length === 0) return [];
  if (failures && oldHasKeyword(step.view, ["const", "enum"])) {
    return [issue(pointer, "enum_value_removed", `the latest version accepted ${render(failures)}`)];
  }
  return [issue(pointer, "enum_added", "the latest version accepted values outside this enum")];
}

// ---------------------------------------------------------------------------------------------
// Bounds: minimum/maximum (and exclusive forms), lengths, item and property counts.

type Family = "number" | "length" | "items" | "properties";
type Side = "lower" | "upper";

interface BoundSpec {
  readonly family: Family;
  readonly side: Side;
  readonly exclusive: boolean;
  readonly rule: CompatibilityRule;
}

interface Bound {
  readonly value: number;
  readonly exclusive: boolean;
}

const BOUND_KEYWORDS = new Map<string, BoundSpec>([
  ["minimum", { family: "number", side: "lower", exclusive: false, rule: "minimum_increased" }],
  ["exclusiveMinimum", { family: "number", side: "lower", exclusive: true, rule: "exclusive_minimum_increased" }],
  ["maximum", { family: "number", side: "upper", exclusive: false, rule: "maximum_decreased" }],
  ["exclusiveMaximum", { family: "number", side: "upper", exclusive: true, rule: "exclusive_maximum_decreased" }],
  ["minLength", { family: "length", side: "lower", exclusive: false, rule: "min_length_increased" }],
  ["maxLength", { family: "length", side: "upper", exclusive: false, rule: "max_length_decreased" }],
  ["minItems", { family: "items", side: "lower", exclusive: false, rule: "min_items_increased" }],
  ["maxItems", { family: "items", side: "upper", exclusive: false, rule: "max_items_decreased" }],
  ["minProperties", { family: "properties", side: "lower", exclusive: false, rule: "min_properties_increased" }],
  ["maxProperties", { family: "properties", side: "upper", exclusive: false, rule: "max_properties_decreased" }],
]);

const FAMILY_ATOMS: Record<Family, readonly Atom[]> = {
  number: NUMERIC,
  length: ["string"],
  items: ["array"],
  properties: ["object"],
};

// ajv counts string length in code points, as the spec asks.
function measure(family: Family, value: unknown): number | undefined {
  if (family === "number") return typeof value === "number" ? value : undefined;
  if (family === "length") return typeof value === "string" ? [...value].length : undefined;
  if (family === "items") return Array.isArray(value) ? value.length : undefined;
  return isObject(value) ? Object.keys(value).length : undefined;
}

function isBoundValue(family: Family, value: unknown): value is number {
  if (typeof value !== "number" || !Number.isFinite(value)) return false;
  return family === "number" || (Number.isInteger(value) && value >= 0);
}

function holdsBound(side: Side, bound: Bound, x: number): boolean {
  if (side === "lower") return bound.exclusive ? x > bound.value : x >= bound.value;
  return bound.exclusive ? x < bound.value : x <= bound.value;
}

/** Old bound `held` implies new bound `wanted` on the same side. */
function boundImplies(side: Side, held: Bound, wanted: Bound): boolean {
  const tighter = side === "lower" ? held.value > wanted.value : held.value < wanted.value;
  return tighter || (held.value === wanted.value && (held.exclusive || !wanted.exclusive));
}

function oldBounds(view: OldView, family: Family, side: Side): Bound[] {
  const bounds = view.nodes.flatMap((node) => {
    const schema = node.schema as JsonObject;
    const stated = [...BOUND_KEYWORDS]
      .filter(
        ([keyword, spec]) => spec.family === family && spec.side === side && isBoundValue(family, schema[keyword]),
      )
      .map(([keyword, spec]) => ({ value: schema[keyword] as number, exclusive: spec.exclusive }));
    return [...stated, ...impliedBounds(schema, family, side)];
  });
  const integersOnly = family === "number" && !view.atoms.has("fraction");
  return integersOnly ? bounds.map((bound) => integerBound(side, bound)) : bounds;
}

// Over integers, `exclusiveMaximum: 5` is `maximum: 4` and `minimum: 0.5` is `minimum: 1`.
function integerBound(side: Side, bound: Bound): Bound {
  if (side === "lower") {
    return { value: bound.exclusive ? Math.floor(bound.value) + 1 : Math.ceil(bound.value), exclusive: false };
  }
  return { value: bound.exclusive ? Math.ceil(bound.value) - 1 : Math.floor(bound.value), exclusive: false };
}

// Bounds other keywords imply: a closed tuple caps the length, required names floor the count,
// a closed object with only named properties caps it.
function impliedBounds(schema: JsonObject, family: Family, side: Side): Bound[] {
  if (family === "items" && side === "upper" && schema.items === false) {
    return [{ value: Array.isArray(schema.prefixItems) ? schema.prefixItems.length : 0, exclusive: false }];
  }
  if (family === "properties" && side === "lower" && Array.isArray(schema.required)) {
    return [{ value: new Set(schema.required.filter((r) => typeof r === "string")).size, exclusive: false }];
  }
  const closed = schema.additionalProperties === false && !isNonEmptyObject(schema.patternProperties);
  if (family === "properties" && side === "upper" && closed) {
    return [{ value: isObject(schema.properties) ? Object.keys(schema.properties).length : 0, exclusive: false }];
  }
  return [];
}

function checkBounds(step: Step): Incompatibility[] {
  return [...BOUND_KEYWORDS].flatMap(([keyword, spec]) =>
    hasOwn(step.schema, keyword) ? checkBound(step, keyword, spec) : [],
  );
}

function checkBound(step: Step, keyword: string, spec: BoundSpec): Incompatibility[] {
  const value = step.schema[keyword];
  const pointer = at(step.target, keyword);
  if (!isBoundValue(spec.family, value)) return [invalid(pointer, keyword)];
  const atoms = FAMILY_ATOMS[spec.family];
  if (!applies(step.view, atoms)) return [];
  const wanted = { value, exclusive: spec.exclusive };
  const failures = finiteFailures(step.view, atoms, (v) => holdsBound(spec.side, wanted, measure(spec.family, v) ?? 0));
  if (failures) {
    return failures.length === 0
      ? []
      : [issue(pointer, spec.rule, `the latest version accepted ${render(failures)}, outside ${keyword} ${value}`)];
  }
  const held = oldBounds(step.view, spec.family, spec.side);
  if (held.some((bound) => boundImplies(spec.side, bound, wanted))) return [];
  const message =
    held.length === 0
      ? `${keyword} ${value} is new; the latest version had no such bound`
      : `${keyword} ${value} is tighter than the latest version's bound`;
  return [issue(pointer, spec.rule, message)];
}

// ---------------------------------------------------------------------------------------------
// Scalar keywords: multipleOf, pattern, format, uniqueItems, required.

function checkMultipleOf(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "multipleOf")) return [];
  const divisor = step.schema.multipleOf;
  const pointer = at(step.target, "multipleOf");
  if (!isPositiveNumber(divisor)) return [invalid(pointer, "multipleOf")];
  if (!applies(step.view, NUMERIC)) return [];
  const failures = finiteFailures(step.view, NUMERIC, (v) => isMultipleOf(v as number, divisor));
  if (failures?.length === 0) return [];
  const integersOnly = divisor === 1 && !step.view.atoms.has("fraction");
  const implied = step.view.nodes.some((node) => divides(divisor, (node.schema as JsonObject).multipleOf));
  if (!failures && (integersOnly || implied)) return [];
  return [
    issue(pointer, "multiple_of_changed", `the latest version accepted numbers that are not multiples of ${divisor}`),
  ];
}

// Only exact integer multiples are trusted; floating-point divisors must stay unchanged.
function divides(divisor: number, held: unknown): boolean {
  if (!isPositiveNumber(held)) return false;
  return held === divisor || (Number.isInteger(held) && Number.isInteger(divisor) && held % divisor === 0);
}

function isMultipleOf(value: number, divisor: number): boolean {
  return Number.isInteger(value / divisor);
}

function checkPattern(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "pattern")) return [];
  const pattern = step.schema.pattern;
  const pointer = at(step.target, "pattern");
  const regex = typeof pattern === "string" ? compilePattern(pattern) : undefined;
  if (!regex) return [invalid(pointer, "pattern")];
  if (!applies(step.view, ["string"])) return [];
  const failures = finiteFailures(step.view, ["string"], (v) => regex.test(v as string));
  if (failures?.length === 0) return [];
  if (!failures && step.view.nodes.some((node) => (node.schema as JsonObject).pattern === pattern)) return [];
  const rule = oldHasKeyword(step.view, ["pattern"]) ? "pattern_changed" : "pattern_added";
  const rejected = failures ? render(failures) : "strings";
  return [issue(pointer, rule, `the latest version accepted ${rejected} that ${render(pattern)} rejects`)];
}

function checkFormat(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "format")) return [];
  const format = step.schema.format;
  const pointer = at(step.target, "format");
  if (typeof format !== "string") return [invalid(pointer, "format")];
  if (!applies(step.view, ["string", ...NUMERIC])) return [];
  if (step.view.nodes.some((node) => (node.schema as JsonObject).format === format)) return [];
  const rule = oldHasKeyword(step.view, ["format"]) ? "format_changed" : "format_added";
  return [issue(pointer, rule, `cannot prove the latest version's payloads match format ${render(format)}`)];
}

function checkUniqueItems(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "uniqueItems")) return [];
  const pointer = at(step.target, "uniqueItems");
  if (typeof step.schema.uniqueItems !== "boolean") return [invalid(pointer, "uniqueItems")];
  if (!step.schema.uniqueItems || !applies(step.view, ["array"])) return [];
  const failures = finiteFailures(step.view, ["array"], (v) => allUnique(v as unknown[]));
  if (failures?.length === 0) return [];
  const held =
    step.view.nodes.some((node) => (node.schema as JsonObject).uniqueItems === true) ||
    oldBounds(step.view, "items", "upper").some((bound) => bound.value <= 1);
  if (!failures && held) return [];
  return [issue(pointer, "unique_items_added", "the latest version accepted arrays with duplicate items")];
}

function checkRequired(step: Step): Incompatibility[] {
  if (!hasOwn(step.schema, "required")) return [];
  const required = step.schema.required;
  if (!Array.isArray(required) || !required.every((r) => typeof r === "string")) {
    return [invalid(at(step.target, "required"), "required")];
  }
  if (!applies(step.view, ["object"])) return [];
  const properties = isObject(step.schema.properties) ? step.schema.properties : {};
  return required.flatMap((name, i) => {
    const alreadyRequired = step.view.nodes.some((node) => {
      const held = (node.schema as JsonObject).required;
      return Array.isArray(held) && held.includes(name);
    });
    const failures = finiteFailures(step.view, ["object"], (v) => hasOwn(v as JsonObject, name));
    // Confluent's rule: a default stands in for the missing value (consumers fill it in).
    if (alreadyRequired || failures?.length === 0 || (hasOwn(properties, name) && hasDefault(properties[name])))
      return [];
    const pointer = at(step.target, `required/${i}`);
    return [issue(pointer, "required_added_without_default", `${render(name)} is newly required and has no default`)];
  });
}

function hasDefault(schema: unknown): boolean {
  return isObject(schema) && hasOwn(schema, "default");
}

// ---------------------------------------------------------------------------------------------
// Objects: properties, patternProperties, additionalProperties. Each new conjunct ("key k has a
// value in S", "keys matching P ...", "other keys ...") must follow from what governs the same
// keys on the old side. Keys named in an old `properties` are checked one by one; all other
// keys are unknown, so every old schema that might govern them must fit.

function checkObjectShape(step: Step): Incompatibility[] {
  const { schema, target } = step;
  if (!["properties", "patternProperties", "additionalProperties"].some((k) => hasOwn(schema, k))) return [];
  const properties = schemaMap(schema, "properties");
  const patterns = schemaMap(schema, "patternProperties");
  const additional = schema.additionalProperties;
  const bad = [
    ...(properties ? [] : [invalid(at(target, "properties"), "properties")]),
    ...(patterns && Object.keys(patterns).every((p) => compilePattern(p))
      ? []
      : [invalid(at(target, "patternProperties"), "patternProperties")]),
    ...(additional === undefined || isSchema(additional)
      ? []
      : [invalid(at(target, "additionalProperties"), "additionalProperties")]),
  ];
  if (bad.length > 0 || !properties || !patterns) return bad;
  if (!applies(step.view, ["object"])) return [];
  const oldNames = namedInOld(step.view);
  return [
    ...checkNamedProperties(step, properties),
    ...checkPatternProperties(step, patterns, oldNames),
    ...checkAdditionalProperties(step, properties, patterns, oldNames),
  ];
}

function checkNamedProperties(step: Step, properties: JsonObject): Incompatibility[] {
  return Object.entries(properties).flatMap(([name, subschema]) => {
    const node = child(step.target, subschema, `/properties/${escapeToken(name)}`);
    const governed = governing(step.view.nodes, name);
    const issues = compare(step.ctx, toConjuncts(governed.nodes), node, step.depth + 1, undefined);
    if (issues.length === 0 || !governed.open) return issues;
    const message = `the latest version's open content model accepted any value under ${render(name)}`;
    return [issue(node.pointer, "property_added_to_open_content_model", message)];
  });
}

function checkPatternProperties(step: Step, patterns: JsonObject, oldNames: readonly string[]): Incompatibility[] {
  return Object.entries(patterns).flatMap(([pattern, subschema]) => {
    const regex = compilePattern(pattern) as RegExp;
    const node = child(step.target, subschema, `/patternProperties/${escapeToken(pattern)}`);
    const named = oldNames
      .filter((name) => regex.test(name))
      .flatMap((name) =>
        compare(step.ctx, toConjuncts(governing(step.view.nodes, name).nodes), node, step.depth + 1, undefined),
      );
    const unnamed = compareUnnamedKeys(step, (old) => alternativesForPattern(old, pattern), node);
    if (unnamed.length === 0) return named;
    const message = `the latest version accepted keys matching ${render(pattern)} with values this schema rejects`;
    return [...named, issue(node.pointer, "pattern_property_added", message)];
  });
}

function checkAdditionalProperties(
  step: Step,
  properties: JsonObject,
  patterns: JsonObject,
  oldNames: readonly string[],
): Incompatibility[] {
  const additional = step.schema.additionalProperties;
  if (additional === undefined || isTrivial(additional)) return [];
  const node = child(step.target, additional, "/additionalProperties");
  const regexes = Object.keys(patterns).map((p) => compilePattern(p) as RegExp);
  const named = oldNames
    .filter((name) => !hasOwn(properties, name) && !regexes.some((regex) => regex.test(name)))
    .flatMap((name) => {
      const issues = compare(
        step.ctx,
        toConjuncts(governing(step.view.nodes, name).nodes),
        node,
        step.depth + 1,
        undefined,
      );
      if (issues.length === 0 || additional !== false) return issues;
      const message = `the latest version accepted property ${render(name)}, which is no longer allowed`;
      return [issue(node.pointer, "property_removed_from_closed_content_model", message)];
    });
  const unnamed = compareUnnamedKeys(step, (old) => alternativesForAdditional(old, patterns), node);
  if (unnamed.length === 0) return named;
  const message = "the latest version accepted other properties with values this additionalProperties rejects";
  return [...named, issue(node.pointer, "additional_properties_narrowed", message)];
}

function namedInOld(view: OldView): string[] {
  const names = new Set<string>();
  for (const node of view.nodes) {
    const properties = (node.schema as JsonObject).properties;
    if (isObject(properties)) for (const name of Object.keys(properties)) names.add(name);
  }
  return [...names];
}

/** The old schemas a value under `name` must satisfy; `open` when none constrains it. */
function governing(nodes: readonly Node[], name: string): { nodes: Node[]; open: boolean } {
  let open = true;
  const out = nodes.flatMap((node) => {
    const schema = node.schema as JsonObject;
    const properties = isObject(schema.properties) ? schema.properties : {};
    const patterns = isObject(schema.patternProperties) ? schema.patternProperties : {};
    const own: Node[] = hasOwn(properties, name)
      ? [child(node, properties[name], `/properties/${escapeToken(name)}`)]
      : [];
    let unknownPattern = false;
    for (const [pattern, subschema] of Object.entries(patterns)) {
      const regex = compilePattern(pattern);
      if (!regex) unknownPattern = true;
      else if (regex.test(name)) own.push(child(node, subschema, `/patternProperties/${escapeToken(pattern)}`));
    }
    if (own.length > 0) open = false;
    // additionalProperties governs only keys nothing else matched; with an unreadable pattern we
    // cannot tell, and forgetting the constraint is the sound choice.
    if (own.length > 0 || unknownPattern || !hasOwn(schema, "additionalProperties")) return own;
    return [child(node, schema.additionalProperties, "/additionalProperties")];
  });
  return { nodes: out, open: open && out.every((node) => isTrivial(node.schema)) };
}

// For a key no old `properties` names, an old conjunct constrains its value by one of several
// schemas depending on which patterns match; each alternative must fit.
function alternativesForPattern(node: Node, pattern: string): Node[] {
  const patterns = (node.schema as JsonObject).patternProperties;
  if (isObject(patterns) && hasOwn(patterns, pattern)) {
    return [child(node, patterns[pattern], `/patternProperties/${escapeToken(pattern)}`)];
  }
  return [additionalOf(node), ...patternNodes(node, () => true)];
}

function alternativesForAdditional(node: Node, newPatterns: JsonObject): Node[] {
  return [additionalOf(node), ...patternNodes(node, (pattern) => !hasOwn(newPatterns, pattern))];
}

function additionalOf(node: Node): Node {
  const schema = node.schema as JsonObject;
  return child(
    node,
    hasOwn(schema, "additionalProperties") ? schema.additionalProperties : true,
    "/additionalProperties",
  );
}

function patternNodes(node: Node, keep: (pattern: string) => boolean): Node[] {
  const patterns = (node.schema as JsonObject).patternProperties;
  if (!isObject(patterns)) return [];
  return Object.entries(patterns)
    .filter(([pattern]) => keep(pattern))
    .map(([pattern, subschema]) => child(node, subschema, `/patternProperties/${escapeToken(pattern)}`));
}

function compareUnnamedKeys(step: Step, alternativesOf: (node: Node) => Node[], target: Node): Incompatibility[] {
  const singles: Node[] = [];
  const multiples: Node[][] = [];
  for (const node of step.view.nodes) {
    const alternatives = alternativesOf(node);
    if (alternatives.length === 1) singles.push(...alternatives);
    else multiples.push(alternatives);
  }
  const run = (nodes: Node[]) => compare(step.ctx, toConjuncts(nodes), target, step.depth + 1, undefined);
  let best = run(singles);
  for (const alternatives of multiples) {
    if (best.length === 0) return best;
    const issues = alternatives.flatMap((alternative) => run([...singles, alternative]));
    if (issues.length < best.length) best = issues;
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Arrays: prefixItems and items, position by position.

function checkArrayShape(step: Step): Incompatibility[] {
  const { schema, target } = step;
  if (!hasOwn(schema, "items") && !hasOwn(schema, "prefixItems")) return [];
  const prefix = schema.prefixItems ?? [];
  if (!Array.isArray(prefix) || !prefix.every(isSchema)) return [invalid(at(target, "prefixItems"), "prefixItems")];
  const items = schema.items;
  if (items !== undefined && !isSchema(items) && !Array.isArray(items)) return [invalid(at(target, "items"), "items")];
  if (!applies(step.view, ["array"])) return [];
  const maxLength = Math.min(Infinity, ...oldBounds(step.view, "items", "upper").map((bound) => bound.value));
  const oldPrefixLength = Math.max(0, ...step.view.nodes.map((node) => prefixOf(node).length));
  const run = (olds: Node[], node: Node) => compare(step.ctx, toConjuncts(olds), node, step.depth + 1, undefined);
  const out = prefix
    .slice(0, Math.min(prefix.length, maxLength))
    .flatMap((subschema, i) => run(itemsAt(step.view.nodes, i), child(target, subschema, `/prefixItems/${i}`)));
  if (!isSchema(items) || isTrivial(items)) return out;
  const node = child(target, items, "/items");
  for (let i = prefix.length; i < Math.min(oldPrefixLength, maxLength); i += 1) {
    out.push(...run(itemsAt(step.view.nodes, i), node));
  }
  if (maxLength > Math.max(prefix.length, oldPrefixLength)) out.push(...run(tailItems(step.view.nodes), node));
  return out;
}

function prefixOf(node: Node): unknown[] {
  const prefix = (node.schema as JsonObject).prefixItems;
  return Array.isArray(prefix) ? prefix : [];
}

function itemsAt(nodes: readonly Node[], index: number): Node[] {
  return nodes.flatMap((node) => {
    const prefix = prefixOf(node);
    if (index < prefix.length) return [child(node, prefix[index], `/prefixItems/${index}`)];
    return tailItems([node]);
  });
}

function tailItems(nodes: readonly Node[]): Node[] {
  return nodes.flatMap((node) => {
    const items = (node.schema as JsonObject).items;
    return isSchema(items) ? [child(node, items, "/items")] : [];
  });
}

function checkOpaqueGroups(step: Step): Incompatibility[] {
  return OPAQUE_GROUPS.flatMap(({ keywords, atoms }) => {
    const present = keywords.filter((keyword) => hasOwn(step.schema, keyword));
    const first = present[0];
    if (first === undefined || !applies(step.view, atoms)) return [];
    const unchanged = step.view.nodes.some((node) =>
      keywords.every((keyword) => {
        const held = (node.schema as JsonObject)[keyword];
        return sameValue(step.ctx, held, node.root, step.schema[keyword], step.target.root, new Set());
      }),
    );
    if (unchanged) return [];
    const message = `cannot prove ${present.join("/")} compatible unless unchanged from the latest version`;
    return [issue(at(step.target, first), "cannot_prove_compatible", message)];
  });
}

const TARGET_CHECKS: readonly TargetCheck[] = [
  checkUnsupported,
  checkRef,
  checkAllOf,
  checkAnyOf,
  checkOneOf,
  checkNot,
  checkType,
  checkConst,
  checkEnum,
  checkBounds,
  checkMultipleOf,
  checkPattern,
  checkFormat,
  checkUniqueItems,
  checkRequired,
  checkObjectShape,
  checkArrayShape,
  checkOpaqueGroups,
];

// ---------------------------------------------------------------------------------------------
// Disjointness, for `not` and for oneOf exclusivity: proves no old payload matches `other`.

function provablyDisjoint(ctx: Context, olds: readonly Conjunct[], other: Node, depth: number): boolean {
  const viaNot = olds.some((conjunct) => {
    const schema = conjunct.node.schema as JsonObject;
    if (!hasOwn(schema, "not") || !isSchema(schema.not)) return false;
    // old says "not M"; other ⊆ M means no old payload matches other.
    const negated = child(conjunct.node, schema.not, "/not");
    return compare(ctx, [{ node: other, done: 0 }], negated, depth, undefined).length === 0;
  });
  return viaNot || shapesDisjoint(ctx, olds, [{ node: other, done: 0 }], 0);
}

// Splits disjunctions on either side; other keywords it cannot read are ignored, which only
// over-approximates both sides and keeps a "disjoint" answer sound.
function shapesDisjoint(ctx: Context, a: readonly Conjunct[], b: readonly Conjunct[], level: number): boolean {
  ctx.steps += 1;
  if (level > MAX_DISJOINT_DEPTH || ctx.steps > MAX_STEPS) return false;
  const left = expandConjuncts(ctx, a);
  const right = expandConjuncts(ctx, b);
  if (left === "empty" || right === "empty") return true;
  const splitLeft = disjunctionBranches(ctx, left);
  if (splitLeft) return splitLeft.lists.every((list) => shapesDisjoint(ctx, list, right, level));
  const splitRight = disjunctionBranches(ctx, right);
  if (splitRight) return splitRight.lists.every((list) => shapesDisjoint(ctx, left, list, level));
  const viewA = viewOf(left);
  const viewB = viewOf(right);
  return [...viewA.atoms].every(
    (atom) =>
      !viewB.atoms.has(atom) ||
      finiteRejected(viewA, viewB, atom) ||
      finiteRejected(viewB, viewA, atom) ||
      (atom === "object" && objectsDisjoint(ctx, viewA, viewB, level)),
  );
}

function finiteRejected(finite: OldView, other: OldView, atom: Atom): boolean {
  if (!finite.values) return false;
  return finite.values.filter((v) => atomOf(v) === atom).every((v) => !mayAccept(other, v));
}

// Objects that both carry a key (required by one side) with provably disjoint values are disjoint:
// the discriminator pattern `{ kind: { const: "a" } }` vs `{ kind: { const: "b" } }`.
function objectsDisjoint(ctx: Context, a: OldView, b: OldView, level: number): boolean {
  const names = new Set([...requiredNames(a), ...requiredNames(b)]);
  return [...names].some((name) =>
    shapesDisjoint(
      ctx,
      toConjuncts(governing(a.nodes, name).nodes),
      toConjuncts(governing(b.nodes, name).nodes),
      level + 1,
    ),
  );
}

function requiredNames(view: OldView): string[] {
  return view.nodes.flatMap((node) => {
    const required = (node.schema as JsonObject).required;
    return Array.isArray(required) ? required.filter((r): r is string => typeof r === "string") : [];
  });
}

// ---------------------------------------------------------------------------------------------
// Checking one concrete value against one keyword (finite old sides, and filtering them).

/** Whether `value` may satisfy every keyword of `schema` we can evaluate here (true if unsure). */
function satisfiesScalars(schema: JsonObject, value: unknown): boolean {
  return Object.keys(schema).every((keyword) => keywordHolds(keyword, schema[keyword], value) !== false);
}

// The JSON types each type-specific keyword constrains; it says nothing about other values.
const KEYWORD_ATOMS = new Map<string, readonly Atom[]>([
  ...[...BOUND_KEYWORDS].map(([keyword, spec]) => [keyword, FAMILY_ATOMS[spec.family]] as const),
  ["multipleOf", NUMERIC],
  ["pattern", ["string"]],
  ["format", ["string", ...NUMERIC]],
  ...[
    "items",
    "prefixItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
    "additionalItems",
  ].map((keyword) => [keyword, ["array"]] as const),
  ...[
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "dependencies",
  ].map((keyword) => [keyword, ["object"]] as const),
]);

/** `schema` accepts every value of this JSON type (judged from its keywords alone). */
function acceptsWholeAtom(schema: unknown, atom: Atom): boolean {
  if (typeof schema === "boolean") return schema;
  if (!isObject(schema)) return false;
  return Object.keys(schema).every((keyword) => {
    if (!CONSTRAINING_KEYWORDS.has(keyword)) return true;
    if (keyword === "type") return atomsOfType(schema.type)?.has(atom) === true;
    const family = KEYWORD_ATOMS.get(keyword);
    return family !== undefined && !family.includes(atom);
  });
}

/** `schema` certainly accepts `value` (false when unsure). */
function surelyAccepts(schema: unknown, value: unknown): boolean {
  if (typeof schema === "boolean") return schema;
  const atom = atomOf(value);
  if (!isObject(schema) || atom === undefined) return false;
  return Object.keys(schema).every((keyword) => {
    if (!CONSTRAINING_KEYWORDS.has(keyword)) return true;
    const family = KEYWORD_ATOMS.get(keyword);
    if (family && !family.includes(atom)) return true;
    return keywordHolds(keyword, schema[keyword], value) === true;
  });
}

function keywordHolds(keyword: string, expected: unknown, value: unknown): boolean | undefined {
  switch (keyword) {
    case "type": {
      const atoms = atomsOfType(expected);
      const atom = atomOf(value);
      return atoms && atom ? atoms.has(atom) : undefined;
    }
    case "const":
      return deepEqual(expected, value);
    case "enum":
      return Array.isArray(expected) ? expected.some((w) => deepEqual(w, value)) : undefined;
    case "multipleOf":
      return typeof value === "number" && isPositiveNumber(expected) ? isMultipleOf(value, expected) : undefined;
    case "pattern": {
      const regex = typeof expected === "string" ? compilePattern(expected) : undefined;
      return typeof value === "string" && regex ? regex.test(value) : undefined;
    }
    case "uniqueItems":
      return expected === true && Array.isArray(value) ? allUnique(value) : undefined;
    case "required":
      return Array.isArray(expected) && isObject(value)
        ? expected.every((name) => typeof name !== "string" || hasOwn(value, name))
        : undefined;
    default:
      return boundHolds(keyword, expected, value);
  }
}

function boundHolds(keyword: string, expected: unknown, value: unknown): boolean | undefined {
  const spec = BOUND_KEYWORDS.get(keyword);
  if (!spec || !isBoundValue(spec.family, expected)) return undefined;
  const size = measure(spec.family, value);
  return size === undefined ? undefined : holdsBound(spec.side, { value: expected, exclusive: spec.exclusive }, size);
}

// ---------------------------------------------------------------------------------------------
// Structural identity: two schemas written the same way, whose $refs lead to schemas written the
// same way, accept the same payloads. Most of a new version is unchanged, and this proves such
// parts at once (it also keeps reflexive checks linear).

function sameSchema(ctx: Context, a: Node, b: Node): boolean {
  const visited = new Set<string>();
  const same = sameNode(ctx, a, b, visited);
  // A "true" leaned on the pairs still in progress, so it is settled only once the whole is true.
  if (same) for (const key of visited) ctx.same.set(key, true);
  return same;
}

function sameNode(ctx: Context, a: Node, b: Node, visited: Set<string>): boolean {
  if (a.schema === b.schema && a.root === b.root) return true;
  const key = `${conjunctKey(ctx, a)}=${conjunctKey(ctx, b)}`;
  const settled = ctx.same.get(key);
  if (settled !== undefined) return settled;
  if (visited.has(key)) return true;
  visited.add(key);
  const same = sameValue(ctx, a.schema, a.root, b.schema, b.root, visited);
  if (!same) ctx.same.set(key, false);
  return same;
}

function sameValue(
  ctx: Context,
  x: unknown,
  xRoot: unknown,
  y: unknown,
  yRoot: unknown,
  visited: Set<string>,
): boolean {
  if (Array.isArray(x)) {
    return (
      Array.isArray(y) && x.length === y.length && x.every((v, i) => sameValue(ctx, v, xRoot, y[i], yRoot, visited))
    );
  }
  if (!isObject(x) || !isObject(y)) return x === y;
  const keys = Object.keys(x);
  if (keys.length !== Object.keys(y).length) return false;
  return keys.every((key) => {
    if (!hasOwn(y, key) || key === "$dynamicRef" || key === "$recursiveRef") return false;
    const ref = x[key];
    if (key !== "$ref" || typeof ref !== "string") return sameValue(ctx, ref, xRoot, y[key], yRoot, visited);
    if (ref !== y[key]) return false;
    const left = resolveRef(xRoot, ref);
    const right = resolveRef(yRoot, ref);
    if (typeof left !== "object" || typeof right !== "object") return false;
    return sameNode(ctx, { ...left, root: xRoot }, { ...right, root: yRoot }, visited);
  });
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

function issue(pointer: string, rule: CompatibilityRule, message: string): Incompatibility {
  return { pointer, rule, message };
}

function invalid(pointer: string, keyword: string): Incompatibility {
  return issue(pointer, "invalid_schema", `${render(keyword)} has an invalid value`);
}

function at(node: Node, keyword: string): string {
  return `${node.pointer}/${keyword}`;
}

function child(node: Node, schema: unknown, suffix: string): Node {
  return { schema, root: node.root, pointer: `${node.pointer}${suffix}` };
}

function toConjuncts(nodes: readonly Node[]): Conjunct[] {
  return nodes.map((node) => ({ node, done: 0 }));
}

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isNonEmptyObject(value: unknown): boolean {
  return isObject(value) && Object.keys(value).length > 0;
}

function isSchema(value: unknown): boolean {
  return typeof value === "boolean" || isObject(value);
}

function hasOwn(object: JsonObject, key: string): boolean {
  return Object.hasOwn(object, key);
}

function isPositiveNumber(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value) && value > 0;
}

/** A schema that accepts everything: `true`, or an object with no constraining keyword. */
function isTrivial(schema: unknown): boolean {
  return schema === true || (isObject(schema) && !Object.keys(schema).some((k) => CONSTRAINING_KEYWORDS.has(k)));
}

function schemaMap(schema: JsonObject, keyword: string): JsonObject | undefined {
  const map = schema[keyword];
  if (map === undefined) return {};
  return isObject(map) && Object.values(map).every(isSchema) ? map : undefined;
}

function atomsOfType(type: unknown): Set<Atom> | undefined {
  const names = typeof type === "string" ? [type] : Array.isArray(type) ? type : undefined;
  if (!names) return undefined;
  const atoms = new Set<Atom>();
  for (const name of names) {
    const mapped = typeof name === "string" ? TYPE_ATOMS.get(name) : undefined;
    if (!mapped) return undefined;
    for (const atom of mapped) atoms.add(atom);
  }
  return atoms;
}

function atomOf(value: unknown): Atom | undefined {
  if (value === null) return "null";
  if (typeof value === "boolean") return "boolean";
  if (typeof value === "string") return "string";
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return undefined;
    return Number.isInteger(value) ? "integer" : "fraction";
  }
  if (Array.isArray(value)) return "array";
  return isObject(value) ? "object" : undefined;
}

// ajv compiles patterns with the "u" flag; an invalid one is treated as unknown.
function compilePattern(pattern: string): RegExp | undefined {
  try {
    return new RegExp(pattern, "u");
  } catch {
    return undefined;
  }
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((v, i) => deepEqual(v, b[i]));
  if (!isObject(a) || !isObject(b)) return false;
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => hasOwn(b, k) && deepEqual(a[k], b[k]));
}

function allUnique(values: readonly unknown[]): boolean {
  return values.every((v, i) => values.findIndex((w) => deepEqual(v, w)) === i);
}

function escapeToken(token: string): string {
  return token.replace(/~/g, "~0").replace(/\//g, "~1");
}

function render(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/** Resolves `#` or `#/json/pointer` inside `root`; anchors and other URIs are not resolved. */
function resolveRef(root: unknown, ref: string): { schema: unknown; pointer: string } | "remote" | "unresolvable" {
  if (!ref.startsWith("#")) return "remote";
  let fragment: string;
  try {
    fragment = decodeURIComponent(ref.slice(1));
  } catch {
    return "unresolvable";
  }
  if (fragment !== "" && !fragment.startsWith("/")) return "unresolvable";
  let current: unknown = root;
  for (const raw of fragment === "" ? [] : fragment.slice(1).split("/")) {
    const token = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (isObject(current) && hasOwn(current, token)) current = current[token];
    else if (Array.isArray(current) && /^(0|[1-9]\d*)$/.test(token) && Number(token) < current.length) {
      current = current[Number(token)];
    } else return "unresolvable";
  }
  return isSchema(current) ? { schema: current, pointer: fragment } : "unresolvable";
}

const SINGLE_SUBSCHEMAS = [
  "additionalProperties",
  "items",
  "contains",
  "propertyNames",
  "not",
  "if",
  "then",
  "else",
  "unevaluatedItems",
  "unevaluatedProperties",
  "additionalItems",
  "contentSchema",
];
const LIST_SUBSCHEMAS = ["prefixItems", "allOf", "anyOf", "oneOf", "items"];
const MAP_SUBSCHEMAS = ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"];

/** Visits every subschema in schema positions (never inside enum/const/default data), once each. */
function walkSchemas(
  schema: unknown,
  pointer: string,
  visit: (schema: JsonObject, pointer: string) => void,
  seen: WeakSet<object> = new WeakSet(),
): void {
  // In-memory schemas (TypeBox, say) share subschema objects; visiting each once keeps this linear.
  if (!isObject(schema) || seen.has(schema)) return;
  seen.add(schema);
  visit(schema, pointer);
  for (const keyword of SINGLE_SUBSCHEMAS) walkSchemas(schema[keyword], `${pointer}/${keyword}`, visit, seen);
  for (const keyword of LIST_SUBSCHEMAS) {
    const list = schema[keyword];
    if (!Array.isArray(list)) continue;
    for (const [i, item] of list.entries()) walkSchemas(item, `${pointer}/${keyword}/${i}`, visit, seen);
  }
  for (const keyword of MAP_SUBSCHEMAS) {
    const map = schema[keyword];
    if (!isObject(map)) continue;
    for (const [name, item] of Object.entries(map)) {
      walkSchemas(item, `${pointer}/${keyword}/${escapeToken(name)}`, visit, seen);
    }
  }
}
