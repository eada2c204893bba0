// Write-only sandbox secrets. Values are sealed per version under the organization's data
// key with the organization, secret id and version as additional data, and leave the
// store in plaintext only through resolveSecretForDelivery, for a trusted data plane.
// Metadata visibility is not authority: delivery needs an active secret, an exact grant
// and the secret's own delivery channel.
import { randomBytes } from "node:crypto";
import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import { newId } from "../../lib/ids.js";
import { type Cursor, decodeCursor, pageOf } from "../../lib/page-token.js";
import type { Db, Queryable } from "../../store/db.js";
import { type Credential, requireOrgScoped, requireRole } from "../identity/credential.js";
import * as workloads from "../workloads/service.js";
import { type Keyring, open, pack, seal, unpack } from "./keyring.js";
import * as repo from "./repo.js";
import {
  type CreateSecretBody,
  type DELIVERIES,
  type GrantJson,
  type ListSecretsJson,
  type SecretJson,
  SUBJECT_KINDS,
} from "./schemas.js";

export type Delivery = Exclude<(typeof DELIVERIES)[number], "SANDBOX_SECRET_DELIVERY_UNSPECIFIED">;

export type SubjectKind = Exclude<(typeof SUBJECT_KINDS)[number], "SANDBOX_SECRET_GRANT_SUBJECT_KIND_UNSPECIFIED">;

export const MAX_GRANTS = 200;
export const MAX_VALUE_BYTES = 65_536;

// RFC 6761/2606 and common private suffixes: never a public HTTPS host.
const NON_PUBLIC_SUFFIXES = [
  ".localhost",
  ".local",
  ".internal",
  ".lan",
  ".home.arpa",
  ".test",
  ".example",
  ".invalid",
  ".onion",
  ".arpa",
];
const HOST_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** An exact public HTTPS host: a lowercase DNS name with a public-looking TLD; no scheme, port, path, IP or wildcard. */
export function checkDestHost(host: string): void {
  const labels = host.split(".");
  const tld = labels[labels.length - 1] ?? "";
  const valid =
    host.length <= 253 &&
    labels.length >= 2 &&
    labels.every((label) => HOST_LABEL.test(label)) &&
    /^[a-z][a-z0-9-]*[a-z0-9]$/.test(tld) &&
    !NON_PUBLIC_SUFFIXES.some((suffix) => `.${host}`.endsWith(suffix)) &&
    host !== "localhost";
  if (!valid) {
    throw new AppError(
      "invalid_argument",
      "dest_host must be an exact public HTTPS host name such as api.openai.com (lowercase; no scheme, port, path, IP address or wildcard)",
    );
  }
}

export function secretView(row: repo.SecretRow): SecretJson {
  const view: SecretJson = {
    id: row.id,
    name: row.name,
    delivery: row.delivery as Delivery,
    dest_host: row.dest_host,
    current_version: row.current_version,
    created_by: row.created_by,
    created_at: row.created_at.toISOString(),
  };
  if (row.rotated_at) view.rotated_at = row.rotated_at.toISOString();
  if (row.expires_at) view.expires_at = row.expires_at.toISOString();
  if (row.revoked_at) view.revoked_at = row.revoked_at.toISOString();
  return view;
}

const KIND_ORDER: Record<string, number> = Object.fromEntries(SUBJECT_KINDS.map((kind, i) => [kind, i]));

export function sortGrants(grants: GrantJson[]): GrantJson[] {
  return [...grants].sort(
    (a, b) =>
      (KIND_ORDER[a.subject_kind] ?? 99) - (KIND_ORDER[b.subject_kind] ?? 99) ||
      (a.subject_id < b.subject_id ? -1 : a.subject_id > b.subject_id ? 1 : 0),
  );
}

export interface DeliverySubject {
  kind: SubjectKind;
  id: string;
}

export type DeliveryResult =
  | { ok: true; value: string; version: number; secretId: string; destHost: string }
  | { ok: false; reason: "not_found" | "revoked" | "expired" | "not_granted" | "wrong_delivery" };

/** A secret bound to a sandbox at admission (stored on its row; the egress gateway injects it). */
export interface SecretBinding {
  name: string;
  secret_id: string;
  delivery: "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS" | "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY";
  /** The exact host the value is injected for (the model-gateway host for MODEL_GATEWAY). */
  dest_host: string;
  /** The grant admission found, checked again at every injection. */
  subject_kind: SubjectKind;
  subject_id: string;
}

