// The deployment's egress CA: the gateway terminates a sandbox's TLS to a host with a bound
// secret under a leaf certificate this CA signs, and every sandbox trusts the CA. ECDSA
// P-256 through WebCrypto (@peculiar/x509 builds the certificates). Generated once and kept
// in the store (the private key sealed under the master key), so every server process of a
// deployment presents the same CA; leaves are minted on demand per host and cached.
import "reflect-metadata";
import { webcrypto } from "node:crypto";
import { createSecureContext, type SecureContext } from "node:tls";
import * as x509 from "@peculiar/x509";
import type { Clock } from "../../lib/clock.js";
import type { Queryable } from "../../store/db.js";
import { openDeploymentKey } from "../secrets/deployment-keys.js";
import type { Keyring } from "../secrets/keyring.js";

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const EC = { name: "ECDSA", namedCurve: "P-256" } as const;
const SIGNING = { name: "ECDSA", hash: "SHA-256" } as const;
const CA_YEARS = 10;
const LEAF_DAYS = 7;
/** A cached leaf is minted again when less than this is left of it. */
const LEAF_RENEW_MS = 24 * 3600 * 1000;
/** Leaves kept per process: one per host with a bound secret, so this bounds memory, not correctness. */
export const LEAF_CACHE_ENTRIES = 1024;

function pem(label: string, der: ArrayBuffer): string {
  const body = Buffer.from(der).toString("base64").replace(/.{64}/g, "$&\n");
  return `-----BEGIN ${label}-----\n${body}${body.endsWith("\n") ? "" : "\n"}-----END ${label}-----\n`;
}

/** A host name as a certificate may carry it: lowercase DNS labels only (the gateway checked it already). */
const LEAF_HOST = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

export class EgressCa {
  private readonly leaves = new Map<string, { context: SecureContext; renewAt: number }>();
  private readonly minting = new Map<string, Promise<SecureContext>>();

  private constructor(
    private readonly clock: Clock,
    /** The CA certificate every sandbox trusts (PEM). */
    readonly certificatePem: string,
    private readonly caCert: x509.X509Certificate,
    private readonly caKey: CryptoKey,
    /** One key pair for every leaf of this process: minting a leaf is then one signature. */
    private readonly leafKeys: CryptoKeyPair,
    private readonly leafKeyPem: string,
    private readonly leafCacheEntries: number,
  ) {}

  /** The deployment's CA from the store (deployment_keys), generated and stored by the first caller. */
  static async open(
    q: Queryable,
    keyring: Keyring,
    clock: Clock,
    options: { leafCacheEntries?: number } = {},
  ): Promise<EgressCa> {
    const stored = await openDeploymentKey(q, keyring, clock, "egress-ca", async () => {
      const generated = await generateCa(clock.now());
      return { publicPart: generated.certificatePem, privatePart: generated.pkcs8 };
    });
    const pkcs8 = stored.privatePart;
    const caKey = await webcrypto.subtle.importKey("pkcs8", pkcs8, EC, false, ["sign"]);
    const leafKeys = (await webcrypto.subtle.generateKey(EC, true, ["sign", "verify"])) as CryptoKeyPair;
    const leafKeyPem = pem("PRIVATE KEY", await webcrypto.subtle.exportKey("pkcs8", leafKeys.privateKey));
    return new EgressCa(
      clock,
      stored.publicPart,
      new x509.X509Certificate(stored.publicPart),
      caKey as CryptoKey,
      leafKeys,
      leafKeyPem,
      options.leafCacheEntries ?? LEAF_CACHE_ENTRIES,
    );
  }

  /** The TLS context presenting a leaf for `host`, minted on first use and cached (bounded, renewed before expiry). */
  async contextFor(host: string): Promise<SecureContext> {
    if (!LEAF_HOST.test(host)) throw new Error("not a host name a leaf certificate can carry");
    const now = this.clock.now().getTime();
    const cached = this.leaves.get(host);
    if (cached && cached.renewAt > now) {
      // Most recently used last: the first key is the one to evict.
      this.leaves.delete(host);
      this.leaves.set(host, cached);
      return cached.context;
    }
    const pending = this.minting.get(host);
    if (pending) return pending;
    const minted = this.mint(host, now).finally(() => this.minting.delete(host));
    this.minting.set(host, minted);
    return minted;
  }

  /** The cached context for `host` when one is ready now (no minting). */
  cachedContext(host: string): SecureContext | undefined {
    const cached = this.leaves.get(host);
    return cached && cached.renewAt > this.clock.now().getTime() ? cached.context : undefined;
  }

  /** Leaves currently cached (tests check the bound). */
  get cachedLeaves(): number {
    return this.leaves.size;
  }

  private async mint(host: string, now: number): Promise<SecureContext> {
    const notAfter = Math.min(now + LEAF_DAYS * 86_400_000, this.caCert.notAfter.getTime());
    const leaf = await x509.X509CertificateGenerator.create({
      serialNumber: Buffer.from(webcrypto.getRandomValues(new Uint8Array(16)))
        .toString("hex")
        .replace(/^[89a-f]/, "1"),
      subject: `CN=${host}`,
      issuer: this.caCert.subject,
      notBefore: new Date(now - 3600_000),
      notAfter: new Date(notAfter),
      publicKey: this.leafKeys.publicKey,
      signingKey: this.caKey,
      signingAlgorithm: SIGNING,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        new x509.SubjectAlternativeNameExtension([{ type: "dns", value: host }]),
        await x509.AuthorityKeyIdentifierExtension.create(this.caCert),
      ],
    });
    const context = createSecureContext({ key: this.leafKeyPem, cert: leaf.toString("pem"), minVersion: "TLSv1.2" });
    if (this.leaves.size >= this.leafCacheEntries) {
      const oldest = this.leaves.keys().next().value;
      if (oldest !== undefined) this.leaves.delete(oldest);
    }
    this.leaves.set(host, { context, renewAt: notAfter - LEAF_RENEW_MS });
    return context;
  }
}

async function generateCa(now: Date): Promise<{ certificatePem: string; pkcs8: Buffer }> {
  const keys = (await webcrypto.subtle.generateKey(EC, true, ["sign", "verify"])) as CryptoKeyPair;
  const notAfter = new Date(now);
  notAfter.setUTCFullYear(notAfter.getUTCFullYear() + CA_YEARS);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: Buffer.from(webcrypto.getRandomValues(new Uint8Array(16)))
      .toString("hex")
      .replace(/^[89a-f]/, "1"),
    name: `CN=Warren egress CA ${Buffer.from(webcrypto.getRandomValues(new Uint8Array(4))).toString("hex")}, O=Warren`,
    notBefore: new Date(now.getTime() - 3600_000),
    notAfter,
    keys,
    signingAlgorithm: SIGNING,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return {
    certificatePem: cert.toString("pem"),
    pkcs8: Buffer.from(await webcrypto.subtle.exportKey("pkcs8", keys.privateKey)),
  };
}
