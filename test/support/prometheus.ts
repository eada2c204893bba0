// A strict reader of the Prometheus text exposition format (0.0.4), enough to check what
// GET /metrics serves: every line is a comment (# HELP / # TYPE) or a sample
// `name{label="value",...} value`, and every sample belongs to a family with a TYPE.
import assert from "node:assert/strict";

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  /** Family name -> type (counter, gauge, histogram, summary, untyped). */
  types: Map<string, string>;
  help: Map<string, string>;
  samples: Sample[];
}

const NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*";
const SAMPLE = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (\\S+)(?: -?\\d+)?$`);
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)/y;

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  LABEL.lastIndex = 0;
  while (LABEL.lastIndex < text.length) {
    const at = LABEL.lastIndex;
    const match = LABEL.exec(text);
    assert.ok(match && match.index === at, `malformed labels in: ${line}`);
    labels[match[1] as string] = (match[2] as string).replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
  }
  return labels;
}

function parseValue(raw: string, line: string): number {
  // Prometheus parses these with Go's ParseFloat, which ignores their case (prom-client writes `Nan`).
  const special = raw.toLowerCase();
  if (special === "+inf" || special === "inf") return Number.POSITIVE_INFINITY;
  if (special === "-inf") return Number.NEGATIVE_INFINITY;
  if (special === "nan") return Number.NaN;
  const value = Number(raw);
  assert.ok(!Number.isNaN(value), `not a number in: ${line}`);
  return value;
}

/** The family a sample name belongs to (histogram and summary series carry suffixes). */
function familyOf(name: string, types: Map<string, string>): string | undefined {
  if (types.has(name)) return name;
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    if (name.endsWith(suffix)) {
      const base = name.slice(0, -suffix.length);
      if (types.has(base)) return base;
    }
  }
  return undefined;
}

export function parseExposition(text: string): Exposition {
  const types = new Map<string, string>();
  const help = new Map<string, string>();
  const samples: Sample[] = [];
  assert.ok(text.endsWith("\n"), "the exposition ends with a newline");
  for (const line of text.split("\n")) {
    if (line === "") continue;
    if (line.startsWith("#")) {
      const typed = new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`).exec(line);
      const helped = new RegExp(`^# HELP (${NAME}) (.*)$`).exec(line);
      if (typed) types.set(typed[1] as string, typed[2] as string);
      else if (helped) help.set(helped[1] as string, helped[2] as string);
      continue;
    }
    const match = SAMPLE.exec(line);
    assert.ok(match, `not a sample line: ${line}`);
    const name = match[1] as string;
    assert.ok(familyOf(name, types), `sample before (or without) its TYPE: ${line}`);
    samples.push({ name, labels: parseLabels(match[2] ?? "", line), value: parseValue(match[3] as string, line) });
  }
  return { types, help, samples };
}

/** The sum of the samples with this name and (at least) these labels; 0 when there is none. */
export function sampleSum(exposition: Exposition, metric: string, labels: Record<string, string> = {}): number {
  const matching = exposition.samples.filter(
    (s) => s.name === metric && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  return matching.reduce((sum, s) => sum + s.value, 0);
}
