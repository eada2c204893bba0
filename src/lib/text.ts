// What text Warren accepts from a client (docs/api-decisions.md "Text Warren accepts"): a
// string the store can hold. PostgreSQL text cannot hold U+0000, and jsonb refuses `\u0000`
// and lone surrogates, so such text used to fail deep inside a write as a 500; and a walk
// over a document nested without bound (a JSON Schema's compatibility check, a validator)
// overflows the stack. Checked once at the edge, and again on JSON carried inside strings.

/** Deepest nesting of objects and arrays accepted in a body, a query or an embedded JSON document. */
export const MAX_JSON_DEPTH = 64;

// A high surrogate not followed by a low one, or a low one not preceded by a high one.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export interface TextProblem {
  /** Where: `body.metadata.key`, `query.project_id`, `body.cmd.0` (the validator's dotted style). */
  path: string;
  problem: string;
}

/** Why `text` is not acceptable, or null. */
export function textProblem(text: string): string | null {
  if (text.includes("\u0000")) return "must not contain the NUL character (U+0000)";
  const lone = LONE_SURROGATE.exec(text);
  if (lone) {
    const unit = (lone[0].codePointAt(0) ?? 0).toString(16).toUpperCase();
    return `must not contain an unpaired surrogate (U+${unit}); send well-formed UTF-16/UTF-8 text`;
  }
  return null;
}

/** A key as a path segment: plain keys as they are, others quoted and shortened. */
function segment(key: string | number): string {
  if (typeof key === "number" || /^[A-Za-z0-9_-]{1,64}$/.test(key)) return `.${key}`;
  const shown = key.length > 40 ? `${key.slice(0, 40)}...` : key;
  // Only keys that passed the check get here; JSON.stringify escapes a pair the cut split.
  return `[${JSON.stringify(shown)}]`;
}

/**
 * The first string (value or object key) in `value` that Warren does not accept, or the
 * first place nested deeper than `maxDepth`; null when all is well. Iterative, so a deep
 * document cannot overflow the stack of the check itself.
 */
export function findTextProblem(value: unknown, root: string, maxDepth = MAX_JSON_DEPTH): TextProblem | null {
  const stack: { value: unknown; path: string; depth: number }[] = [{ value, path: root, depth: 0 }];
  while (stack.length > 0) {
    const item = stack.pop() as { value: unknown; path: string; depth: number };
    if (typeof item.value === "string") {
      const problem = textProblem(item.value);
      if (problem) return { path: item.path, problem };
      continue;
    }
    if (item.value === null || typeof item.value !== "object") continue;
    const depth = item.depth + 1;
    if (depth > maxDepth)
      return { path: item.path, problem: `must not nest objects and arrays more than ${maxDepth} deep` };
    if (Array.isArray(item.value)) {
      for (let i = item.value.length - 1; i >= 0; i--) {
        stack.push({ value: item.value[i], path: `${item.path}${segment(i)}`, depth });
      }
      continue;
    }
    const entries = Object.entries(item.value as Record<string, unknown>);
    for (let i = entries.length - 1; i >= 0; i--) {
      const [key, child] = entries[i] as [string, unknown];
      const keyProblem = textProblem(key);
      if (keyProblem) return { path: item.path, problem: `a key ${keyProblem}` };
      stack.push({ value: child, path: `${item.path}${segment(key)}`, depth });
    }
  }
  return null;
}