/** Hooks re-sealing other data under the master key when it rotates (the egress CA's key). */
export type MasterKeyRewrapper = (q: Queryable, keyring: Keyring, at: Date) => Promise<number>;

const aadFor = (orgId: string, secretId: string, version: number) => `warren-secret:${orgId}:${secretId}:${version}`;
const dekAad = (orgId: string, dataKeyId: string) => `warren-data-key:${orgId}:${dataKeyId}`;
const dataAad = (orgId: string, purpose: string) => `warren-sealed-data:${orgId}:${purpose}`;
/** The first byte of sealData's format: version, data key id length, data key id, nonce, ciphertext + tag. */
const SEALED_DATA_VERSION = 1;

export class SecretService {
  private readonly rewrappers: MasterKeyRewrapper[] = [];

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly keyring: Keyring,
  ) {}

  private checkValue(value: string): Buffer {
    const bytes = Buffer.from(value, "utf8");
    if (bytes.length === 0 || bytes.length > MAX_VALUE_BYTES) {
      throw new AppError("invalid_argument", `value must be 1 to ${MAX_VALUE_BYTES} bytes`);
    }
    return bytes;
  }

  /** The organization's data key in plaintext, created (and wrapped) on first use. */
  private async dataKey(q: Queryable, orgId: string): Promise<{ id: string; key: Buffer }> {
    let row = await repo.getDataKeyForOrg(q, orgId);
    if (!row) {
      const id = newId("dek");
      const key = randomBytes(32);
      const { masterKeyId, wrapped } = this.keyring.wrap(key, dekAad(orgId, id));
      await repo.insertDataKey(q, { id, orgId, masterKeyId, wrapped, at: this.clock.now() });
      row = await repo.getDataKeyForOrg(q, orgId);
      if (!row) throw new AppError("internal", "could not create the organization's data key");
    }
    return {
      id: row.id,
      key: this.keyring.unwrap(row.master_key_id, Buffer.from(row.wrapped_key), dekAad(orgId, row.id)),
    };
  }

  private async sealVersion(q: Queryable, orgId: string, secretId: string, version: number, value: Buffer) {
    const dek = await this.dataKey(q, orgId);
    const sealed = seal(dek.key, value, aadFor(orgId, secretId, version));
    await repo.insertVersion(q, {
      secretId,
      version,
      dataKeyId: dek.id,
      nonce: sealed.nonce,
      ciphertext: sealed.ciphertext,
      at: this.clock.now(),
    });
  }

  /**
   * Seals another module's data at rest (exec output kept for replays) under the
   * organization's data key, so it is protected and rotated as secret values are. `purpose`
   * binds the bytes to their place (it is the additional data): opening them under another
   * purpose fails. The result names its data key, so openData needs nothing else.
   */
  async sealData(orgId: string, plaintext: Buffer, purpose: string): Promise<Buffer> {
    const dek = await this.dataKey(this.db, orgId);
    const sealed = seal(dek.key, plaintext, dataAad(orgId, purpose));
    const id = Buffer.from(dek.id, "utf8");
    return Buffer.concat([Buffer.from([SEALED_DATA_VERSION, id.length]), id, pack(sealed)]);
  }

  /** The bytes sealData sealed for this organization and purpose; throws when they were altered or moved. */
  async openData(orgId: string, packed: Buffer, purpose: string): Promise<Buffer> {
    const idLength = packed[1] ?? 0;
    if (packed[0] !== SEALED_DATA_VERSION || packed.length < 2 + idLength) {
      throw new AppError("internal", "sealed data of an unknown format");
    }
    const dekRow = await repo.getDataKey(this.db, packed.subarray(2, 2 + idLength).toString("utf8"));
    if (!dekRow || dekRow.org_id !== orgId) throw new AppError("internal", "sealed data of an unknown data key");
    const dek = this.keyring.unwrap(dekRow.master_key_id, Buffer.from(dekRow.wrapped_key), dekAad(orgId, dekRow.id));
    return open(dek, unpack(packed.subarray(2 + idLength)), dataAad(orgId, purpose));
  }

  /** The credential's own grant subject: users by principal id, service accounts by key id, workloads by workload id; none for a sandbox-scoped credential. */
  private async grantSubjectOf(q: Queryable, cred: Credential): Promise<DeliverySubject | null> {
    if (cred.sandbox) return null;
    if (cred.principalKind === "user") return { kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", id: cred.principalId };
    if (cred.principalKind === "service_account") {
      return { kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_SERVICE_ACCOUNT", id: cred.keyId };
    }
    const workload = cred.workloadName ? await workloads.findWorkload(q, cred.orgId, cred.workloadName) : null;
    return workload ? { kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_WORKLOAD", id: workload.id } : null;
  }

  async create(cred: Credential, input: CreateSecretBody): Promise<SecretJson> {
    requireRole(cred, "admin", "create secrets");
    const value = this.checkValue(input.value);
    const delivery: Delivery =
      !input.delivery || input.delivery === "SANDBOX_SECRET_DELIVERY_UNSPECIFIED"
        ? "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS"
        : input.delivery;
    const destHost = input.dest_host ?? "";
    if (delivery === "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT") {
      if (destHost) throw new AppError("invalid_argument", "dest_host must be empty for sandbox-environment delivery");
    } else {
      if (!destHost)
        throw new AppError("invalid_argument", "dest_host is required for egress and model-gateway delivery");
      checkDestHost(destHost);
    }
    const now = this.clock.now();
    let expiresAt: Date | null = null;
    if (input.expires_at) {
      expiresAt = new Date(input.expires_at);
      if (Number.isNaN(expiresAt.getTime()))
        throw new AppError("invalid_argument", "expires_at must be an RFC 3339 time");
      if (expiresAt <= now) throw new AppError("invalid_argument", "expires_at must be in the future");
    }
    return this.db.tx(async (q) => {
      const row: repo.SecretRow = {
        id: newId("sec"),
        org_id: cred.orgId,
        name: input.name,
        delivery,
        dest_host: destHost,
        current_version: 1,
        created_by: cred.principalId,
        created_at: now,
        rotated_at: null,
        expires_at: expiresAt,
        revoked_at: null,
      };
      if (!(await repo.insertSecret(q, row))) {
        throw new AppError("already_exists", `a secret named "${input.name}" already exists`);
      }
      await this.sealVersion(q, cred.orgId, row.id, 1, value);
      const creator = await this.grantSubjectOf(q, cred);
      if (creator) {
        await repo.insertGrant(q, {
          secretId: row.id,
          kind: creator.kind,
          subjectId: creator.id,
          createdBy: cred.principalId,
          at: now,
        });
      }
      return secretView(row);
    });
  }

  async list(cred: Credential, pageSize: number, pageToken: string | undefined): Promise<ListSecretsJson> {
    requireOrgScoped(cred, "list secrets");
    const after = decodeCursor("secrets", pageToken);
    const rows = await repo.listSecrets(this.db, cred.orgId, after, pageSize + 1);
    const page = pageOf("secrets", rows, pageSize, (row): Cursor => ({ at: row.created_at, id: row.id }));
    return { secrets: page.items.map(secretView), next_page_token: page.nextPageToken };
  }

  private async load(q: Queryable, cred: Credential, id: string, forUpdate = false): Promise<repo.SecretRow> {
    const row = await repo.getSecret(q, cred.orgId, id, forUpdate);
    if (!row) throw notFound("secret");
    return row;
  }

  private async checkSubject(q: Queryable, orgId: string, kind: SubjectKind, subjectId: string): Promise<void> {
    const exists = await workloads.grantSubjectExists(
      q,
      orgId,
      kind === "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER"
        ? "user"
        : kind === "SANDBOX_SECRET_GRANT_SUBJECT_KIND_SERVICE_ACCOUNT"
          ? "service_account"
          : "workload",
      subjectId,
    );
    if (!exists) throw new AppError("invalid_argument", `no ${kind} subject "${subjectId}" in this organization`);
  }

  async grant(
    cred: Credential,
    id: string,
    kind: (typeof SUBJECT_KINDS)[number],
    subjectId: string,
  ): Promise<GrantJson> {
    requireRole(cred, "admin", "grant secrets");
    if (kind === "SANDBOX_SECRET_GRANT_SUBJECT_KIND_UNSPECIFIED") {
      throw new AppError("invalid_argument", "subject_kind must be USER, SERVICE_ACCOUNT or WORKLOAD");
    }
    return this.db.tx(async (q) => {
      const secret = await this.load(q, cred, id, true);
      const view: GrantJson = { secret_id: secret.id, subject_kind: kind, subject_id: subjectId };
      if (await repo.hasGrant(q, secret.id, kind, subjectId)) return view;
      if (secret.revoked_at)
        throw new AppError("failed_precondition", "the secret is revoked; it can no longer be granted");
      await this.checkSubject(q, cred.orgId, kind, subjectId);
      const grants = await repo.listGrants(q, secret.id);
      if (grants.length >= MAX_GRANTS) {
        throw new AppError(
          "failed_precondition",
          `a secret holds at most ${MAX_GRANTS} grants, including the creator grant`,
        );
      }
      await repo.insertGrant(q, {
        secretId: secret.id,
        kind,
        subjectId,
        createdBy: cred.principalId,
        at: this.clock.now(),
      });
      return view;
    });
  }

  async ungrant(cred: Credential, id: string, kind: (typeof SUBJECT_KINDS)[number], subjectId: string): Promise<void> {
    requireRole(cred, "admin", "ungrant secrets");
    await this.db.tx(async (q) => {
      const secret = await this.load(q, cred, id, true);
      await repo.deleteGrant(q, secret.id, kind, subjectId);
    });
  }

  async listGrants(cred: Credential, id: string): Promise<GrantJson[]> {
    requireOrgScoped(cred, "list secret grants");
    const secret = await this.load(this.db, cred, id);
    const rows = await repo.listGrants(this.db, secret.id);
    return sortGrants(
      rows.map((row) => ({
        secret_id: row.secret_id,
        subject_kind: row.subject_kind as SubjectKind,
        subject_id: row.subject_id,
      })),
    );
  }

  async rotate(cred: Credential, id: string, value: string): Promise<SecretJson> {
    requireRole(cred, "admin", "rotate secrets");
    const bytes = this.checkValue(value);
    return this.db.tx(async (q) => {
      const secret = await this.load(q, cred, id, true);
      if (secret.revoked_at) throw new AppError("failed_precondition", "the secret is revoked; it cannot be rotated");
      const version = secret.current_version + 1;
      await this.sealVersion(q, cred.orgId, secret.id, version, bytes);
      return secretView(await repo.setRotated(q, secret.id, version, this.clock.now()));
    });
  }

  async revoke(cred: Credential, id: string): Promise<SecretJson> {
    requireRole(cred, "admin", "revoke secrets");
    return this.db.tx(async (q) => {
      const secret = await this.load(q, cred, id, true);
      return secretView(await repo.setRevoked(q, secret.id, this.clock.now()));
    });
  }

  /**
   * The only way a plaintext value leaves the store: for a trusted data plane delivering
   * the secret by name to a subject over one channel.
   */
  async resolveSecretForDelivery(
    orgId: string,
    name: string,
    subject: DeliverySubject,
    delivery: Delivery,
  ): Promise<DeliveryResult> {
    // One statement: the egress gateway resolves again at every request it injects.
    const secret = await repo.getForDelivery(this.db, orgId, name, subject.kind, subject.id);
    if (!secret) return { ok: false, reason: "not_found" };
    if (secret.revoked_at) return { ok: false, reason: "revoked" };
    if (secret.expires_at && secret.expires_at <= this.clock.now()) return { ok: false, reason: "expired" };
    if (secret.delivery !== delivery) return { ok: false, reason: "wrong_delivery" };
    if (!secret.granted) return { ok: false, reason: "not_granted" };
    if (
      secret.v_version === null ||
      !secret.v_nonce ||
      !secret.v_ciphertext ||
      !secret.k_master_key_id ||
      !secret.k_wrapped_key ||
      secret.k_org_id !== orgId ||
      !secret.v_data_key_id
    ) {
      return { ok: false, reason: "not_found" };
    }
    const dek = this.keyring.unwrap(
      secret.k_master_key_id,
      Buffer.from(secret.k_wrapped_key),
      dekAad(orgId, secret.v_data_key_id),
    );
    const plaintext = open(
      dek,
      { nonce: Buffer.from(secret.v_nonce), ciphertext: Buffer.from(secret.v_ciphertext) },
      aadFor(orgId, secret.id, secret.v_version),
    );
    return {
      ok: true,
      value: plaintext.toString("utf8"),
      version: secret.v_version,
      secretId: secret.id,
      destHost: secret.dest_host,
    };
  }

  /**
   * The values of sandbox-environment secrets an exec asks for, each released on the calling
   * credential's own exact grant (contract 2.6, 5.12): never on the sandbox creator's, and
   * never for a sandbox-scoped credential, which is no grant subject (code in the sandbox
   * holds one). Every refusal is the same invalid_argument.
   */
  async releaseForExec(
    cred: Credential,
    wanted: { secret_name: string; variable_name: string }[],
  ): Promise<Record<string, string>> {
    const env: Record<string, string> = Object.create(null);
    if (wanted.length === 0) return env;
    const subject = await this.grantSubjectOf(this.db, cred);
    for (const item of wanted) {
      const result = subject
        ? await this.resolveSecretForDelivery(
            cred.orgId,
            item.secret_name,
            subject,
            "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT",
          )
        : ({ ok: false, reason: "not_granted" } as const);
      if (!result.ok) {
        throw new AppError(
          "invalid_argument",
          `secret "${item.secret_name}" cannot be released into this exec's environment (it must be an active sandbox-environment secret granted to the caller)`,
        );
      }
      env[item.variable_name] = result.value;
    }
    return env;
  }

  /**
   * Admits a create's `secrets` bindings (contract 5.12): each name must be an active
   * SECRET_EGRESS or MODEL_GATEWAY secret with an exact grant for the calling principal,
   * resolved through resolveSecretForDelivery like exec's secret environment. Every refusal
   * (unknown, revoked, expired, not granted, another delivery) is the same invalid_argument,
   * so a caller learns nothing about secrets it may not use. A MODEL_GATEWAY secret binds to
   * the deployment's model-gateway host; without one it is unsupported_capability.
   */
  async bindForSandbox(cred: Credential, names: string[], modelGatewayHost: string): Promise<SecretBinding[]> {
    const seen = new Set<string>();
    for (const name of names) {
      if (seen.has(name)) throw new AppError("invalid_argument", `secret "${name}" is bound twice`);
      seen.add(name);
    }
    const subject = await this.grantSubjectOf(this.db, cred);
    const bindings: SecretBinding[] = [];
    for (const name of names) {
      let result: DeliveryResult = { ok: false, reason: "not_granted" };
      let delivery: SecretBinding["delivery"] = "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS";
      if (subject) {
        result = await this.resolveSecretForDelivery(cred.orgId, name, subject, delivery);
        if (!result.ok && result.reason === "wrong_delivery") {
          delivery = "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY";
          result = await this.resolveSecretForDelivery(cred.orgId, name, subject, delivery);
        }
      }
      if (!result.ok || !subject) {
        throw new AppError(
          "invalid_argument",
          `secret "${name}" cannot be bound to this sandbox (it must be an active SECRET_EGRESS or MODEL_GATEWAY secret with an exact grant for the caller)`,
        );
      }
      if (delivery === "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY" && !modelGatewayHost) {
        throw new AppError(
          "unsupported_capability",
          "this deployment has no model gateway (WARREN_MODEL_GATEWAY_HOST)",
        );
      }
      const destHost = delivery === "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY" ? modelGatewayHost : result.destHost;
      if (bindings.some((b) => b.dest_host === destHost)) {
        throw new AppError("invalid_argument", `two bound secrets are for the same host ${destHost}`);
      }
      bindings.push({
        name,
        secret_id: result.secretId,
        delivery,
        dest_host: destHost,
        subject_kind: subject.kind,
        subject_id: subject.id,
      });
    }
    return bindings;
  }

  /** Registers data to re-seal when the master key rotates (before the old keys are forgotten). */
  onMasterKeyRotation(rewrapper: MasterKeyRewrapper): void {
    this.rewrappers.push(rewrapper);
  }

  /**
   * Re-wraps every organization's data key under the current master key (after generating
   * a new one when keys live in the data dir). Secret values are not touched.
   */
  async rotateMasterKey(): Promise<{ master_key_id: string; data_keys_rewrapped: number }> {
    await this.keyring.beginRotation();
    const count = await this.db.tx(async (q) => {
      const rows = await repo.allDataKeys(q);
      let rewrapped = 0;
      for (const row of rows) {
        if (row.master_key_id === this.keyring.currentId) continue;
        const aad = dekAad(row.org_id, row.id);
        const key = this.keyring.unwrap(row.master_key_id, Buffer.from(row.wrapped_key), aad);
        const { masterKeyId, wrapped } = this.keyring.wrap(key, aad);
        await repo.rewrapDataKey(q, row.id, masterKeyId, wrapped, this.clock.now());
        rewrapped += 1;
      }
      for (const rewrapper of this.rewrappers) await rewrapper(q, this.keyring, this.clock.now());
      return rewrapped;
    });
    await this.keyring.forgetOldKeys();
    return { master_key_id: this.keyring.currentId, data_keys_rewrapped: count };
  }
}
