// The pure and store-level pieces of secret egress: the scrubber over every split of a
// stream, the HTTP/1.1 framing's refusals, and the deployment CA (shared through the store,
// re-sealed on master key rotation, leaves valid for their host only and cached within a bound).
import "reflect-metadata";
import assert from "node:assert/strict";
import { randomBytes, X509Certificate } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { PassThrough } from "node:stream";
import { describe, it } from "node:test";
import { connect, createServer } from "node:tls";
import { systemClock } from "../../lib/clock.js";
import { migrate } from "../../store/migrate.js";
import { openPglite } from "../../store/pglite.js";
import { rewrapDeploymentKeys } from "../secrets/deployment-keys.js";
import { Keyring } from "../secrets/keyring.js";
import { SecretService } from "../secrets/service.js";
import { EgressCa, LEAF_CACHE_ENTRIES } from "./ca.js";
import { bodyFraming, copyBody, HttpError, parseHead, readHead, StreamReader } from "./http1.js";
import { Scrubber } from "./scrub.js";

describe("Scrubber", () => {
  const scrubAll = (needle: string, text: string, cuts: number[]) => {
    const s = new Scrubber(Buffer.from(needle));
    const out: Buffer[] = [];
    let from = 0;
    for (const cut of [...cuts, text.length]) {
      out.push(s.push(Buffer.from(text.slice(from, cut))));
      from = cut;
    }
    out.push(s.flush());
    return { text: Buffer.concat(out).toString(), matches: s.matches };
  };

  it("removes every occurrence whatever the chunk boundaries, keeping the length", () => {
    const needle = "sk-abc-123";
    const text = `x${needle}y${needle}${needle}z sk-abc-12 no`;
    for (let a = 0; a <= text.length; a++) {
      for (let b = a; b <= text.length; b += 3) {
        const { text: out, matches } = scrubAll(needle, text, [a, b]);
        assert.equal(out.length, text.length);
        assert.ok(!out.includes(needle), `cuts ${a},${b}: ${out}`);
        assert.equal(matches, 3);
        assert.ok(out.endsWith(" sk-abc-12 no"), "a partial match is left alone");
      }
    }
    // One byte at a time.
    const bytes = scrubAll(
      needle,
      text,
      [...text].map((_, i) => i),
    );
    assert.ok(!bytes.text.includes(needle));
  });

  it("masks with a byte the needle does not contain, so no new match can form", () => {
    const needle = "**##xx";
    const { text } = scrubAll(needle, `a${needle}${needle}b`, [4]);
    assert.ok(!text.includes(needle));
    assert.equal(text.length, 2 + 2 * needle.length);
  });
});

describe("HTTP/1.1 framing", () => {
  const head = (text: string) => parseHead(Buffer.from(`${text}\r\n\r\n`));

  it("refuses ambiguous or malformed framing", () => {
    const refused = (text: string, status: number) =>
      assert.throws(
        () => bodyFraming(head(text), true),
        (e: unknown) => e instanceof HttpError && e.status === status,
      );
    refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5", 400);
    refused("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6", 400);
    refused("POST / HTTP/1.1\r\nContent-Length: -1", 400);
    refused("POST / HTTP/1.1\r\nContent-Length: 1e3", 400);
    refused("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked", 501);
    assert.deepEqual(bodyFraming(head("POST / HTTP/1.1\r\nContent-Length: 5, 5"), true), { kind: "length", length: 5 });
    assert.deepEqual(bodyFraming(head("GET / HTTP/1.1"), true), { kind: "none" });
    assert.deepEqual(bodyFraming(head("HTTP/1.1 200 OK"), false), { kind: "close" });
  });

  it("refuses header lines that smuggle: folding, space before the colon, control bytes", () => {
    for (const bad of ["GET / HTTP/1.1\r\nA: b\r\n c", "GET / HTTP/1.1\r\nA : b", "GET / HTTP/1.1\r\nA: b\x00c"]) {
      assert.throws(() => head(bad), HttpError);
    }
    assert.throws(
      () => head(`GET / HTTP/1.1${"\r\nA: b".repeat(200)}`),
      (e: unknown) => (e as HttpError).status === 431,
    );
  });

  it("bounds a head and a chunk size line, and decodes chunks split anywhere", async () => {
    const big = new PassThrough();
    const bigReader = new StreamReader(big);
    big.write(`GET / HTTP/1.1\r\nA: ${"b".repeat(70_000)}`);
    await assert.rejects(readHead(bigReader, "head"), (e: unknown) => (e as HttpError).status === 431);

    const body = "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
    for (let cut = 1; cut < body.length; cut += 2) {
      const stream = new PassThrough();
      const reader = new StreamReader(stream);
      stream.write(body.slice(0, cut));
      setImmediate(() => stream.write(body.slice(cut)));
      const got: Buffer[] = [];
      const n = await copyBody(reader, { kind: "chunked" }, async (b) => void got.push(Buffer.from(b)), {
        decode: true,
      });
      assert.equal(n, 11);
      assert.equal(Buffer.concat(got).toString(), "hello world");
      let rest = "";
      while (rest.length < 4) rest += (await reader.readSome(10))?.toString() ?? "";
      assert.equal(rest, "NEXT");
    }
    const bad = new PassThrough();
    bad.end(`${"f".repeat(2000)}\r\n`);
    await assert.rejects(
      copyBody(new StreamReader(bad), { kind: "chunked" }, async () => {}, { decode: true }),
      HttpError,
    );
  });
});

