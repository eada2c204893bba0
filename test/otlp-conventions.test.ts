// The typed columns of a span (src/modules/otlp/conventions.ts): the documented precedence
// (docs/api-decisions.md "OpenTelemetry ingest"), values of the wrong type skipped for the
// next source, and the resource consulted for the trace-level values only. Pure: no store.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { conventionsOf, MAX_TYPED_TEXT } from "../src/modules/otlp/conventions.js";
import { type Attributes, newAttributes } from "../src/modules/otlp/model.js";

const attrs = (o: Record<string, unknown>): Attributes => Object.assign(newAttributes(), o) as Attributes;

describe("OTLP conventions", () => {
  it("prefers gen_ai.* over OpenInference, and the response model over the request model", () => {
    const c = conventionsOf(
      attrs({
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "old-system",
        "gen_ai.provider.name": "openai",
        "llm.provider": "other",
        "gen_ai.request.model": "req",
        "gen_ai.response.model": "resp",
        "llm.model_name": "oi-model",
        "gen_ai.usage.input_tokens": 10,
        "llm.token_count.prompt": 99,
        "gen_ai.usage.output_tokens": "7",
        "gen_ai.input.messages": [{ role: "user", content: "hi" }],
        "input.value": "ignored",
      }),
      newAttributes(),
    );
    assert.equal(c.operation, "chat");
    assert.equal(c.spanType, "LLM");
    assert.equal(c.system, "openai");
    assert.equal(c.model, "resp");
    assert.equal(c.inputTokens, 10);
    assert.equal(c.outputTokens, 7, "digits as a string count");
    assert.equal(c.totalTokens, 17, "input + output without a total");
    assert.equal(c.input, '[{"role":"user","content":"hi"}]');
  });

  it("reads OpenInference alone, and its span kind wins over the operation's", () => {
    const c = conventionsOf(
      attrs({
        "openinference.span.kind": "retriever",
        "gen_ai.operation.name": "chat",
        "llm.model_name": "m",
        "llm.token_count.prompt": 3,
        "llm.token_count.completion": 4,
        "llm.token_count.total": 9,
        "llm.cost.total": 0.5,
        "input.value": "q",
        "output.value": "a",
      }),
      newAttributes(),
    );
    assert.equal(c.spanType, "RETRIEVER");
    assert.equal(c.model, "m");
    assert.deepEqual([c.inputTokens, c.outputTokens, c.totalTokens, c.costUsd], [3, 4, 9, 0.5]);
    assert.deepEqual([c.input, c.output], ["q", "a"]);
  });

  it("takes the deprecated usage names, skips values of the wrong type, and cuts typed text", () => {
    const c = conventionsOf(
      attrs({
        "gen_ai.usage.prompt_tokens": 5,
        "gen_ai.usage.input_tokens": -1,
        "gen_ai.usage.completion_tokens": 1.5,
        "llm.token_count.completion": 2,
        "gen_ai.request.model": "x".repeat(1000),
        "gen_ai.usage.cost": "NaN",
        "gen_ai.operation.name": "execute_tool",
      }),
      newAttributes(),
    );
    assert.equal(c.inputTokens, 5, "a negative count is skipped for the next name");
    assert.equal(c.outputTokens, 2, "a fraction is no count");
    assert.equal(c.model?.length, MAX_TYPED_TEXT);
    assert.equal(c.costUsd, null);
    assert.equal(c.spanType, "TOOL");
  });

  it("reads user, session and tags from the span, then its resource; nothing else from the resource", () => {
    const resource = attrs({
      "enduser.id": "r-user",
      "session.id": "r-sess",
      tags: "one",
      "gen_ai.request.model": "r",
    });
    const own = conventionsOf(attrs({ "user.id": "s-user", "tag.tags": ["a", 1, "b"] }), resource);
    assert.equal(own.userId, "s-user");
    assert.equal(own.sessionId, "r-sess");
    assert.deepEqual(own.tags, ["a", "b"]);
    assert.equal(own.model, null, "the model is the span's own");
    const inherited = conventionsOf(newAttributes(), resource);
    assert.deepEqual([inherited.userId, inherited.tags], ["r-user", ["one"]]);
  });

  it("leaves every column null for a span without conventions", () => {
    const c = conventionsOf(attrs({ "http.method": "GET" }), newAttributes());
    assert.ok(Object.values(c).every((v) => v === null));
  });
});
