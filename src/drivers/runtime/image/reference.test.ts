import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ImageError } from "./errors.js";
import {
  formatImageReference,
  type ImageReference,
  isLoopbackHost,
  parseImageReference,
  registryApiHost,
  registryBaseUrl,
} from "./reference.js";

const DIGEST = `sha256:${"a".repeat(64)}`;

describe("parseImageReference", () => {
  const valid: [string, ImageReference][] = [
    ["busybox", { registry: "docker.io", repository: "library/busybox", tag: "latest", digest: null }],
    ["busybox:1.36", { registry: "docker.io", repository: "library/busybox", tag: "1.36", digest: null }],
    ["library/busybox", { registry: "docker.io", repository: "library/busybox", tag: "latest", digest: null }],
    ["docker.io/busybox", { registry: "docker.io", repository: "library/busybox", tag: "latest", digest: null }],
    [
      "index.docker.io/library/ubuntu:22.04",
      { registry: "docker.io", repository: "library/ubuntu", tag: "22.04", digest: null },
    ],
    ["registry-1.docker.io/x/y", { registry: "docker.io", repository: "x/y", tag: "latest", digest: null }],
    ["bitnami/redis:7.2", { registry: "docker.io", repository: "bitnami/redis", tag: "7.2", digest: null }],
    ["ghcr.io/owner/repo:v1", { registry: "ghcr.io", repository: "owner/repo", tag: "v1", digest: null }],
    ["ghcr.io/owner/a/b/c", { registry: "ghcr.io", repository: "owner/a/b/c", tag: "latest", digest: null }],
    ["ghcr.io/repo", { registry: "ghcr.io", repository: "repo", tag: "latest", digest: null }],
    ["localhost/repo", { registry: "localhost", repository: "repo", tag: "latest", digest: null }],
    ["localhost:5000/repo:t", { registry: "localhost:5000", repository: "repo", tag: "t", digest: null }],
    [
      "127.0.0.1:5000/test/busybox",
      { registry: "127.0.0.1:5000", repository: "test/busybox", tag: "latest", digest: null },
    ],
    ["[::1]:5000/a:b", { registry: "[::1]:5000", repository: "a", tag: "b", digest: null }],
    ["Registry.Example/a", { registry: "Registry.Example", repository: "a", tag: "latest", digest: null }],
    ["myhost:443/a/b:tag_1.x-Y", { registry: "myhost:443", repository: "a/b", tag: "tag_1.x-Y", digest: null }],
    [`busybox@${DIGEST}`, { registry: "docker.io", repository: "library/busybox", tag: null, digest: DIGEST }],
    [`busybox:1.36@${DIGEST}`, { registry: "docker.io", repository: "library/busybox", tag: "1.36", digest: DIGEST }],
    [`host:5000/r@${DIGEST}`, { registry: "host:5000", repository: "r", tag: null, digest: DIGEST }],
    ["a_b/c__d/e-f/g--h.i", { registry: "docker.io", repository: "a_b/c__d/e-f/g--h.i", tag: "latest", digest: null }],
    // Like Docker: a lone `name:port` is a Docker Hub repository with a tag.
    ["localhost:5000", { registry: "docker.io", repository: "library/localhost", tag: "5000", digest: null }],
  ];
  for (const [input, expected] of valid) {
    it(`parses ${input}`, () => {
      assert.deepEqual(parseImageReference(input), expected);
    });
  }

  const invalid: [string, RegExp][] = [
    ["", /empty/],
    [" busybox", /whitespace/],
    ["Busybox", /lowercase/],
    ["docker.io/Library/busybox", /lowercase/],
    ["busybox:", /malformed tag/],
    ["busybox:-x", /malformed tag/],
    [`busybox:${"t".repeat(129)}`, /malformed tag/],
    ["busybox@sha256:abc", /malformed digest/],
    [`busybox@sha256:${"A".repeat(64)}`, /64 lowercase hex/],
    [`busybox@sha256:${"a".repeat(63)}`, /64 lowercase hex/],
    ["busybox@", /malformed digest/],
    ["a//b", /lowercase/],
    ["a/b/", /lowercase/],
    ["/a", /lowercase/],
    ["a/-b", /lowercase/],
    ["a/b_", /lowercase/],
    ["a/b___c", /lowercase/],
    ["-host.io/a", /registry host/],
    ["host.io:port/a", /registry host/],
    [":tag", /missing repository/],
    [`${"a".repeat(256)}`, /longer than 255/],
  ];
  for (const [input, message] of invalid) {
    it(`rejects ${JSON.stringify(input.length > 40 ? `${input.slice(0, 40)}...` : input)}`, () => {
      assert.throws(
        () => parseImageReference(input),
        (error: unknown) =>
          error instanceof ImageError && error.code === "invalid_reference" && message.test(error.message),
      );
    });
  }
});

describe("formatImageReference", () => {
  const cases: [string, string][] = [
    ["busybox", "docker.io/library/busybox:latest"],
    [`busybox:1@${DIGEST}`, `docker.io/library/busybox:1@${DIGEST}`],
    [`ghcr.io/o/r@${DIGEST}`, `ghcr.io/o/r@${DIGEST}`],
    ["127.0.0.1:5000/x:y", "127.0.0.1:5000/x:y"],
  ];
  for (const [input, expected] of cases) {
    it(`formats ${input}`, () => {
      const formatted = formatImageReference(parseImageReference(input));
      assert.equal(formatted, expected);
      assert.deepEqual(parseImageReference(formatted), parseImageReference(input));
    });
  }
});

describe("registry hosts", () => {
  it("maps Docker Hub to its API host", () => {
    assert.equal(registryApiHost("docker.io"), "registry-1.docker.io");
    assert.equal(registryApiHost("ghcr.io"), "ghcr.io");
  });

  const loopback: [string, boolean][] = [
    ["localhost", true],
    ["localhost:5000", true],
    ["127.0.0.1", true],
    ["127.0.0.1:5000", true],
    ["127.255.3.4:1", true],
    ["[::1]:5000", true],
    ["[::1]", true],
    ["128.0.0.1:5000", false],
    ["127.0.0.256", false],
    ["127.0.0", false],
    ["127.0.0.1.example.com", false],
    ["localhost.example.com", false],
    ["10.0.0.1:5000", false],
    ["ghcr.io", false],
  ];
  for (const [host, expected] of loopback) {
    it(`${host} is ${expected ? "" : "not "}loopback`, () => assert.equal(isLoopbackHost(host), expected));
  }

  it("speaks plain HTTP only to loopback and configured insecure registries", () => {
    assert.equal(registryBaseUrl("docker.io"), "https://registry-1.docker.io");
    assert.equal(registryBaseUrl("ghcr.io"), "https://ghcr.io");
    assert.equal(registryBaseUrl("127.0.0.1:5000"), "http://127.0.0.1:5000");
    assert.equal(registryBaseUrl("localhost:5000"), "http://localhost:5000");
    assert.equal(registryBaseUrl("[::1]:5000"), "http://[::1]:5000");
    assert.equal(registryBaseUrl("reg.internal:5000"), "https://reg.internal:5000");
    assert.equal(registryBaseUrl("reg.internal:5000", ["reg.internal:5000"]), "http://reg.internal:5000");
    assert.equal(registryBaseUrl("reg.internal:5001", ["reg.internal:5000"]), "https://reg.internal:5001");
    assert.equal(registryBaseUrl("reg.internal", ["reg.internal"]), "http://reg.internal");
  });
});