describe("EgressCa", () => {
  it("is generated once and shared through the store, its key sealed and re-sealed on rotation", async () => {
    const db = await openPglite();
    try {
      await migrate(db);
      const keyring = Keyring.ephemeral();
      const clock = systemClock();
      const [a, b] = await Promise.all([EgressCa.open(db, keyring, clock), EgressCa.open(db, keyring, clock)]);
      assert.equal(a.certificatePem, b.certificatePem, "two processes present the same CA");
      const ca = new X509Certificate(a.certificatePem);
      assert.equal(ca.ca, true);
      assert.equal(ca.publicKey.asymmetricKeyDetails?.namedCurve, "prime256v1");
      const { rows } = await db.query<{ wrapped_key: Uint8Array; certificate_pem: string }>(
        "SELECT wrapped_key, public_part AS certificate_pem FROM deployment_keys WHERE name = 'egress-ca'",
      );
      assert.equal(rows.length, 1);
      assert.ok(!Buffer.from(rows[0]?.wrapped_key ?? []).includes(Buffer.from("PRIVATE")), "sealed, not PEM");
      // Another master key cannot open it.
      await assert.rejects(EgressCa.open(db, Keyring.ephemeral(), clock), /master key/);
      assert.equal(await rewrapDeploymentKeys(db, keyring, clock.now()), 0, "already under the current key");
    } finally {
      await db.close();
    }
  });

  it("re-seals the key under the current master key, which then opens it alone", async () => {
    const db = await openPglite();
    try {
      await migrate(db);
      const oldKey = randomBytes(32).toString("base64");
      const newKey = randomBytes(32).toString("base64");
      const clock = systemClock();
      const first = await EgressCa.open(db, Keyring.fromConfig(oldKey, []), clock);
      assert.equal(await rewrapDeploymentKeys(db, Keyring.fromConfig(newKey, [oldKey]), clock.now()), 1);
      const reopened = await EgressCa.open(db, Keyring.fromConfig(newKey, []), clock);
      assert.equal(reopened.certificatePem, first.certificatePem);
    } finally {
      await db.close();
    }
  });

  it("is re-sealed by the secrets' master key rotation (key file keyring), then opens under the new key alone", async () => {
    const db = await openPglite();
    const dir = await mkdtemp(path.join(os.tmpdir(), "warren-egress-ca-"));
    try {
      await migrate(db);
      const clock = systemClock();
      const keyring = await Keyring.fromDataDir(dir);
      const first = await EgressCa.open(db, keyring, clock);
      const secrets = new SecretService(db, clock, keyring);
      secrets.onMasterKeyRotation(rewrapDeploymentKeys);
      const rotated = await secrets.rotateMasterKey();
      const reread = await Keyring.fromDataDir(dir);
      assert.equal(reread.currentId, rotated.master_key_id);
      assert.equal((await EgressCa.open(db, reread, clock)).certificatePem, first.certificatePem);
    } finally {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("mints leaves that verify for their host only, cached within a bound", async () => {
    const db = await openPglite();
    try {
      await migrate(db);
      const ca = await EgressCa.open(db, Keyring.ephemeral(), systemClock(), { leafCacheEntries: 8 });
      const handshake = async (leafHost: string, verifyAs: string) => {
        const server = createServer(
          { SNICallback: (_n, cb) => void ca.contextFor(leafHost).then((c) => cb(null, c)) },
          (s) => s.end("hi"),
        );
        await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
        const port = (server.address() as { port: number }).port;
        try {
          return await new Promise<string>((resolve, reject) => {
            const socket = connect({ host: "127.0.0.1", port, servername: verifyAs, ca: ca.certificatePem }, () => {
              socket.once("data", (d) => resolve(d.toString()));
            });
            socket.once("error", reject);
          });
        } finally {
          server.close();
        }
      };
      assert.equal(await handshake("api.example-one.com", "api.example-one.com"), "hi");
      await assert.rejects(handshake("api.example-one.com", "api.example-two.com"), /altnames|Hostname/);
      await assert.rejects(ca.contextFor("bad host"), /host name/);
      assert.equal(await ca.contextFor("api.example-one.com"), await ca.contextFor("api.example-one.com"));
      for (let i = 0; i < 13; i++) await ca.contextFor(`h${i}.example-many.com`);
      assert.equal(ca.cachedLeaves, 8);
      assert.ok(LEAF_CACHE_ENTRIES >= 1024, "the default bound");
    } finally {
      await db.close();
    }
  });
});
