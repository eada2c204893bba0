import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  type PushedImage,
  pushImage,
  sha256,
  startTestRegistry,
  type TestRegistry,
} from "../../../../test/support/registry.js";
import { ImageError } from "./errors.js";
import { parseImageReference } from "./reference.js";
import { type ImageIndex, parseAuthChallenge, RegistryClient, selectPlatformManifest } from "./registry-client.js";
import { encodeTar } from "./tar.js";

type Handler = (request: IncomingMessage, response: ServerResponse) => void | Promise<void>;

async function listen(handler: Handler): Promise<{ server: Server; url: string; host: string }> {
  const server = createServer((request, response) => {
    Promise.resolve(handler(request, response)).catch((error: unknown) => {
      response.statusCode = 500;
      response.end(String(error));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return { server, url: `http://127.0.0.1:${port}`, host: `127.0.0.1:${port}` };
}

function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

const isImageError = (code: ImageError["code"]) => (error: unknown) =>
  error instanceof ImageError && error.code === code;

describe("parseAuthChallenge", () => {
  const cases: [string, ReturnType<typeof parseAuthChallenge>][] = [
    [
      'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull"',
      {
        scheme: "bearer",
        params: {
          realm: "https://auth.docker.io/token",
          service: "registry.docker.io",
          scope: "repository:library/busybox:pull",
        },
      },
    ],
    [
      'Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:o/r:pull"',
      {
        scheme: "bearer",
        params: { realm: "https://ghcr.io/token", service: "ghcr.io", scope: "repository:o/r:pull" },
      },
    ],
    ['Basic realm="Registry Realm"', { scheme: "basic", params: { realm: "Registry Realm" } }],
    ["bearer realm=https://x/t, service=s", { scheme: "bearer", params: { realm: "https://x/t", service: "s" } }],
    ['Bearer realm="a\\"b"', { scheme: "bearer", params: { realm: 'a"b' } }],
    ["Bearer", { scheme: "bearer", params: {} }],
    ["", null],
  ];
  for (const [header, expected] of cases) {
    it(`parses ${JSON.stringify(header).slice(0, 60)}`, () => assert.deepEqual(parseAuthChallenge(header), expected));
  }
});

describe("selectPlatformManifest", () => {
  const d = (n: number) => `sha256:${String(n).repeat(64)}`;
  const index: ImageIndex = {
    schemaVersion: 2,
    manifests: [
      { mediaType: "m", digest: d(1), size: 1, platform: { os: "linux", architecture: "arm64", variant: "v8" } },
      { mediaType: "m", digest: d(2), size: 1, platform: { os: "linux", architecture: "amd64" } },
      { mediaType: "m", digest: d(3), size: 1, platform: { os: "unknown", architecture: "unknown" } },
      { mediaType: "m", digest: d(4), size: 1, platform: { os: "windows", architecture: "amd64" } },
      { mediaType: "m", digest: d(5), size: 1, platform: { os: "linux", architecture: "arm", variant: "v6" } },
      { mediaType: "m", digest: d(6), size: 1, platform: { os: "linux", architecture: "arm", variant: "v7" } },
      { mediaType: "m", digest: d(7), size: 1 },
    ],
  };
  it("picks linux/amd64 and skips attestations and other systems", () => {
    assert.equal(selectPlatformManifest(index, { os: "linux", architecture: "amd64" }).digest, d(2));
    assert.equal(selectPlatformManifest(index, { os: "linux", architecture: "arm64" }).digest, d(1));
    assert.equal(selectPlatformManifest(index, { os: "linux", architecture: "arm", variant: "v7" }).digest, d(6));
    assert.equal(selectPlatformManifest(index, { os: "windows", architecture: "amd64" }).digest, d(4));
  });
  it("fails when the platform is missing", () => {
    assert.throws(
      () => selectPlatformManifest(index, { os: "linux", architecture: "s390x" }),
      (error: unknown) =>
        isImageError("not_found")(error) && /linux\/s390x.*linux\/arm64, linux\/amd64/.test(String(error)),
    );
    assert.throws(
      () => selectPlatformManifest(index, { os: "linux", architecture: "arm", variant: "v5" }),
      isImageError("not_found"),
    );
  });
});

describe("RegistryClient", () => {
  let registry: TestRegistry;
  let image: PushedImage;
  const work = mkdtempSync(path.join(os.tmpdir(), "warren-registry-client-test-"));
  const servers: Server[] = [];

  before(async () => {
    registry = await startTestRegistry();
    image = await pushImage(registry.url, "test/small", "v1", {
      layers: [encodeTar([{ name: "hello", type: "file", data: "hello\n" }])],
    });
  });
  after(async () => {
    await Promise.all(servers.map(close));
    await registry?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  /** Forwards GETs to the test registry, behind a Bearer challenge and a token endpoint. */
  async function authProxy(options: { basic?: string; challenge?: "bearer" | "basic" }) {
    const stats = { tokenRequests: 0, unauthorized: 0, forwarded: 0, tokenAuthorization: [] as (string | undefined)[] };
    const token = "tok-123";
    const proxy = await listen(async (request, response) => {
      const url = new URL(request.url ?? "/", "http://x");
      if (url.pathname === "/token") {
        stats.tokenRequests++;
        stats.tokenAuthorization.push(request.headers.authorization);
        if (
          options.basic &&
          request.headers.authorization !== `Basic ${Buffer.from(options.basic).toString("base64")}`
        ) {
          response.writeHead(401).end();
          return;
        }
        assert.equal(url.searchParams.get("service"), "test-registry");
        assert.equal(url.searchParams.get("scope"), "repository:test/small:pull");
        response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ token, expires_in: 300 }));
        return;
      }
      const expected =
        options.challenge === "basic"
          ? `Basic ${Buffer.from(options.basic ?? "").toString("base64")}`
          : `Bearer ${token}`;
      if (request.headers.authorization !== expected) {
        stats.unauthorized++;
        const challenge =
          options.challenge === "basic"
            ? 'Basic realm="test"'
            : `Bearer realm="${proxy.url}/token",service="test-registry",scope="repository:test/small:pull"`;
        response.writeHead(401, { "www-authenticate": challenge }).end();
        return;
      }
      stats.forwarded++;
      const upstream = await fetch(`${registry.url}${request.url}`, {
        headers: { accept: request.headers.accept ?? "*/*" },
      });
      const headers: Record<string, string> = {};
      for (const name of ["content-type", "docker-content-digest", "content-length"]) {
        const value = upstream.headers.get(name);
        if (value) headers[name] = value;
      }
      response.writeHead(upstream.status, headers).end(Buffer.from(await upstream.arrayBuffer()));
    });
    servers.push(proxy.server);
    return { ...proxy, stats };
  }

  it("pulls anonymously through a Bearer challenge, asking for a token once", async () => {
    const proxy = await authProxy({});
    const client = new RegistryClient();
    const ref = parseImageReference(`${proxy.host}/test/small:v1`);
    const resolved = await client.resolve(ref);
    assert.equal(resolved.digest, image.digest);
    const destination = path.join(work, "anon-layer");
    await client.downloadBlob(ref, image.layers[0]?.digest as string, destination);
    assert.equal(sha256(readFileSync(destination)), image.layers[0]?.digest);
    const config = await client.fetchBlobBytes(ref, image.configDigest);
    assert.equal(sha256(config), image.configDigest);
    assert.equal(proxy.stats.tokenRequests, 1);
    assert.equal(proxy.stats.unauthorized, 1);
    assert.equal(proxy.stats.forwarded, 3);
    assert.deepEqual(proxy.stats.tokenAuthorization, [undefined]);
  });

  it("sends configured credentials to the token endpoint, and fails cleanly on wrong ones", async () => {
    const proxy = await authProxy({ basic: "alice:s3cret" });
    const ref = parseImageReference(`${proxy.host}/test/small:v1`);
    const good = new RegistryClient({ credentials: { [proxy.host]: { username: "alice", password: "s3cret" } } });
    assert.equal((await good.resolve(ref)).digest, image.digest);
    const bad = new RegistryClient({ credentials: { [proxy.host]: { username: "alice", password: "nope" } } });
    await assert.rejects(bad.resolve(ref), isImageError("unauthorized"));
    const anonymous = new RegistryClient();
    await assert.rejects(anonymous.resolve(ref), isImageError("unauthorized"));
  });

  it("answers a Basic challenge with configured credentials", async () => {
    const proxy = await authProxy({ basic: "bob:pw", challenge: "basic" });
    const ref = parseImageReference(`${proxy.host}/test/small:v1`);
    const client = new RegistryClient({ credentials: { [proxy.host]: { username: "bob", password: "pw" } } });
    assert.equal((await client.resolve(ref)).digest, image.digest);
    await assert.rejects(new RegistryClient().resolve(ref), isImageError("unauthorized"));
  });

  it("detects bytes that do not match their digest", async () => {
    const manifest = image.manifestBytes;
    const layerDigest = image.layers[0]?.digest as string;
    const fake = await listen((request, response) => {
      const url = request.url ?? "";
      if (url === `/v2/test/small/manifests/${image.digest}`) {
        response.writeHead(200, { "content-type": image.mediaType }).end(Buffer.concat([manifest, Buffer.from(" ")]));
      } else if (url === "/v2/test/small/manifests/lying") {
        response
          .writeHead(200, { "content-type": image.mediaType, "docker-content-digest": `sha256:${"0".repeat(64)}` })
          .end(manifest);
      } else if (
        url === `/v2/test/small/blobs/${layerDigest}` ||
        url === `/v2/test/small/blobs/${image.configDigest}`
      ) {
        response.writeHead(200).end(Buffer.from("these are not the bytes you are looking for"));
      } else {
        response.writeHead(404).end();
      }
    });
    servers.push(fake.server);
    const client = new RegistryClient();
    const repo = parseImageReference(`${fake.host}/test/small`);
    await assert.rejects(client.fetchManifest(repo, image.digest), isImageError("digest_mismatch"));
    await assert.rejects(client.fetchManifest(repo, "lying"), isImageError("digest_mismatch"));
    await assert.rejects(client.fetchBlobBytes(repo, image.configDigest), isImageError("digest_mismatch"));
    const destination = path.join(work, "bad-blob");
    await assert.rejects(client.downloadBlob(repo, layerDigest, destination), isImageError("digest_mismatch"));
    assert.equal(existsSync(destination), false);
    assert.deepEqual(
      readdirSync(work).filter((name) => name.startsWith("bad-blob")),
      [],
      "no partial file is left behind",
    );
    await assert.rejects(client.fetchManifest(repo, "missing"), isImageError("not_found"));
  });

  it("follows a blob redirect to another origin without the registry's credentials", async () => {
    const layerDigest = image.layers[0]?.digest as string;
    const blob = readFileSync(registry.blobDataPath(layerDigest));
    const seenByCdn: (string | undefined)[] = [];
    const cdn = await listen((request, response) => {
      seenByCdn.push(request.headers.authorization);
      response.writeHead(200).end(blob);
    });
    const origin = await listen((request, response) => {
      if (request.headers.authorization !== "Basic Y2Fyb2w6cHc=") {
        response.writeHead(401, { "www-authenticate": 'Basic realm="x"' }).end();
        return;
      }
      response.writeHead(307, { location: `${cdn.url}/blob?signature=abc` }).end();
    });
    servers.push(cdn.server, origin.server);
    const client = new RegistryClient({ credentials: { [origin.host]: { username: "carol", password: "pw" } } });
    const destination = path.join(work, "redirected");
    await client.downloadBlob(parseImageReference(`${origin.host}/test/small`), layerDigest, destination);
    assert.deepEqual(readFileSync(destination), blob);
    assert.deepEqual(seenByCdn, [undefined]);
  });

  it("uses HTTPS except for loopback and registries configured as insecure", async () => {
    const urls: string[] = [];
    const recording: typeof fetch = async (input) => {
      urls.push(String(input));
      return new Response("", { status: 404 });
    };
    const client = new RegistryClient({ fetch: recording, insecureRegistries: ["plain.internal:5000"] });
    for (const reference of [
      "busybox",
      "ghcr.io/o/r:t",
      "plain.internal:5000/a",
      "other.internal:5000/a",
      "localhost:5000/a",
    ]) {
      await assert.rejects(client.resolve(parseImageReference(reference)), isImageError("not_found"));
    }
    assert.deepEqual(urls, [
      "https://registry-1.docker.io/v2/library/busybox/manifests/latest",
      "https://ghcr.io/v2/o/r/manifests/t",
      "http://plain.internal:5000/v2/a/manifests/latest",
      "https://other.internal:5000/v2/a/manifests/latest",
      "http://localhost:5000/v2/a/manifests/latest",
    ]);
  });

  it("reports an unreachable registry as a registry error", async () => {
    const probe = await listen(() => {});
    const host = probe.host;
    await close(probe.server);
    await assert.rejects(
      new RegistryClient().resolve(parseImageReference(`${host}/a`)),
      isImageError("registry_error"),
    );
  });
});
