// The session plane's settings and the base URL its endpoints hang off.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { ConfigError, loadConfig } from "../../config.js";
import { systemClock } from "../../lib/clock.js";
import { SessionService } from "./service.js";
import { SessionTokenSigner } from "./tokens.js";

const quietLog = { info() {}, warn() {}, error() {} };
const service = (configuredUrl: string) =>
  new SessionService(
    null as never,
    null as never,
    null,
    new SessionTokenSigner(randomBytes(32)),
    systemClock(),
    quietLog as never,
    configuredUrl,
  );

describe("session plane settings", () => {
  it("reads WARREN_SESSION_LISTEN and checks WARREN_SESSION_PLANE_URL", () => {
    assert.equal(loadConfig({}).sessionListen, null);
    assert.deepEqual(loadConfig({ WARREN_SESSION_LISTEN: "127.0.0.1:0" }).sessionListen, {
      host: "127.0.0.1",
      port: 0,
    });
    assert.deepEqual(loadConfig({ WARREN_SESSION_LISTEN: "[::1]:7081" }).sessionListen, { host: "::1", port: 7081 });
    assert.throws(() => loadConfig({ WARREN_SESSION_LISTEN: "7081" }), ConfigError);
    assert.equal(
      loadConfig({ WARREN_SESSION_PLANE_URL: "https://Sessions.Example.com/" }).sessionPlaneUrl,
      "https://sessions.example.com",
    );
    for (const bad of [
      "ftp://x.example",
      "https://x.example/path",
      "http://10.0.0.5:7081",
      "http://[::1]:7081",
      "nope",
    ]) {
      assert.throws(() => loadConfig({ WARREN_SESSION_PLANE_URL: bad }), ConfigError, bad);
    }
  });

  it("derives the base URL from a loopback listener, and keeps a configured one", () => {
    const derived = service("");
    assert.equal(derived.publicUrl(), "", "no plane, no URL");
    derived.planeListening({ host: "127.0.0.1", port: 7081 });
    assert.equal(derived.publicUrl(), "http://localhost:7081");
    assert.equal(derived.endpointUrl({ port: 3000, sandboxId: "sbx-1" }), "http://3000-sbx-1.localhost:7081/");
    const configured = service("https://sessions.example.com");
    configured.planeListening({ host: "0.0.0.0", port: 7081 });
    assert.equal(configured.publicUrl(), "https://sessions.example.com");
    assert.equal(configured.protocol(), "https:");
  });
});
