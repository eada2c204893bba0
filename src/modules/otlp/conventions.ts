// The typed columns of a span, read from its attributes (then its resource's) by the GenAI
// semantic conventions (gen_ai.*) and OpenInference (openinference.*, llm.*, input/output.value).
// Each column takes the first of its sources that holds a value of the right type; the lists
// below are the documented precedence (docs/api-decisions.md "OpenTelemetry ingest"). Nothing
// is removed from the attributes: a value read into a column stays there too, and an
// attribute no list names is kept as it came.
import type { Attributes, AttrValue } from "./model.js";

export interface SpanConventions {
  spanType: string | null;
  operation: string | null;
  system: string | null;
  model: string | null;
  inputTokens: number | null;
  outputTokens: number | null;
  totalTokens: number | null;
  costUsd: number | null;
  input: string | null;
  output: string | null;
  userId: string | null;
  sessionId: string | null;
  tags: string[] | null;
}

export const PRECEDENCE = {
  operation: ["gen_ai.operation.name"],
  system: ["gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"],
  model: ["gen_ai.response.model", "gen_ai.request.model", "llm.model_name"],
  inputTokens: ["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"],
  outputTokens: ["gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion"],
  totalTokens: ["gen_ai.usage.total_tokens", "llm.usage.total_tokens", "llm.token_count.total"],
  costUsd: ["gen_ai.usage.cost", "llm.cost.total"],
  input: ["gen_ai.input.messages", "gen_ai.prompt", "input.value"],
  output: ["gen_ai.output.messages", "gen_ai.completion", "output.value"],
  userId: ["user.id", "enduser.id", "langfuse.user.id"],
  sessionId: ["session.id", "gen_ai.conversation.id", "langfuse.session.id"],
  tags: ["tag.tags", "langfuse.trace.tags", "tags"],
} as const;

/** gen_ai.operation.name values and the OpenInference span kind each stands for. */
const OPERATION_TYPES: Record<string, string> = {
  chat: "LLM",
  text_completion: "LLM",
  generate_content: "LLM",
  embeddings: "EMBEDDING",
  execute_tool: "TOOL",
  invoke_agent: "AGENT",
  create_agent: "AGENT",
};

/** Longest typed text column value (the attribute keeps the whole value). */
export const MAX_TYPED_TEXT = 256;

function first<T>(names: readonly string[], sources: Attributes[], read: (v: AttrValue) => T | null): T | null {
  for (const source of sources) {
    for (const name of names) {
      if (!Object.hasOwn(source, name)) continue;
      const value = read(source[name] as AttrValue);
      if (value !== null) return value;
    }
  }
  return null;
}

const text = (v: AttrValue): string | null => (typeof v === "string" && v !== "" ? v.slice(0, MAX_TYPED_TEXT) : null);

/** Structured messages are stored as their JSON text; text as it is. */
const content = (v: AttrValue): string | null =>
  typeof v === "string" ? v : v !== null && typeof v === "object" ? JSON.stringify(v) : null;

/** A non-negative integer count (some instrumentations send digits as a string). */
const count = (v: AttrValue): number | null => {
  const n = typeof v === "string" && /^[0-9]{1,15}$/.test(v) ? Number(v) : v;
  return typeof n === "number" && Number.isSafeInteger(n) && n >= 0 ? n : null;
};

const amount = (v: AttrValue): number | null => {
  const n = typeof v === "string" && /^[0-9]+(\.[0-9]+)?$/.test(v) ? Number(v) : v;
  return typeof n === "number" && Number.isFinite(n) && n >= 0 ? n : null;
};

const stringList = (v: AttrValue): string[] | null => {
  if (typeof v === "string" && v !== "") return [v.slice(0, MAX_TYPED_TEXT)];
  if (!Array.isArray(v)) return null;
  const list = v.filter((x): x is string => typeof x === "string").map((x) => x.slice(0, MAX_TYPED_TEXT));
  return list.length > 0 ? list.slice(0, 64) : null;
};

export function conventionsOf(span: Attributes, resource: Attributes): SpanConventions {
  const both = [span, resource];
  const only = [span];
  const operation = first(PRECEDENCE.operation, only, text);
  const inputTokens = first(PRECEDENCE.inputTokens, only, count);
  const outputTokens = first(PRECEDENCE.outputTokens, only, count);
  const openInference = first(["openinference.span.kind"], only, text);
  return {
    spanType: openInference ? openInference.toUpperCase() : operation ? (OPERATION_TYPES[operation] ?? null) : null,
    operation,
    system: first(PRECEDENCE.system, only, text),
    model: first(PRECEDENCE.model, only, text),
    inputTokens,
    outputTokens,
    totalTokens:
      first(PRECEDENCE.totalTokens, only, count) ??
      (inputTokens !== null && outputTokens !== null ? inputTokens + outputTokens : null),
    costUsd: first(PRECEDENCE.costUsd, only, amount),
    input: first(PRECEDENCE.input, only, content),
    output: first(PRECEDENCE.output, only, content),
    userId: first(PRECEDENCE.userId, both, text),
    sessionId: first(PRECEDENCE.sessionId, both, text),
    tags: first(PRECEDENCE.tags, both, stringList),
  };
}
