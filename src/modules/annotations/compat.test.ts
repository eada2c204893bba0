// Table tests of the schema compatibility checker: one row per rule, in both directions.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { COMPATIBILITY_RULES, type CompatibilityRule, checkBackwardCompatible, findRemoteRefs } from "./compat.js";

type Expected = "compatible" | { rule: CompatibilityRule; pointer: string }[];

interface Case {
  name: string;
  old: unknown;
  new: unknown;
  expect: Expected;
}

const ok = "compatible" as const;
const breaks = (rule: CompatibilityRule, pointer: string): Expected => [{ rule, pointer }];

const tree = (valueType: string) => ({
  $defs: {
    node: {
      type: "object",
      properties: { value: { type: valueType }, children: { type: "array", items: { $ref: "#/$defs/node" } } },
      additionalProperties: false,
    },
  },
  $ref: "#/$defs/node",
});

const shape = (kind: string, extra: object = {}) => ({
  type: "object",
  properties: { kind: { const: kind }, ...extra },
  required: ["kind"],
});

const CASES: Case[] = [
  // Types and boolean schemas
  { name: "integer widened to number", old: { type: "integer" }, new: { type: "number" }, expect: ok },
  {
    name: "number narrowed to integer",
    old: { type: "number" },
    new: { type: "integer" },
    expect: breaks("type_narrowed", "/type"),
  },
  { name: "null added to a type", old: { type: "string" }, new: { type: ["string", "null"] }, expect: ok },
  {
    name: "null removed from a type",
    old: { type: ["string", "null"] },
    new: { type: "string" },
    expect: breaks("type_narrowed", "/type"),
  },
  { name: "type removed", old: { type: "string" }, new: {}, expect: ok },
  { name: "type added to an empty schema", old: {}, new: { type: "string" }, expect: breaks("type_narrowed", "/type") },
  { name: "true to false", old: true, new: false, expect: breaks("schema_became_false", "") },
  { name: "false to anything", old: false, new: { type: "string" }, expect: ok },
  { name: "anything to true", old: { type: "string", minLength: 3 }, new: true, expect: ok },
  { name: "annotations only count as true", old: true, new: { title: "T", description: "d", "x-ui": 1 }, expect: ok },
  { name: "enum values all of the new type", old: { enum: ["a", "b"] }, new: { type: "string" }, expect: ok },
  {
    name: "enum value outside the new type",
    old: { enum: ["a", 1] },
    new: { type: "string" },
    expect: breaks("type_narrowed", "/type"),
  },

  // enum and const
  { name: "enum extended", old: { enum: ["a", "b"] }, new: { enum: ["a", "b", "c"] }, expect: ok },
  {
    name: "enum value removed",
    old: { enum: ["a", "b"] },
    new: { enum: ["a"] },
    expect: breaks("enum_value_removed", "/enum"),
  },
  {
    name: "enum added",
    old: { type: "string" },
    new: { type: "string", enum: ["a"] },
    expect: breaks("enum_added", "/enum"),
  },
  { name: "const widened to enum", old: { const: "a" }, new: { enum: ["a", "b"] }, expect: ok },
  { name: "const changed", old: { const: "a" }, new: { const: "b" }, expect: breaks("const_changed", "/const") },
  { name: "const added", old: { type: "string" }, new: { const: "a" }, expect: breaks("const_added", "/const") },
  {
    name: "enum narrowed to const",
    old: { enum: ["a", "b"] },
    new: { const: "a" },
    expect: breaks("const_changed", "/const"),
  },
  {
    name: "boolean is the enum [true, false]",
    old: { type: "boolean" },
    new: { enum: [true, false, null] },
    expect: ok,
  },
  {
    name: "enum values the old schema rejected anyway",
    old: { type: "integer", enum: [1, 2, 300], maximum: 10 },
    new: { enum: [1, 2] },
    expect: ok,
  },
  {
    name: "deep-equal object enum values",
    old: { enum: [{ a: [1, 2] }] },
    new: { enum: [{ a: [1, 2] }, 3] },
    expect: ok,
  },

  // Numeric bounds
  { name: "maximum increased", old: { type: "number", maximum: 5 }, new: { type: "number", maximum: 10 }, expect: ok },
  {
    name: "maximum decreased",
    old: { type: "number", maximum: 10 },
    new: { type: "number", maximum: 5 },
    expect: breaks("maximum_decreased", "/maximum"),
  },
  { name: "minimum decreased", old: { minimum: 5 }, new: { minimum: 0 }, expect: ok },
  {
    name: "minimum increased",
    old: { minimum: 0 },
    new: { minimum: 5 },
    expect: breaks("minimum_increased", "/minimum"),
  },
  {
    name: "minimum added",
    old: { type: "number" },
    new: { type: "number", minimum: 0 },
    expect: breaks("minimum_increased", "/minimum"),
  },
  { name: "minimum removed", old: { type: "number", minimum: 0 }, new: { type: "number" }, expect: ok },
  {
    name: "inclusive minimum made exclusive",
    old: { minimum: 0 },
    new: { exclusiveMinimum: 0 },
    expect: breaks("exclusive_minimum_increased", "/exclusiveMinimum"),
  },
  { name: "exclusive minimum made inclusive", old: { exclusiveMinimum: 0 }, new: { minimum: 0 }, expect: ok },
  {
    name: "exclusive maximum over integers",
    old: { type: "integer", exclusiveMaximum: 5 },
    new: { type: "integer", maximum: 4 },
    expect: ok,
  },
  {
    name: "exclusive maximum over numbers",
    old: { type: "number", exclusiveMaximum: 5 },
    new: { maximum: 4 },
    expect: breaks("maximum_decreased", "/maximum"),
  },
  {
    name: "numeric bound on a string schema",
    old: { type: "string" },
    new: { type: "string", minimum: 5 },
    expect: ok,
  },
  { name: "multipleOf relaxed to a divisor", old: { multipleOf: 4 }, new: { multipleOf: 2 }, expect: ok },
  {
    name: "multipleOf tightened",
    old: { multipleOf: 2 },
    new: { multipleOf: 4 },
    expect: breaks("multiple_of_changed", "/multipleOf"),
  },
  {
    name: "integers are multiples of 1",
    old: { type: "integer" },
    new: { type: "integer", multipleOf: 1 },
    expect: ok,
  },
  {
    name: "enum numbers within a new maximum",
    old: { enum: [1, 2, 3] },
    new: { enum: [1, 2, 3], maximum: 3 },
    expect: ok,
  },
  {
    name: "enum number beyond a new maximum",
    old: { enum: [1, 5] },
    new: { maximum: 3 },
    expect: breaks("maximum_decreased", "/maximum"),
  },

  // Strings
  { name: "maxLength increased", old: { maxLength: 5 }, new: { maxLength: 8 }, expect: ok },
  {
    name: "maxLength decreased",
    old: { maxLength: 8 },
    new: { maxLength: 5 },
    expect: breaks("max_length_decreased", "/maxLength"),
  },
  {
    name: "minLength increased",
    old: { minLength: 1 },
    new: { minLength: 2 },
    expect: breaks("min_length_increased", "/minLength"),
  },
  { name: "minLength removed", old: { type: "string", minLength: 2 }, new: { type: "string" }, expect: ok },
  { name: "pattern removed", old: { type: "string", pattern: "^a" }, new: { type: "string" }, expect: ok },
  {
    name: "pattern added",
    old: { type: "string" },
    new: { type: "string", pattern: "^a" },
    expect: breaks("pattern_added", "/pattern"),
  },
  {
    name: "pattern changed",
    old: { pattern: "^a" },
    new: { pattern: "^[ab]" },
    expect: breaks("pattern_changed", "/pattern"),
  },
  { name: "pattern unchanged", old: { pattern: "^a", maxLength: 3 }, new: { pattern: "^a" }, expect: ok },
  {
    name: "enum strings match a new pattern",
    old: { enum: ["ab", "ac"] },
    new: { type: "string", pattern: "^a" },
    expect: ok,
  },
  { name: "format removed", old: { type: "string", format: "email" }, new: { type: "string" }, expect: ok },
  {
    name: "format added",
    old: { type: "string" },
    new: { type: "string", format: "email" },
    expect: breaks("format_added", "/format"),
  },
  {
    name: "format changed",
    old: { format: "email" },
    new: { format: "uri" },
    expect: breaks("format_changed", "/format"),
  },
  { name: "length counts code points", old: { const: "😀😀" }, new: { maxLength: 2 }, expect: ok },

  // Arrays
  { name: "items widened", old: { items: { type: "integer" } }, new: { items: { type: "number" } }, expect: ok },
  {
    name: "items narrowed",
    old: { items: { type: "number" } },
    new: { items: { type: "integer" } },
    expect: breaks("type_narrowed", "/items/type"),
  },
  {
    name: "maxItems decreased",
    old: { maxItems: 5 },
    new: { maxItems: 3 },
    expect: breaks("max_items_decreased", "/maxItems"),
  },
  {
    name: "minItems increased",
    old: { minItems: 0 },
    new: { minItems: 1 },
    expect: breaks("min_items_increased", "/minItems"),
  },
  {
    name: "uniqueItems added",
    old: { type: "array" },
    new: { type: "array", uniqueItems: true },
    expect: breaks("unique_items_added", "/uniqueItems"),
  },
  { name: "uniqueItems removed", old: { uniqueItems: true }, new: { uniqueItems: false }, expect: ok },
  {
    name: "arrays of at most one item are unique",
    old: { maxItems: 1 },
    new: { maxItems: 1, uniqueItems: true },
    expect: ok,
  },
  {
    name: "prefixItems added over open items",
    old: { type: "array" },
    new: { type: "array", prefixItems: [{ type: "string" }] },
    expect: breaks("type_narrowed", "/prefixItems/0/type"),
  },
  {
    name: "closed tuple extended",
    old: { prefixItems: [{ type: "string" }], items: false },
    new: { prefixItems: [{ type: "string" }, { type: "integer" }], items: false },
    expect: ok,
  },
  { name: "closed tuple opened", old: { prefixItems: [{}], items: false }, new: { prefixItems: [{}] }, expect: ok },
  {
    name: "open tuple closed",
    old: { prefixItems: [{}] },
    new: { prefixItems: [{}], items: false },
    expect: breaks("schema_became_false", "/items"),
  },
  {
    name: "closed tuple caps the length",
    old: { prefixItems: [{}, {}], items: false },
    new: { maxItems: 2 },
    expect: ok,
  },
  {
    name: "old tuple positions checked against new items",
    old: { prefixItems: [{ type: "string" }], items: { type: "integer" } },
    new: { items: { type: ["string", "integer"] } },
    expect: ok,
  },
  {
    name: "draft-07 tuple items",
    old: { type: "array" },
    new: { type: "array", items: [{ type: "string" }] },
    expect: breaks("unsupported_keyword", "/items"),
  },

  // Objects: content models
  {
    name: "typed property added to an open object",
    old: { type: "object", properties: { a: { type: "string" } } },
    new: { type: "object", properties: { a: { type: "string" }, b: { type: "integer" } } },
    expect: breaks("property_added_to_open_content_model", "/properties/b"),
  },
  {
    name: "typed property added to a closed object",
    old: { type: "object", properties: { a: { type: "string" } }, additionalProperties: false },
    new: { type: "object", properties: { a: { type: "string" }, b: { type: "integer" } }, additionalProperties: false },
    expect: ok,
  },
  {
    name: "untyped property added to an open object",
    old: { type: "object" },
    new: { type: "object", properties: { b: { description: "anything" } } },
    expect: ok,
  },
  { name: "property removed from an open object", old: { properties: { a: { type: "string" } } }, new: {}, expect: ok },
  {
    name: "property removed from a closed object",
    old: { properties: { a: { type: "string" } }, additionalProperties: false },
    new: { additionalProperties: false },
    expect: breaks("property_removed_from_closed_content_model", "/additionalProperties"),
  },
  {
    name: "open object closed",
    old: { type: "object", properties: { a: {} } },
    new: { type: "object", properties: { a: {} }, additionalProperties: false },
    expect: breaks("additional_properties_narrowed", "/additionalProperties"),
  },
  {
    name: "closed object opened",
    old: { additionalProperties: false },
    new: { additionalProperties: true },
    expect: ok,
  },
  {
    name: "additionalProperties widened",
    old: { additionalProperties: { type: "integer" } },
    new: { additionalProperties: { type: "number" } },
    expect: ok,
  },
  {
    name: "additionalProperties narrowed",
    old: { additionalProperties: { type: "number" } },
    new: { additionalProperties: { type: "integer" } },
    expect: breaks("additional_properties_narrowed", "/additionalProperties"),
  },
  {
    name: "new property within the old additionalProperties",
    old: { additionalProperties: { type: "integer" } },
    new: { properties: { a: { type: "number" } }, additionalProperties: { type: "integer" } },
    expect: ok,
  },
  {
    name: "new property narrower than the old additionalProperties",
    old: { additionalProperties: { type: "integer" } },
    new: { properties: { a: { type: "string" } } },
    expect: breaks("type_narrowed", "/properties/a/type"),
  },
  {
    name: "patternProperties added to an open object",
    old: { type: "object" },
    new: { type: "object", patternProperties: { "^x": { type: "string" } } },
    expect: breaks("pattern_property_added", "/patternProperties/^x"),
  },
  {
    name: "patternProperties added to a closed object",
    old: { additionalProperties: false },
    new: { patternProperties: { "^x": { type: "string" } }, additionalProperties: false },
    expect: ok,
  },
  {
    name: "patternProperties widened",
    old: { patternProperties: { "^x": { type: "integer" } } },
    new: { patternProperties: { "^x": { type: "number" } } },
    expect: ok,
  },
  {
    name: "new pattern covers an old named property",
    old: { properties: { x1: { type: "string" } }, additionalProperties: false },
    new: { properties: { x1: {} }, patternProperties: { "^x": { type: "integer" } }, additionalProperties: false },
    expect: breaks("type_narrowed", "/patternProperties/^x/type"),
  },
  {
    name: "named property moved under a pattern",
    old: { properties: { a: { type: "string" } }, additionalProperties: false },
    new: { patternProperties: { "^a$": { type: "string" } }, additionalProperties: false },
    expect: ok,
  },

  // Objects: required and counts
  {
    name: "required added without default",
    old: { properties: { a: {}, b: { type: "string" } }, required: ["a"] },
    new: { properties: { a: {}, b: { type: "string" } }, required: ["a", "b"] },
    expect: breaks("required_added_without_default", "/required/1"),
  },
  {
    name: "required added with a default (Confluent's rule)",
    old: { properties: { a: { type: "string" } } },
    new: { properties: { a: { type: "string", default: "x" } }, required: ["a"] },
    expect: ok,
  },
  { name: "required removed", old: { required: ["a", "b"] }, new: { required: ["a"] }, expect: ok },
  { name: "required names imply minProperties", old: { required: ["a", "b"] }, new: { minProperties: 2 }, expect: ok },
  {
    name: "minProperties above the required names",
    old: { required: ["a"] },
    new: { minProperties: 2 },
    expect: breaks("min_properties_increased", "/minProperties"),
  },
  {
    name: "maxProperties decreased",
    old: { maxProperties: 3 },
    new: { maxProperties: 2 },
    expect: breaks("max_properties_decreased", "/maxProperties"),
  },
  {
    name: "minProperties increased",
    old: { type: "object" },
    new: { type: "object", minProperties: 1 },
    expect: breaks("min_properties_increased", "/minProperties"),
  },
  {
    name: "closed object caps the count",
    old: { properties: { a: {}, b: {} }, additionalProperties: false },
    new: { maxProperties: 2 },
    expect: ok,
  },
  {
    name: "closed object with patterns does not cap the count",
    old: { properties: { a: {} }, patternProperties: { "^x": {} }, additionalProperties: false },
    new: { maxProperties: 1 },
    expect: breaks("max_properties_decreased", "/maxProperties"),
  },
  {
    name: "dependentRequired unchanged",
    old: { dependentRequired: { a: ["b"] } },
    new: { dependentRequired: { a: ["b"] } },
    expect: ok,
  },
  {
    name: "dependentRequired added",
    old: { type: "object" },
    new: { type: "object", dependentRequired: { a: ["b"] } },
    expect: breaks("cannot_prove_compatible", "/dependentRequired"),
  },
  {
    name: "contains changed",
    old: { contains: { type: "string" } },
    new: { contains: { type: "string", minLength: 1 } },
    expect: breaks("cannot_prove_compatible", "/contains"),
  },
  {
    name: "propertyNames on a string schema",
    old: { type: "string" },
    new: { type: "string", propertyNames: { maxLength: 1 } },
    expect: ok,
  },

  // Combinators
  {
    name: "anyOf extended",
    old: { anyOf: [{ type: "string" }, { type: "integer" }] },
    new: { anyOf: [{ type: "string" }, { type: "integer" }, { type: "null" }] },
    expect: ok,
  },
  {
    name: "anyOf branch removed",
    old: { anyOf: [{ type: "string" }, { type: "integer" }] },
    new: { anyOf: [{ type: "string" }] },
    expect: breaks("any_of_branch_removed", "/anyOf"),
  },
  {
    name: "anyOf added that covers nothing old",
    old: {},
    new: { anyOf: [{ type: "string" }, { type: "integer" }] },
    expect: breaks("any_of_added", "/anyOf"),
  },
  {
    name: "schema wrapped in anyOf",
    old: { type: "string" },
    new: { anyOf: [{ type: "string" }, { type: "null" }] },
    expect: ok,
  },
  {
    name: "oneOf extended with a disjoint type",
    old: { oneOf: [{ type: "string" }, { type: "integer" }] },
    new: { oneOf: [{ type: "string" }, { type: "integer" }, { type: "null" }] },
    expect: ok,
  },
  {
    name: "oneOf extended with an overlapping branch",
    old: { oneOf: [{ type: "string" }, { type: "integer" }] },
    new: { oneOf: [{ type: "string" }, { type: "integer" }, { type: "number" }] },
    expect: breaks("cannot_prove_compatible", "/oneOf/2"),
  },
  {
    name: "discriminated oneOf extended",
    old: { oneOf: [shape("a", { x: { type: "string" } }), shape("b")] },
    new: { oneOf: [shape("a", { x: { type: "string" } }), shape("b"), shape("c", { y: { type: "integer" } })] },
    expect: ok,
  },
  {
    name: "oneOf extended with an object that overlaps the discriminated ones",
    old: { oneOf: [shape("a"), shape("b")] },
    new: { oneOf: [shape("a"), shape("b"), { type: "object", properties: { x: {} } }] },
    expect: [
      { rule: "cannot_prove_compatible", pointer: "/oneOf/2" }, // overlaps the payloads of branch 0
      { rule: "cannot_prove_compatible", pointer: "/oneOf/2" }, // and those of branch 1
    ],
  },
  {
    name: "discriminated oneOf branch removed",
    old: { oneOf: [shape("a"), shape("b")] },
    new: { oneOf: [shape("a")] },
    expect: breaks("one_of_branch_removed", "/oneOf"),
  },
  {
    name: "union type split into oneOf",
    old: { type: ["string", "null"] },
    new: { oneOf: [{ type: "string" }, { type: "null" }] },
    expect: ok,
  },
  {
    name: "anyOf merged into a union type",
    old: { anyOf: [{ type: "string" }, { type: "integer" }] },
    new: { type: ["string", "integer"] },
    expect: ok,
  },
  {
    name: "oneOf relaxed to anyOf",
    old: { oneOf: [{ type: "number" }, { type: "integer" }] },
    new: { anyOf: [{ type: "number" }, { type: "integer" }] },
    expect: ok,
  },
  {
    name: "anyOf tightened to an overlapping oneOf",
    old: { anyOf: [{ type: "number" }, { type: "integer" }] },
    new: { oneOf: [{ type: "number" }, { type: "integer" }] },
    expect: breaks("cannot_prove_compatible", "/oneOf/1"),
  },
  {
    name: "allOf in the new version",
    old: { type: "integer", minimum: 0 },
    new: { allOf: [{ type: "integer" }, { minimum: 0 }] },
    expect: ok,
  },
  {
    name: "allOf adds a bound",
    old: { type: "integer" },
    new: { allOf: [{ type: "integer" }, { minimum: 0 }] },
    expect: breaks("minimum_increased", "/allOf/1/minimum"),
  },
  {
    name: "allOf in the old version",
    old: { allOf: [{ type: "integer" }, { minimum: 0 }] },
    new: { type: "integer", minimum: 0 },
    expect: ok,
  },
  {
    name: "not unchanged",
    old: { type: "integer", not: { const: 3 } },
    new: { type: "integer", not: { const: 3 } },
    expect: ok,
  },
  {
    name: "not added",
    old: { type: "integer" },
    new: { type: "integer", not: { const: 3 } },
    expect: breaks("cannot_prove_compatible", "/not"),
  },
  { name: "not of a disjoint type", old: { type: "string" }, new: { not: { type: "integer" } }, expect: ok },
  { name: "not relaxed", old: { not: { type: ["string", "integer"] } }, new: { not: { type: "string" } }, expect: ok },

  // $ref
  {
    name: "$ref targets compared",
    old: { $defs: { p: { type: "integer" } }, properties: { a: { $ref: "#/$defs/p" } } },
    new: { $defs: { p: { type: "number" } }, properties: { a: { $ref: "#/$defs/p" } } },
    expect: ok,
  },
  {
    name: "$ref target narrowed",
    old: { $defs: { p: { type: "number" } }, properties: { a: { $ref: "#/$defs/p" } } },
    new: { $defs: { p: { type: "integer" } }, properties: { a: { $ref: "#/$defs/p" } } },
    expect: breaks("type_narrowed", "/$defs/p/type"),
  },
  {
    name: "definitions and escaped pointers",
    old: { definitions: { "a/b": { type: "integer" } }, $ref: "#/definitions/a~1b" },
    new: { definitions: { "c d": { type: "number" } }, $ref: "#/definitions/c%20d" },
    expect: ok,
  },
  { name: "recursive schema unchanged", old: tree("string"), new: tree("string"), expect: ok },
  {
    name: "recursive schema narrowed",
    old: tree("number"),
    new: tree("integer"),
    expect: breaks("type_narrowed", "/$defs/node/properties/value/type"),
  },
  {
    name: "$ref with a sibling bound",
    old: { $defs: { n: { type: "integer" } }, $ref: "#/$defs/n" },
    new: { $defs: { n: { type: "integer" } }, $ref: "#/$defs/n", minimum: 0 },
    expect: breaks("minimum_increased", "/minimum"),
  },
  { name: "remote $ref", old: {}, new: { $ref: "https://example.com/s.json" }, expect: breaks("remote_ref", "/$ref") },
  { name: "remote $ref in the old version", old: { $ref: "other.json#/x" }, new: {}, expect: breaks("remote_ref", "") },
  { name: "dangling $ref", old: {}, new: { $ref: "#/$defs/missing" }, expect: breaks("unresolvable_ref", "/$ref") },
  { name: "anchor $ref", old: {}, new: { $ref: "#thing" }, expect: breaks("unresolvable_ref", "/$ref") },
  {
    name: "$ref cycle that consumes nothing",
    old: { type: "string" },
    new: { $defs: { a: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" },
    expect: breaks("cannot_prove_compatible", "/$defs/a"),
  },

  // Refusals and annotations
  {
    name: "unevaluatedProperties in the new version",
    old: { type: "object" },
    new: { type: "object", unevaluatedProperties: false },
    expect: breaks("unsupported_keyword", "/unevaluatedProperties"),
  },
  {
    name: "unevaluatedProperties dropped",
    old: { type: "object", unevaluatedProperties: false },
    new: { type: "object" },
    expect: ok,
  },
  {
    name: "draft-07 dependencies",
    old: {},
    new: { dependencies: { a: ["b"] } },
    expect: breaks("unsupported_keyword", "/dependencies"),
  },
  {
    name: "another dialect",
    old: {},
    new: { $schema: "http://json-schema.org/draft-07/schema#" },
    expect: breaks("unsupported_dialect", "/$schema"),
  },
  {
    name: "the 2020-12 dialect",
    old: { $schema: "https://json-schema.org/draft/2020-12/schema" },
    new: { $schema: "https://json-schema.org/draft/2020-12/schema" },
    expect: ok,
  },
  {
    name: "embedded $id",
    old: {},
    new: { $defs: { a: { $id: "https://example.com/a" } } },
    expect: breaks("unsupported_keyword", "/$defs/a/$id"),
  },
  { name: "root $id", old: { $id: "https://example.com/s" }, new: { $id: "https://example.com/s2" }, expect: ok },
  { name: "not a schema", old: {}, new: 42, expect: breaks("invalid_schema", "") },
  { name: "keyword with a wrong value", old: {}, new: { minimum: "0" }, expect: breaks("invalid_schema", "/minimum") },
];

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}

function pointerResolves(root: unknown, pointer: string): boolean {
  let current = root;
  for (const raw of pointer === "" ? [] : pointer.slice(1).split("/")) {
    const token = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (typeof current !== "object" || current === null || !Object.hasOwn(current, token)) return false;
    current = (current as Record<string, unknown>)[token];
  }
  return true;
}

describe("checkBackwardCompatible", () => {
  it("has at least 60 table cases with distinct names", () => {
    assert.ok(CASES.length >= 60, `only ${CASES.length} cases`);
    assert.equal(new Set(CASES.map((c) => c.name)).size, CASES.length);
  });

  for (const c of CASES) {
    it(c.name, () => {
      const result = checkBackwardCompatible(deepFreeze(c.old), deepFreeze(c.new));
      const found = result.incompatibilities.map(({ rule, pointer }) => ({ rule, pointer }));
      assert.equal(result.compatible, result.incompatibilities.length === 0);
      if (c.expect === "compatible") {
        assert.deepEqual(result.incompatibilities, []);
        return;
      }
      assert.equal(result.compatible, false);
      assert.deepEqual(found, c.expect, JSON.stringify(result.incompatibilities));
      for (const incompatibility of result.incompatibilities) {
        assert.ok(
          pointerResolves(c.new, incompatibility.pointer),
          `${incompatibility.pointer} is not in the new schema`,
        );
        assert.ok(incompatibility.message.length > 0, "empty message");
      }
    });
  }

  it("is reflexive on every schema of the table", () => {
    for (const c of CASES) {
      for (const schema of [c.old, c.new]) {
        const result = checkBackwardCompatible(schema, schema);
        const refusals = new Set<string>([
          "unsupported_keyword",
          "unsupported_dialect",
          "remote_ref",
          "unresolvable_ref",
          "invalid_schema",
          "cannot_prove_compatible",
        ]);
        const unexpected = result.incompatibilities.filter((i) => !refusals.has(i.rule));
        assert.deepEqual(unexpected, [], `${c.name}: ${JSON.stringify(schema)}`);
      }
    }
  });

  // 2^30 combinations of old branches to try; the checker must stop (a step budget, not a
  // clock) and refuse. A hang ends at the test's timeout, however slow the machine.
  it("gives up on schemas too complex to compare instead of hanging", { timeout: 300_000 }, () => {
    const choices = (last: number) =>
      Array.from({ length: 30 }, (_, i) => ({ anyOf: [{ type: "integer" }, { minimum: i === 29 ? last : i }] }));
    const changed = checkBackwardCompatible({ allOf: choices(29) }, { allOf: choices(30) });
    assert.equal(changed.compatible, false);
    const tooComplex = changed.incompatibilities.filter((i) => i.message === "the schemas are too complex to compare");
    assert.ok(tooComplex.length > 0 && tooComplex.every((i) => i.rule === "cannot_prove_compatible"), "no refusal");
    // An unchanged copy is proved whole, without trying the combinations.
    const same = checkBackwardCompatible({ allOf: choices(29) }, { allOf: choices(29) });
    assert.deepEqual(same.incompatibilities, []);
  });

  it("reports several incompatibilities at once", () => {
    const result = checkBackwardCompatible(
      { type: "object", properties: { age: { type: "integer", maximum: 150 }, name: { type: "string" } } },
      {
        type: "object",
        properties: { age: { type: "integer", maximum: 120 }, name: { type: "string", maxLength: 10 } },
        required: ["name"],
      },
    );
    assert.deepEqual(
      result.incompatibilities.map((i) => [i.pointer, i.rule]),
      [
        ["/required/0", "required_added_without_default"],
        ["/properties/age/maximum", "maximum_decreased"],
        ["/properties/name/maxLength", "max_length_decreased"],
      ],
    );
  });
});

describe("COMPATIBILITY_RULES", () => {
  it("lists unique snake_case ids, including every rule the table expects", () => {
    assert.equal(new Set(COMPATIBILITY_RULES).size, COMPATIBILITY_RULES.length);
    for (const rule of COMPATIBILITY_RULES) assert.match(rule, /^[a-z]+(_[a-z]+)*$/);
    for (const c of CASES) {
      if (c.expect !== "compatible") for (const e of c.expect) assert.ok(COMPATIBILITY_RULES.includes(e.rule), e.rule);
    }
  });
});

describe("findRemoteRefs", () => {
  it("finds $refs outside the document in every schema position, once each", () => {
    const schema = {
      $ref: "#/$defs/a",
      $defs: { a: { $ref: "https://example.com/a.json" } },
      properties: { p: { items: { $ref: "b.json#/x" } }, q: { $ref: "https://example.com/a.json" } },
      anyOf: [{ not: { $dynamicRef: "c.json" } }],
      enum: [{ $ref: "data-not-schema.json" }],
      default: { $ref: "also-data.json" },
    };
    assert.deepEqual(findRemoteRefs(schema).sort(), ["b.json#/x", "c.json", "https://example.com/a.json"]);
  });

  it("returns nothing for local refs and non-schemas", () => {
    assert.deepEqual(findRemoteRefs({ $ref: "#", properties: { a: { $ref: "#/$defs/x" } } }), []);
    assert.deepEqual(findRemoteRefs(true), []);
    assert.deepEqual(findRemoteRefs("not a schema"), []);
  });
});
