// The pure parts of the deployment's edges: the roles' settings and a published plane address.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { advertisedAddress, ConfigError, loadConfig } from "../../config.js";
import { parsePlaneAddress } from "./owner-plane.js";

describe("roles and edges", () => {
  it("parses WARREN_ROLE (default all) and refuses another value", () => {
    assert.equal(loadConfig({}).role, "all");
    assert.equal(loadConfig({ WARREN_ROLE: "api" }).role, "api");
    assert.equal(loadConfig({ WARREN_ROLE: "node" }).role, "node");
    assert.throws(() => loadConfig({ WARREN_ROLE: "edge" }), ConfigError);
  });

  it("the api and node roles need the deployment's names for the listeners they run", () => {
    assert.throws(
      () => loadConfig({ WARREN_ROLE: "api", WARREN_SESSION_LISTEN: "0.0.0.0:7081" }),
      /WARREN_SESSION_PLANE_URL/,
    );
    assert.throws(() => loadConfig({ WARREN_ROLE: "node", WARREN_SSH_LISTEN: "0.0.0.0:2222" }), /WARREN_SSH_HOST/);
    // `all` keeps today's derived names.
    assert.equal(loadConfig({ WARREN_SSH_LISTEN: "127.0.0.1:2222" }).sshHost, "127.0.0.1");
  });

  it("advertises a listener at WARREN_ADVERTISE_HOST, else its own host, else WARREN_LISTEN's", () => {
    assert.equal(
      advertisedAddress(loadConfig({ WARREN_ADVERTISE_HOST: "10.0.0.1" }), "0.0.0.0", 7081),
      "10.0.0.1:7081",
    );
    assert.equal(advertisedAddress(loadConfig({}), "10.1.1.1", 7081), "10.1.1.1:7081");
    assert.equal(advertisedAddress(loadConfig({ WARREN_LISTEN: "10.2.2.2:8080" }), "0.0.0.0", 7081), "10.2.2.2:7081");
    assert.throws(() => loadConfig({ WARREN_ADVERTISE_HOST: "http://x/" }), ConfigError);
  });

  it("reads a published plane address and nothing else", () => {
    assert.deepEqual(parsePlaneAddress("10.0.0.1:7081"), { host: "10.0.0.1", port: 7081 });
    assert.deepEqual(parsePlaneAddress("[::1]:7081"), { host: "::1", port: 7081 });
    for (const bad of [null, "", "http://plane.example:7081", "host", "host:0", "host:70000"]) {
      assert.equal(parsePlaneAddress(bad), null, String(bad));
    }
  });
});
