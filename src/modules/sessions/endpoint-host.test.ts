import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { endpointUrl, parseEndpointHost, planeBase } from "./endpoint-host.js";

const id = `sbx-${"0123456789".repeat(4)}`;

describe("endpoint host names", () => {
  it("names an endpoint under the plane's base URL and parses it back", () => {
    const base = planeBase("http://localhost:7081");
    const url = endpointUrl(base, { port: 8080, sandboxId: id });
    assert.equal(url, `http://8080-${id}.localhost:7081/`);
    assert.deepEqual(parseEndpointHost(new URL(url).host, "localhost"), { port: 8080, sandboxId: id });
    assert.equal(
      endpointUrl(planeBase("https://sessions.example.com"), { port: 1, sandboxId: id }),
      `https://1-${id}.sessions.example.com/`,
    );
  });

  it("accepts case and a trailing dot, ignores the Host port, and refuses everything else", () => {
    assert.deepEqual(parseEndpointHost(`65535-${id.toUpperCase()}.LOCALHOST.`, "localhost"), {
      port: 65535,
      sandboxId: id,
    });
    for (const host of [
      undefined,
      "",
      "localhost:7081",
      `8080-${id}.localhost.evil.com`,
      `8080-${id}.evil-localhost`,
      `65536-${id}.localhost`,
      `0-${id}.localhost`,
      `08080-${id}.localhost`,
      `8080-${id}x.localhost`,
      `8080-sbx-${"g".repeat(40)}.localhost`,
      `a.8080-${id}.localhost`,
      `8080-${id}.localhost${"x".repeat(300)}`,
    ]) {
      assert.equal(parseEndpointHost(host, "localhost"), null, String(host));
    }
  });
});
