// SecretService over HTTP and its delivery resolver (contract 2.6, 4.2, 5.7, 5.12, 8):
// write-only creation and its input rules, listing, exact grants and their limit,
// rotation, revocation, envelope encryption at rest (AAD binding, per-version nonces,
// master-key rotation), and that a value never leaves in a response, log or document.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { KEY_FILE, Keyring, keyId } from "../src/modules/secrets/keyring.js";
import type { GrantJson, SecretJson } from "../src/modules/secrets/schemas.js";
import { type DeliveryResult, SecretService } from "../src/modules/secrets/service.js";
import type { WorkloadJson } from "../src/modules/workloads/schemas.js";
import {
  BAD_CREDENTIALS,
  forEachStore,
  STORE_KINDS,
  startTestApp,
  type TestApp,
  type TestOrg,
  type TestResponse,
} from "./harness.js";
import { assertError, bodyOf } from "./support/assertions.js";
import { countRows, sandboxScopedKey } from "./support/fixtures.js";

const SANDBOX_ID = `sbx-${"d".repeat(40)}`;
const EGRESS = "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS";
const GATEWAY = "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY";
const ENVIRONMENT = "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT";
const USER = "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER";
const SERVICE_ACCOUNT = "SANDBOX_SECRET_GRANT_SUBJECT_KIND_SERVICE_ACCOUNT";
const WORKLOAD = "SANDBOX_SECRET_GRANT_SUBJECT_KIND_WORKLOAD";
const SECRET_KEYS = ["created_at", "created_by", "current_version", "delivery", "dest_host", "id", "name"];

// The suite's master key is known, so a test can hand a second keyring the previous key.
const MASTER_1 = randomBytes(32).toString("base64");
const MASTER_2 = randomBytes(32).toString("base64");

function secretOf(res: TestResponse): SecretJson {
  const secret = bodyOf<SecretJson>(res, "secret");
  for (const key of SECRET_KEYS) assert.ok(key in secret, `missing ${key}`);
  assert.equal("value" in secret, false);
  return secret;
}

const uniqueName = (prefix = "SECRET") => `${prefix}_${randomBytes(5).toString("hex")}`;

function create(t: TestApp, key: string, body: Record<string, unknown>, headers?: Record<string, string>) {
  return t.request("POST", "/v1/secrets", { key, body, ...(headers ? { headers } : {}) });
}

async function createSecret(t: TestApp, key: string, body: Record<string, unknown> = {}): Promise<SecretJson> {
  return secretOf(
    await create(t, key, { name: uniqueName(), value: "s3cr3t-value", dest_host: "api.openai.com", ...body }),
  );
}

function grant(t: TestApp, key: string, id: string, subject_kind: string, subject_id: string) {
  return t.request("POST", `/v1/secrets/${id}/grants`, { key, body: { subject_kind, subject_id } });
}

function ungrant(t: TestApp, key: string, id: string, kind: string, subjectId: string) {
  return t.request("DELETE", `/v1/secrets/${id}/grants/${kind}/${subjectId}`, { key });
}

async function grantsOf(t: TestApp, key: string, id: string): Promise<GrantJson[]> {
  return bodyOf<GrantJson[]>(await t.request("GET", `/v1/secrets/${id}/grants`, { key }), "grants");
}

function rotate(t: TestApp, key: string, id: string, body: Record<string, unknown>) {
  return t.request("POST", `/v1/secrets/${id}:rotate`, { key, body });
}

function revoke(t: TestApp, key: string, id: string, body?: Record<string, unknown>) {
  return t.request("POST", `/v1/secrets/${id}:revoke`, { key, ...(body ? { body } : {}) });
}

const sandboxKey = (t: TestApp, org: TestOrg, role?: "owner" | "admin" | "member") =>
  sandboxScopedKey(t, org, SANDBOX_ID, role);

const countSecrets = (t: TestApp, orgId: string) => countRows(t, "sandbox_secrets WHERE org_id = $1", [orgId]);

async function versionRows(t: TestApp, secretId: string) {
  const { rows } = await t.c.db.query<{
    version: number;
    data_key_id: string;
    nonce: Uint8Array;
    ciphertext: Uint8Array;
  }>(
    "SELECT version, data_key_id, nonce, ciphertext FROM sandbox_secret_versions WHERE secret_id = $1 ORDER BY version",
    [secretId],
  );
  return rows.map((row) => ({
    version: Number(row.version),
    dataKeyId: row.data_key_id,
    nonce: Buffer.from(row.nonce),
    ciphertext: Buffer.from(row.ciphertext),
  }));
}

async function dataKeyRows(t: TestApp) {
  const { rows } = await t.c.db.query<{ id: string; org_id: string; master_key_id: string; wrapped_key: Uint8Array }>(
    "SELECT id, org_id, master_key_id, wrapped_key FROM secret_data_keys ORDER BY id",
  );
  return rows.map((row) => ({ ...row, wrapped_key: Buffer.from(row.wrapped_key) }));
}

const userSubject = (org: TestOrg, role: "owner" | "admin" | "member") =>
  ({ kind: USER, id: org.principalIds[role] }) as const;

/** Resolves the secret `name` of `org` for egress delivery to that organization's owner. */
function deliverToOwner(secrets: SecretService, org: TestOrg, name: string): Promise<DeliveryResult> {
  return secrets.resolveSecretForDelivery(org.id, name, userSubject(org, "owner"), EGRESS);
}

/** Asserts a delivery did not release the value: either a refusal reason or a thrown decryption error. */
async function assertNotDelivered(attempt: Promise<DeliveryResult>, value: string): Promise<void> {
  let result: DeliveryResult | null = null;
  try {
    result = await attempt;
  } catch (error) {
    assert.ok(error instanceof Error);
    assert.equal(error.message.includes(value), false);
    return;
  }
  assert.equal(result.ok, false, "the value was released");
}

forEachStore(
  "secrets",
  (t) => {
    describe("CreateSandboxSecret", () => {
      it("creates a write-only secret with the default egress delivery and returns only metadata", async () => {
        const name = uniqueName();
        const res = await create(t(), t().orgA.keys.owner, {
          name,
          value: "sk-live-abcdef",
          dest_host: "api.openai.com",
        });
        const secret = secretOf(res);
        assert.deepEqual(Object.keys(secret).sort(), SECRET_KEYS);
        assert.match(secret.id, /^sec_[0-9a-z]{26}$/);
        assert.equal(secret.name, name);
        assert.equal(secret.delivery, EGRESS);
        assert.equal(secret.dest_host, "api.openai.com");
        assert.equal(secret.current_version, 1);
        assert.equal(secret.created_by, t().orgA.principalIds.owner);
        assert.equal(new Date(secret.created_at).toISOString(), secret.created_at);
        assert.equal(res.raw.includes("sk-live-abcdef"), false);
        const listed = await t().request("GET", "/v1/secrets", { key: t().orgA.keys.member });
        assert.deepEqual(
          (listed.body.secrets as SecretJson[]).find((s) => s.id === secret.id),
          secret,
        );
        const delivered = await deliverToOwner(t().c.secrets, t().orgA, name);
        assert.deepEqual(delivered, {
          ok: true,
          value: "sk-live-abcdef",
          version: 1,
          secretId: secret.id,
          destHost: "api.openai.com",
        });
      });

      it("stores UNSPECIFIED delivery as egress and accepts model-gateway and sandbox-environment delivery", async () => {
        const unspecified = await createSecret(t(), t().orgA.keys.admin, {
          delivery: "SANDBOX_SECRET_DELIVERY_UNSPECIFIED",
        });
        assert.equal(unspecified.delivery, EGRESS);
        const gateway = await createSecret(t(), t().orgA.keys.admin, {
          delivery: GATEWAY,
          dest_host: "api.anthropic.com",
        });
        assert.equal(gateway.delivery, GATEWAY);
        assert.equal(gateway.dest_host, "api.anthropic.com");
        const env = secretOf(
          await create(t(), t().orgA.keys.admin, { name: uniqueName(), value: "v", delivery: ENVIRONMENT }),
        );
        assert.equal(env.delivery, ENVIRONMENT);
        assert.equal(env.dest_host, "");
        const envEmpty = secretOf(
          await create(t(), t().orgA.keys.admin, {
            name: uniqueName(),
            value: "v",
            delivery: ENVIRONMENT,
            dest_host: "",
          }),
        );
        assert.equal(envEmpty.dest_host, "");
      });

      it("requires dest_host for egress and model-gateway delivery and refuses it for sandbox-environment", async () => {
        const before = await countSecrets(t(), t().orgA.id);
        for (const body of [
          {},
          { dest_host: "" },
          { delivery: EGRESS },
          { delivery: GATEWAY },
          { delivery: GATEWAY, dest_host: "" },
          { delivery: ENVIRONMENT, dest_host: "api.openai.com" },
          { delivery: "SANDBOX_SECRET_DELIVERY_CARRIER_PIGEON", dest_host: "api.openai.com" },
        ]) {
          const res = await create(t(), t().orgA.keys.owner, { name: uniqueName(), value: "v", ...body });
          assertError(res, 400, "invalid_argument");
        }
        assert.equal(await countSecrets(t(), t().orgA.id), before);
      });

      it("accepts exact public HTTPS host names just inside the rules", async () => {
        // 253 characters: three 63-character labels, one of 57, and "com".
        const longest = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(57), "com"].join(".");
        assert.equal(longest.length, 253);
        for (const host of [
          "api.openai.com",
          "a.io",
          "x-1.example-corp.co.uk",
          "1password.com",
          "xn--bcher-kva.de",
          longest,
        ]) {
          const secret = await createSecret(t(), t().orgA.keys.owner, { dest_host: host });
          assert.equal(secret.dest_host, host);
        }
      });

      it("refuses dest_host forms that are not an exact public HTTPS host", async () => {
        const tooLong = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(58), "com"].join(".");
        assert.equal(tooLong.length, 254);
        const before = await countSecrets(t(), t().orgA.id);
        for (const host of [
          "https://api.openai.com",
          "http://api.openai.com",
          "api.openai.com:443",
          "api.openai.com/v1",
          "api.openai.com/",
          "api.openai.com?x=1",
          "user@api.openai.com",
          "1.2.3.4",
          "169.254.169.254",
          "[::1]",
          "::1",
          "localhost",
          "api.localhost",
          "API.OPENAI.COM",
          "Api.openai.com",
          "*.openai.com",
          "*",
          "metadata.google.internal",
          "printer.local",
          "router.lan",
          "svc.test",
          "openai",
          "api.openai.com.",
          ".openai.com",
          "api..openai.com",
          "-api.openai.com",
          "api-.openai.com",
          "api_v1.openai.com",
          " api.openai.com",
          "api.openai.com ",
          "api.openai.123",
          "10.0.0.1",
          `${"a".repeat(64)}.com`,
          tooLong,
        ]) {
          const res = await create(t(), t().orgA.keys.owner, { name: uniqueName(), value: "v", dest_host: host });
          assertError(res, 400, "invalid_argument");
        }
        assert.equal(await countSecrets(t(), t().orgA.id), before);
      });

      it("takes names of 1 to 128 characters of [A-Za-z0-9._-] starting with a letter or digit", async () => {
        const longest = `N${randomBytes(4).toString("hex")}${"n".repeat(119)}`;
        assert.equal(longest.length, 128);
        for (const name of [
          `a${randomBytes(2).toString("hex")}`,
          `OPENAI_API_KEY_${randomBytes(2).toString("hex")}`,
          `9.x-y_z.${randomBytes(2).toString("hex")}.`,
          longest,
        ]) {
          assert.equal((await createSecret(t(), t().orgA.keys.owner, { name })).name, name);
        }
        const before = await countSecrets(t(), t().orgA.id);
        for (const name of [
          "",
          `${longest}x`,
          "_leading",
          ".leading",
          "-leading",
          "has space",
          "has/slash",
          "has:colon",
          "ünïcode",
        ]) {
          assertError(
            await create(t(), t().orgA.keys.owner, { name, value: "v", dest_host: "api.openai.com" }),
            400,
            "invalid_argument",
          );
        }
        assert.equal(await countSecrets(t(), t().orgA.id), before);
      });

      it("takes values of 1 to 65,536 bytes, counted in UTF-8 bytes", async () => {
        const max = await createSecret(t(), t().orgA.keys.owner, { value: "v".repeat(65_536) });
        const maxTwoByte = await createSecret(t(), t().orgA.keys.owner, { value: "é".repeat(32_768) });
        for (const secret of [max, maxTwoByte]) {
          const delivered = await deliverToOwner(t().c.secrets, t().orgA, secret.name);
          assert.equal(delivered.ok, true);
          if (delivered.ok) assert.equal(Buffer.byteLength(delivered.value, "utf8"), 65_536);
        }
        const before = await countSecrets(t(), t().orgA.id);
        for (const value of ["", "v".repeat(65_537), "é".repeat(32_769), "€".repeat(21_846)]) {
          assertError(
            await create(t(), t().orgA.keys.owner, { name: uniqueName(), value, dest_host: "api.openai.com" }),
            400,
            "invalid_argument",
          );
        }
        for (const body of [{ value: 42 }, { value: null }, { name: uniqueName() }]) {
          assertError(
            await create(t(), t().orgA.keys.owner, { name: uniqueName(), dest_host: "api.openai.com", ...body }),
            400,
            "invalid_argument",
          );
        }
        assert.equal(await countSecrets(t(), t().orgA.id), before);
      });

      it("takes an optional future expires_at and refuses a past or malformed one", async () => {
        const future = new Date(Date.now() + 3_600_000).toISOString();
        const secret = await createSecret(t(), t().orgA.keys.owner, { expires_at: future });
        assert.equal(secret.expires_at, future);
        for (const expires_at of [new Date(Date.now() - 1000).toISOString(), "tomorrow", "2099-13-01T00:00:00Z"]) {
          assertError(
            await create(t(), t().orgA.keys.owner, {
              name: uniqueName(),
              value: "v",
              dest_host: "api.openai.com",
              expires_at,
            }),
            400,
            "invalid_argument",
          );
        }
      });

      it("refuses unknown fields", async () => {
        for (const extra of [{ id: "sec_mine" }, { current_version: 3 }, { org_id: t().orgB.id }]) {
          assertError(
            await create(t(), t().orgA.keys.owner, {
              name: uniqueName(),
              value: "v",
              dest_host: "api.openai.com",
              ...extra,
            }),
            400,
            "invalid_argument",
          );
        }
      });

      it("answers 409 already_exists for a duplicate name in the organization, but not across organizations", async () => {
        const first = await createSecret(t(), t().orgA.keys.owner, { value: "first" });
        const dup = await create(t(), t().orgA.keys.admin, {
          name: first.name,
          value: "second",
          dest_host: "api.openai.com",
        });
        assertError(dup, 409, "already_exists");
        const delivered = await deliverToOwner(t().c.secrets, t().orgA, first.name);
        assert.equal(delivered.ok && delivered.value, "first");
        const other = await createSecret(t(), t().orgB.keys.owner, { name: first.name, value: "org-b" });
        assert.notEqual(other.id, first.id);
      });

      it("requires an owner or admin: members, service accounts and workload keys get 403", async () => {
        const before = await countSecrets(t(), t().orgA.id);
        for (const key of [t().orgA.keys.member, t().orgA.keys.service, t().orgA.keys.workload]) {
          const res = await create(t(), key, { name: uniqueName(), value: "v", dest_host: "api.openai.com" });
          assertError(res, 403, "permission_denied");
        }
        for (const role of ["owner", "admin"] as const) {
          const res = await create(t(), await sandboxKey(t(), t().orgA, role), {
            name: uniqueName(),
            value: "v",
            dest_host: "api.openai.com",
          });
          assertError(res, 403, "permission_denied");
        }
        assert.equal(await countSecrets(t(), t().orgA.id), before);
      });

      it("grants the creator: a user by principal id, a service account by key id, a workload by workload id", async () => {
        const byUser = await createSecret(t(), t().orgA.keys.admin);
        assert.deepEqual(await grantsOf(t(), t().orgA.keys.member, byUser.id), [
          { secret_id: byUser.id, subject_kind: USER, subject_id: t().orgA.principalIds.admin },
        ]);
        const sa = await t().issueKey(t().orgA, { kind: "service_account", role: "admin" });
        const bySa = await createSecret(t(), sa.key);
        assert.equal(bySa.created_by, sa.principalId);
        assert.deepEqual(await grantsOf(t(), t().orgA.keys.member, bySa.id), [
          { secret_id: bySa.id, subject_kind: SERVICE_ACCOUNT, subject_id: sa.keyId },
        ]);
        // The harness binds extra workload keys to the workload named "extra".
        const registered = await t().request("POST", "/v1/workloads", {
          key: t().orgA.keys.member,
          body: { name: "extra" },
        });
        assert.equal(registered.status, 200, registered.raw);
        const workloadId = (registered.body.workload as WorkloadJson).id;
        const wk = await t().issueKey(t().orgA, { kind: "workload", role: "admin" });
        const byWorkload = await createSecret(t(), wk.key);
        assert.deepEqual(await grantsOf(t(), t().orgA.keys.member, byWorkload.id), [
          { secret_id: byWorkload.id, subject_kind: WORKLOAD, subject_id: workloadId },
        ]);
      });

      it("replays a retry with the same Idempotency-Key and refuses the key with a different value", async () => {
        const name = uniqueName();
        const headers = { "idempotency-key": `secret-${name}` };
        const body = { name, value: "first-value", dest_host: "api.openai.com" };
        const first = secretOf(await create(t(), t().orgA.keys.owner, body, headers));
        const again = await create(t(), t().orgA.keys.owner, body, headers);
        assert.deepEqual(secretOf(again), first);
        assert.equal(again.headers["idempotent-replayed"], "true");
        assertError(
          await create(t(), t().orgA.keys.owner, { ...body, value: "second-value" }, headers),
          409,
          "idempotency_conflict",
        );
        const delivered = await deliverToOwner(t().c.secrets, t().orgA, name);
        assert.equal(delivered.ok && delivered.value, "first-value");
      });
    });

    describe("ListSandboxSecrets", () => {
      it("lists newest first across pages, metadata only, to any member of the organization only", async () => {
        const slug = `org-${randomBytes(4).toString("hex")}`;
        const org = await t().c.identity.createOrganization({ slug });
        const owner = await t().c.identity.issueKey({
          orgId: org.id,
          kind: "user",
          role: "owner",
          email: `o@${slug}.test`,
          name: "owner",
        });
        const member = await t().c.identity.issueKey({
          orgId: org.id,
          kind: "user",
          role: "member",
          email: `m@${slug}.test`,
          name: "member",
        });
        const created: SecretJson[] = [];
        for (let i = 0; i < 5; i++) created.push(await createSecret(t(), owner.api_key, { value: `value-${i}` }));
        const seen: SecretJson[] = [];
        let token = "";
        let pages = 0;
        do {
          const res = await t().request("GET", "/v1/secrets", {
            key: member.api_key,
            query: { page_size: "2", ...(token ? { page_token: token } : {}) },
          });
          assert.equal(res.status, 200, res.raw);
          assert.deepEqual(Object.keys(res.body).sort(), ["next_page_token", "secrets"]);
          assert.equal(res.raw.includes("value-"), false);
          seen.push(...(res.body.secrets as SecretJson[]));
          token = res.body.next_page_token as string;
          pages += 1;
        } while (token && pages < 10);
        assert.equal(pages, 3);
        assert.deepEqual(seen, [...created].reverse());
        const orgA = await t().request("GET", "/v1/secrets", { key: t().orgA.keys.member });
        for (const s of orgA.body.secrets as SecretJson[]) assert.ok(!created.some((c) => c.id === s.id));
      });

      it("refuses foreign page tokens, bad page sizes and sandbox-scoped credentials", async () => {
        const key = t().orgA.keys.member;
        const queries: Record<string, string>[] = [
          { page_token: "garbage" },
          { page_token: Buffer.from(JSON.stringify(["runs", new Date().toISOString(), "x"])).toString("base64url") },
          { page_size: "0" },
          { page_size: "201" },
          { name: "x" },
        ];
        for (const query of queries) {
          assertError(await t().request("GET", "/v1/secrets", { key, query }), 400, "invalid_argument");
        }
        assertError(
          await t().request("GET", "/v1/secrets", { key: await sandboxKey(t(), t().orgA) }),
          403,
          "permission_denied",
        );
      });
    });

    describe("grants", () => {
      it("grants users, service accounts and workloads; idempotent; sorted by kind then id", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner);
        const agent = await t().request("GET", "/v1/workloads/agent", { key: t().orgA.keys.member });
        const agentId = (agent.body.workload as WorkloadJson).id;
        const extraSa = await t().issueKey(t().orgA, { kind: "service_account" });
        const wanted: [string, string][] = [
          [WORKLOAD, agentId],
          [SERVICE_ACCOUNT, t().orgA.keyIds.service],
          [USER, t().orgA.principalIds.member],
          [SERVICE_ACCOUNT, extraSa.keyId],
          [USER, t().orgA.principalIds.admin],
        ];
        for (const [kind, id] of wanted) {
          const res = await grant(t(), t().orgA.keys.admin, secret.id, kind, id);
          assert.equal(res.status, 200, res.raw);
          assert.deepEqual(res.body, { grant: { secret_id: secret.id, subject_kind: kind, subject_id: id } });
          const again = await grant(t(), t().orgA.keys.owner, secret.id, kind, id);
          assert.deepEqual(again.body, res.body);
        }
        const expected = [...wanted, [USER, t().orgA.principalIds.owner] as [string, string]]
          .map(([subject_kind, subject_id]) => ({ secret_id: secret.id, subject_kind, subject_id }))
          .sort((a, b) => {
            const order = [USER, SERVICE_ACCOUNT, WORKLOAD];
            return (
              order.indexOf(a.subject_kind) - order.indexOf(b.subject_kind) ||
              (a.subject_id < b.subject_id ? -1 : a.subject_id > b.subject_id ? 1 : 0)
            );
          });
        for (const role of ["member", "service", "workload"] as const) {
          assert.deepEqual(await grantsOf(t(), t().orgA.keys[role], secret.id), expected);
        }
        const { rows } = await t().c.db.query<{ n: string }>(
          "SELECT count(*)::text AS n FROM sandbox_secret_grants WHERE secret_id = $1",
          [secret.id],
        );
        assert.equal(Number(rows[0]?.n), 6);
      });

      it("refuses subjects that do not exist in the organization or are of the wrong kind", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner);
        const b = t().orgB;
        const a = t().orgA;
        const bAgent = await t().request("GET", "/v1/workloads/agent", { key: b.keys.member });
        const bAgentId = (bAgent.body.workload as WorkloadJson).id;
        for (const [kind, id] of [
          [USER, b.principalIds.member],
          [USER, a.principalIds.service],
          [USER, a.keyIds.member],
          [USER, "prn_missing"],
          [SERVICE_ACCOUNT, a.principalIds.service],
          [SERVICE_ACCOUNT, a.keyIds.member],
          [SERVICE_ACCOUNT, b.keyIds.service],
          [WORKLOAD, bAgentId],
          [WORKLOAD, "agent"],
          [WORKLOAD, a.principalIds.workload],
          ["SANDBOX_SECRET_GRANT_SUBJECT_KIND_UNSPECIFIED", a.principalIds.member],
          ["SANDBOX_SECRET_GRANT_SUBJECT_KIND_GROUP", a.principalIds.member],
          [USER, ""],
          [USER, "x".repeat(65)],
        ] as const) {
          assertError(await grant(t(), a.keys.owner, secret.id, kind, id), 400, "invalid_argument");
        }
        assertError(
          await t().request("POST", `/v1/secrets/${secret.id}/grants`, {
            key: a.keys.owner,
            body: { subject_kind: USER, subject_id: a.principalIds.member, extra: 1 },
          }),
          400,
          "invalid_argument",
        );
        assertError(
          await t().request("POST", `/v1/secrets/${secret.id}/grants`, {
            key: a.keys.owner,
            body: { id: "sec_other", subject_kind: USER, subject_id: a.principalIds.member },
          }),
          400,
          "invalid_argument",
        );
        assert.equal((await grantsOf(t(), a.keys.owner, secret.id)).length, 1);
      });

      it("requires an owner or admin to grant and ungrant; other organizations get 404", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner);
        const member = t().orgA.principalIds.member;
        for (const key of [t().orgA.keys.member, t().orgA.keys.service, t().orgA.keys.workload]) {
          assertError(await grant(t(), key, secret.id, USER, member), 403, "permission_denied");
          assertError(await ungrant(t(), key, secret.id, USER, t().orgA.principalIds.owner), 403, "permission_denied");
        }
        const sandboxed = await sandboxKey(t(), t().orgA);
        assertError(await grant(t(), sandboxed, secret.id, USER, member), 403, "permission_denied");
        assertError(await ungrant(t(), sandboxed, secret.id, USER, member), 403, "permission_denied");
        assertError(
          await t().request("GET", `/v1/secrets/${secret.id}/grants`, { key: sandboxed }),
          403,
          "permission_denied",
        );
        assertError(await grant(t(), t().orgB.keys.owner, secret.id, USER, member), 404, "not_found");
        assertError(
          await grant(t(), t().orgB.keys.owner, secret.id, USER, t().orgB.principalIds.member),
          404,
          "not_found",
        );
        assertError(
          await ungrant(t(), t().orgB.keys.owner, secret.id, USER, t().orgA.principalIds.owner),
          404,
          "not_found",
        );
        assertError(
          await t().request("GET", `/v1/secrets/${secret.id}/grants`, { key: t().orgB.keys.owner }),
          404,
          "not_found",
        );
        assertError(await grant(t(), t().orgA.keys.owner, "sec_missing", USER, member), 404, "not_found");
        assertError(await ungrant(t(), t().orgA.keys.owner, "sec_missing", USER, member), 404, "not_found");
        assertError(
          await t().request("GET", "/v1/secrets/sec_missing/grants", { key: t().orgA.keys.owner }),
          404,
          "not_found",
        );
        assert.deepEqual(await grantsOf(t(), t().orgA.keys.owner, secret.id), [
          { secret_id: secret.id, subject_kind: USER, subject_id: t().orgA.principalIds.owner },
        ]);
      });

      it("ungrants idempotently and the subject loses delivery", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner, { value: "granted-value" });
        const member = userSubject(t().orgA, "member");
        assert.equal((await grant(t(), t().orgA.keys.admin, secret.id, USER, member.id)).status, 200);
        const before = await t().c.secrets.resolveSecretForDelivery(t().orgA.id, secret.name, member, EGRESS);
        assert.equal(before.ok && before.value, "granted-value");
        for (const key of [t().orgA.keys.admin, t().orgA.keys.owner]) {
          const res = await ungrant(t(), key, secret.id, USER, member.id);
          assert.equal(res.status, 200, res.raw);
          assert.deepEqual(res.body, {});
        }
        assert.deepEqual(await t().c.secrets.resolveSecretForDelivery(t().orgA.id, secret.name, member, EGRESS), {
          ok: false,
          reason: "not_granted",
        });
        assert.deepEqual(await grantsOf(t(), t().orgA.keys.member, secret.id), [
          { secret_id: secret.id, subject_kind: USER, subject_id: t().orgA.principalIds.owner },
        ]);
        assertError(
          await ungrant(t(), t().orgA.keys.owner, secret.id, "SANDBOX_SECRET_GRANT_SUBJECT_KIND_GROUP", member.id),
          400,
          "invalid_argument",
        );
      });

      it("holds at most 200 grants including the creator grant", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner);
        const cred = await t().c.identity.authenticate(t().orgA.keys.member);
        const ids: string[] = [];
        const tag = randomBytes(3).toString("hex");
        for (let i = 0; i < 200; i++) {
          ids.push((await t().c.workloads.create(cred, { name: `grantee-${tag}-${i}` })).id);
        }
        // The creator grant plus 199 more makes 200.
        for (const id of ids.slice(0, 199)) {
          const res = await grant(t(), t().orgA.keys.admin, secret.id, WORKLOAD, id);
          assert.equal(res.status, 200, res.raw);
        }
        const full = await grantsOf(t(), t().orgA.keys.member, secret.id);
        assert.equal(full.length, 200);
        assert.deepEqual(full[0], {
          secret_id: secret.id,
          subject_kind: USER,
          subject_id: t().orgA.principalIds.owner,
        });
        assert.deepEqual(
          full.slice(1).map((g) => g.subject_id),
          ids.slice(0, 199).sort(),
        );
        const overflow = await grant(t(), t().orgA.keys.admin, secret.id, WORKLOAD, ids[199] as string);
        assertError(overflow, 400, "failed_precondition");
        assertError(
          await grant(t(), t().orgA.keys.admin, secret.id, USER, t().orgA.principalIds.member),
          400,
          "failed_precondition",
        );
        assert.equal((await grantsOf(t(), t().orgA.keys.member, secret.id)).length, 200);
        // Re-granting an existing subject at the limit is still idempotent.
        assert.equal((await grant(t(), t().orgA.keys.admin, secret.id, WORKLOAD, ids[0] as string)).status, 200);
        // Freeing one place admits one more.
        assert.equal((await ungrant(t(), t().orgA.keys.admin, secret.id, WORKLOAD, ids[0] as string)).status, 200);
        assert.equal((await grant(t(), t().orgA.keys.admin, secret.id, WORKLOAD, ids[199] as string)).status, 200);
        assert.equal((await grantsOf(t(), t().orgA.keys.member, secret.id)).length, 200);
      });
    });

    describe("RotateSandboxSecret and RevokeSandboxSecret", () => {
      it("rotates: current_version + 1, rotated_at stamped, the new value delivered, a fresh nonce per version", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner, { value: "version-one" });
        const rotated = secretOf(await rotate(t(), t().orgA.keys.admin, secret.id, { value: "version-two" }));
        assert.equal(rotated.id, secret.id);
        assert.equal(rotated.current_version, 2);
        assert.equal(rotated.created_at, secret.created_at);
        assert.ok(rotated.rotated_at);
        assert.equal(new Date(rotated.rotated_at).toISOString(), rotated.rotated_at);
        assert.ok(Date.parse(rotated.rotated_at) >= Date.parse(secret.created_at));
        const third = secretOf(
          await rotate(t(), t().orgA.keys.owner, secret.id, { id: secret.id, value: "version-3" }),
        );
        assert.equal(third.current_version, 3);
        const delivered = await deliverToOwner(t().c.secrets, t().orgA, secret.name);
        assert.deepEqual(delivered, {
          ok: true,
          value: "version-3",
          version: 3,
          secretId: secret.id,
          destHost: "api.openai.com",
        });
        const versions = await versionRows(t(), secret.id);
        assert.deepEqual(
          versions.map((v) => v.version),
          [1, 2, 3],
        );
        const nonces = new Set(versions.map((v) => v.nonce.toString("hex")));
        assert.equal(nonces.size, 3);
        for (const v of versions) {
          assert.equal(v.nonce.length, 12);
          for (const plain of ["version-one", "version-two", "version-3"]) {
            assert.equal(v.ciphertext.includes(Buffer.from(plain)), false);
          }
        }
        assert.equal(versions[0]?.ciphertext.length, "version-one".length + 16);
        const listed = await t().request("GET", "/v1/secrets", { key: t().orgA.keys.member });
        assert.deepEqual(
          (listed.body.secrets as SecretJson[]).find((s) => s.id === secret.id),
          third,
        );
      });

      it("refuses bad values, a mismatched body id, the wrong role and another organization", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner);
        for (const body of [
          { value: "" },
          { value: "v".repeat(65_537) },
          { value: "€".repeat(21_846) },
          {},
          { value: 1 },
        ]) {
          assertError(await rotate(t(), t().orgA.keys.owner, secret.id, body), 400, "invalid_argument");
        }
        assertError(
          await rotate(t(), t().orgA.keys.owner, secret.id, { id: "sec_other", value: "x" }),
          400,
          "invalid_argument",
        );
        for (const key of [
          t().orgA.keys.member,
          t().orgA.keys.service,
          t().orgA.keys.workload,
          await sandboxKey(t(), t().orgA),
        ]) {
          assertError(await rotate(t(), key, secret.id, { value: "x" }), 403, "permission_denied");
          assertError(await revoke(t(), key, secret.id), 403, "permission_denied");
        }
        assertError(await rotate(t(), t().orgB.keys.owner, secret.id, { value: "x" }), 404, "not_found");
        assertError(await revoke(t(), t().orgB.keys.owner, secret.id), 404, "not_found");
        assertError(await rotate(t(), t().orgA.keys.owner, "sec_missing", { value: "x" }), 404, "not_found");
        assertError(await revoke(t(), t().orgA.keys.owner, "sec_missing"), 404, "not_found");
        const { rows } = await t().c.db.query<{ current_version: number; revoked_at: Date | null }>(
          "SELECT current_version, revoked_at FROM sandbox_secrets WHERE id = $1",
          [secret.id],
        );
        assert.equal(Number(rows[0]?.current_version), 1);
        assert.equal(rows[0]?.revoked_at, null);
        assert.equal((await versionRows(t(), secret.id)).length, 1);
      });

      it("revokes: revoked_at stamped once, never delivered again, no rotation or new grants", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner, { value: "soon-revoked" });
        assert.equal(
          (await grant(t(), t().orgA.keys.owner, secret.id, USER, t().orgA.principalIds.member)).status,
          200,
        );
        const revoked = secretOf(await revoke(t(), t().orgA.keys.admin, secret.id));
        assert.ok(revoked.revoked_at);
        assert.equal(new Date(revoked.revoked_at).toISOString(), revoked.revoked_at);
        assert.equal(revoked.current_version, 1);
        const again = secretOf(await revoke(t(), t().orgA.keys.owner, secret.id, { id: secret.id }));
        assert.equal(again.revoked_at, revoked.revoked_at);
        assertError(await revoke(t(), t().orgA.keys.owner, secret.id, { id: "sec_other" }), 400, "invalid_argument");
        for (const role of ["owner", "member"] as const) {
          assert.deepEqual(
            await t().c.secrets.resolveSecretForDelivery(t().orgA.id, secret.name, userSubject(t().orgA, role), EGRESS),
            { ok: false, reason: "revoked" },
          );
        }
        assertError(
          await rotate(t(), t().orgA.keys.owner, secret.id, { value: "revived" }),
          400,
          "failed_precondition",
        );
        assertError(
          await grant(t(), t().orgA.keys.owner, secret.id, USER, t().orgA.principalIds.admin),
          400,
          "failed_precondition",
        );
        // An existing grant is still answered idempotently, and ungranting still works.
        assert.equal(
          (await grant(t(), t().orgA.keys.owner, secret.id, USER, t().orgA.principalIds.member)).status,
          200,
        );
        assert.equal(
          (await ungrant(t(), t().orgA.keys.owner, secret.id, USER, t().orgA.principalIds.member)).status,
          200,
        );
        const listed = await t().request("GET", "/v1/secrets", { key: t().orgA.keys.member });
        assert.equal(
          (listed.body.secrets as SecretJson[]).find((s) => s.id === secret.id)?.revoked_at,
          revoked.revoked_at,
        );
        assert.deepEqual(await deliverToOwner(t().c.secrets, t().orgA, secret.name), { ok: false, reason: "revoked" });
      });
    });

    describe("resolveSecretForDelivery", () => {
      it("releases a value only to an exact grant over the secret's own delivery", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner, { delivery: GATEWAY, value: "gw-value" });
        const c = t().c.secrets;
        const a = t().orgA;
        const ok = await c.resolveSecretForDelivery(a.id, secret.name, userSubject(a, "owner"), GATEWAY);
        assert.deepEqual(ok, {
          ok: true,
          value: "gw-value",
          version: 1,
          secretId: secret.id,
          destHost: "api.openai.com",
        });
        for (const delivery of [EGRESS, ENVIRONMENT] as const) {
          assert.deepEqual(await c.resolveSecretForDelivery(a.id, secret.name, userSubject(a, "owner"), delivery), {
            ok: false,
            reason: "wrong_delivery",
          });
        }
        // Metadata visibility is not authority: the member can list it but holds no grant.
        assert.deepEqual(await c.resolveSecretForDelivery(a.id, secret.name, userSubject(a, "member"), GATEWAY), {
          ok: false,
          reason: "not_granted",
        });
        // The same id under another kind is not the grant.
        for (const kind of [SERVICE_ACCOUNT, WORKLOAD] as const) {
          assert.deepEqual(
            await c.resolveSecretForDelivery(a.id, secret.name, { kind, id: a.principalIds.owner }, GATEWAY),
            { ok: false, reason: "not_granted" },
          );
        }
        // A service account is granted by key id, not principal id.
        assert.equal((await grant(t(), a.keys.owner, secret.id, SERVICE_ACCOUNT, a.keyIds.service)).status, 200);
        const bySa = await c.resolveSecretForDelivery(
          a.id,
          secret.name,
          { kind: SERVICE_ACCOUNT, id: a.keyIds.service },
          GATEWAY,
        );
        assert.equal(bySa.ok && bySa.value, "gw-value");
        assert.deepEqual(
          await c.resolveSecretForDelivery(
            a.id,
            secret.name,
            { kind: SERVICE_ACCOUNT, id: a.principalIds.service },
            GATEWAY,
          ),
          { ok: false, reason: "not_granted" },
        );
        // Another organization's name space, and unknown names.
        assert.deepEqual(await c.resolveSecretForDelivery(t().orgB.id, secret.name, userSubject(a, "owner"), GATEWAY), {
          ok: false,
          reason: "not_found",
        });
        assert.deepEqual(await c.resolveSecretForDelivery(a.id, uniqueName(), userSubject(a, "owner"), GATEWAY), {
          ok: false,
          reason: "not_found",
        });
      });

      it("delivers sandbox-environment secrets and workload grants", async () => {
        const env = secretOf(
          await create(t(), t().orgA.keys.owner, { name: uniqueName(), value: "env-value", delivery: ENVIRONMENT }),
        );
        const agent = await t().request("GET", "/v1/workloads/agent", { key: t().orgA.keys.member });
        const agentId = (agent.body.workload as WorkloadJson).id;
        assert.equal((await grant(t(), t().orgA.keys.owner, env.id, WORKLOAD, agentId)).status, 200);
        const delivered = await t().c.secrets.resolveSecretForDelivery(
          t().orgA.id,
          env.name,
          { kind: WORKLOAD, id: agentId },
          ENVIRONMENT,
        );
        assert.deepEqual(delivered, { ok: true, value: "env-value", version: 1, secretId: env.id, destHost: "" });
      });

      it("stops delivering once a secret expires", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner, {
          value: "expiring",
          expires_at: new Date(Date.now() + 3_600_000).toISOString(),
        });
        const subject = userSubject(t().orgA, "owner");
        const live = await t().c.secrets.resolveSecretForDelivery(t().orgA.id, secret.name, subject, EGRESS);
        assert.equal(live.ok && live.value, "expiring");
        await t().c.db.query("UPDATE sandbox_secrets SET expires_at = $2 WHERE id = $1", [
          secret.id,
          new Date(Date.now() - 1000),
        ]);
        assert.deepEqual(await t().c.secrets.resolveSecretForDelivery(t().orgA.id, secret.name, subject, EGRESS), {
          ok: false,
          reason: "expired",
        });
      });
    });

    describe("encryption at rest", () => {
      it("creates one data key per organization, even when its first secrets arrive concurrently", async () => {
        const slug = `org-${randomBytes(4).toString("hex")}`;
        const org = await t().c.identity.createOrganization({ slug });
        const owner = await t().c.identity.issueKey({
          orgId: org.id,
          kind: "user",
          role: "owner",
          email: `o@${slug}.test`,
          name: "owner",
        });
        const names = Array.from({ length: 6 }, () => uniqueName());
        const results = await Promise.all(
          names.map((name, i) =>
            create(t(), owner.api_key, { name, value: `concurrent-${i}`, dest_host: "api.openai.com" }),
          ),
        );
        for (const res of results) secretOf(res);
        const keys = (await dataKeyRows(t())).filter((k) => k.org_id === org.id);
        assert.equal(keys.length, 1);
        for (const [i, name] of names.entries()) {
          const read = await t().c.secrets.resolveSecretForDelivery(
            org.id,
            name,
            { kind: USER, id: owner.principal_id },
            EGRESS,
          );
          assert.equal(read.ok && read.value, `concurrent-${i}`);
        }
        // Every version of the organization is sealed under that one key.
        const { rows } = await t().c.db.query<{ data_key_id: string }>(
          `SELECT v.data_key_id FROM sandbox_secret_versions v JOIN sandbox_secrets s ON s.id = v.secret_id
            WHERE s.org_id = $1`,
          [org.id],
        );
        assert.equal(rows.length, 6);
        for (const row of rows) assert.equal(row.data_key_id, keys[0]?.id);
      });

      it("fails to decrypt a ciphertext moved to another secret row of the same organization", async () => {
        const source = await createSecret(t(), t().orgA.keys.owner, { value: "source-value" });
        const target = await createSecret(t(), t().orgA.keys.owner, { value: "target-value" });
        const [from] = await versionRows(t(), source.id);
        assert.ok(from);
        await t().c.db.query(
          "UPDATE sandbox_secret_versions SET nonce = $2, ciphertext = $3, data_key_id = $4 WHERE secret_id = $1 AND version = 1",
          [target.id, from.nonce, from.ciphertext, from.dataKeyId],
        );
        await assertNotDelivered(deliverToOwner(t().c.secrets, t().orgA, target.name), "source-value");
        // The source itself is untouched.
        const still = await deliverToOwner(t().c.secrets, t().orgA, source.name);
        assert.equal(still.ok && still.value, "source-value");
      });

      it("fails to decrypt a ciphertext moved into another organization's secret", async () => {
        const source = await createSecret(t(), t().orgB.keys.owner, { value: "org-b-value" });
        const target = await createSecret(t(), t().orgA.keys.owner, { value: "org-a-value" });
        const [from] = await versionRows(t(), source.id);
        const [to] = await versionRows(t(), target.id);
        assert.ok(from && to);
        assert.notEqual(from.dataKeyId, to.dataKeyId);
        // With org A's own data key id: the wrong key and the wrong additional data.
        await t().c.db.query(
          "UPDATE sandbox_secret_versions SET nonce = $2, ciphertext = $3 WHERE secret_id = $1 AND version = 1",
          [target.id, from.nonce, from.ciphertext],
        );
        await assertNotDelivered(deliverToOwner(t().c.secrets, t().orgA, target.name), "org-b-value");
        // With org B's data key id as well: a data key of another organization is never used.
        await t().c.db.query(
          "UPDATE sandbox_secret_versions SET data_key_id = $2 WHERE secret_id = $1 AND version = 1",
          [target.id, from.dataKeyId],
        );
        await assertNotDelivered(deliverToOwner(t().c.secrets, t().orgA, target.name), "org-b-value");
      });

      it("fails to decrypt an older version's ciphertext replayed as the current version", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner, { value: "old-value" });
        secretOf(await rotate(t(), t().orgA.keys.owner, secret.id, { value: "new-value" }));
        const [v1] = await versionRows(t(), secret.id);
        assert.ok(v1);
        await t().c.db.query(
          "UPDATE sandbox_secret_versions SET nonce = $2, ciphertext = $3 WHERE secret_id = $1 AND version = 2",
          [secret.id, v1.nonce, v1.ciphertext],
        );
        await assertNotDelivered(deliverToOwner(t().c.secrets, t().orgA, secret.name), "old-value");
      });

      it("fails to unwrap a data key moved to another organization's row", async () => {
        // Both organizations have a data key by now; give org A's row org B's wrapped key.
        await createSecret(t(), t().orgA.keys.owner);
        await createSecret(t(), t().orgB.keys.owner);
        const keys = await dataKeyRows(t());
        const a = keys.find((k) => k.org_id === t().orgA.id);
        const b = keys.find((k) => k.org_id === t().orgB.id);
        assert.ok(a && b);
        const secret = await createSecret(t(), t().orgA.keys.owner, { value: "wrapped-check" });
        try {
          await t().c.db.query("UPDATE secret_data_keys SET wrapped_key = $2 WHERE id = $1", [a.id, b.wrapped_key]);
          await assertNotDelivered(deliverToOwner(t().c.secrets, t().orgA, secret.name), "wrapped-check");
        } finally {
          await t().c.db.query("UPDATE secret_data_keys SET wrapped_key = $2 WHERE id = $1", [a.id, a.wrapped_key]);
        }
        const restored = await deliverToOwner(t().c.secrets, t().orgA, secret.name);
        assert.equal(restored.ok && restored.value, "wrapped-check");
      });

      it("re-wraps every data key under a new configured master key without touching values", async () => {
        const a = await createSecret(t(), t().orgA.keys.owner, { value: "before-rotation-a" });
        const b = await createSecret(t(), t().orgB.keys.owner, { value: "before-rotation-b" });
        const keysBefore = await dataKeyRows(t());
        assert.ok(keysBefore.length >= 2);
        for (const k of keysBefore) assert.equal(k.master_key_id, keyId(Buffer.from(MASTER_1, "base64")));
        const versionsBefore = [...(await versionRows(t(), a.id)), ...(await versionRows(t(), b.id))];

        const rotator = new SecretService(t().c.db, t().c.clock, Keyring.fromConfig(MASTER_2, [MASTER_1]));
        const result = await rotator.rotateMasterKey();
        assert.deepEqual(result, {
          master_key_id: keyId(Buffer.from(MASTER_2, "base64")),
          data_keys_rewrapped: keysBefore.length,
        });
        const keysAfter = await dataKeyRows(t());
        assert.deepEqual(
          keysAfter.map((k) => k.id),
          keysBefore.map((k) => k.id),
        );
        for (const [i, k] of keysAfter.entries()) {
          assert.equal(k.master_key_id, result.master_key_id);
          assert.equal(k.wrapped_key.equals(keysBefore[i]?.wrapped_key as Buffer), false);
        }
        const versionsAfter = [...(await versionRows(t(), a.id)), ...(await versionRows(t(), b.id))];
        assert.deepEqual(versionsAfter, versionsBefore);
        assert.deepEqual(await rotator.rotateMasterKey(), {
          master_key_id: result.master_key_id,
          data_keys_rewrapped: 0,
        });

        // Only the new key is needed now; a server holding only the old one can no longer read.
        const onlyNew = new SecretService(t().c.db, t().c.clock, Keyring.fromConfig(MASTER_2, []));
        const readA = await deliverToOwner(onlyNew, t().orgA, a.name);
        assert.equal(readA.ok && readA.value, "before-rotation-a");
        const readB = await deliverToOwner(onlyNew, t().orgB, b.name);
        assert.equal(readB.ok && readB.value, "before-rotation-b");
        await assert.rejects(deliverToOwner(t().c.secrets, t().orgA, a.name));

        // Rotate back so the suite's own keyring (MASTER_1) serves the remaining tests.
        const back = new SecretService(t().c.db, t().c.clock, Keyring.fromConfig(MASTER_1, [MASTER_2]));
        assert.equal((await back.rotateMasterKey()).data_keys_rewrapped, keysBefore.length);
        const readBack = await deliverToOwner(t().c.secrets, t().orgA, a.name);
        assert.equal(readBack.ok && readBack.value, "before-rotation-a");
      });
    });

    describe("authentication", () => {
      it("answers 401 on every secret route without a valid credential", async () => {
        const secret = await createSecret(t(), t().orgA.keys.owner);
        const routes: [string, string, unknown][] = [
          ["POST", "/v1/secrets", { name: uniqueName(), value: "v", dest_host: "api.openai.com" }],
          ["GET", "/v1/secrets", undefined],
          ["POST", `/v1/secrets/${secret.id}/grants`, { subject_kind: USER, subject_id: t().orgA.principalIds.member }],
          ["DELETE", `/v1/secrets/${secret.id}/grants/${USER}/${t().orgA.principalIds.owner}`, undefined],
          ["GET", `/v1/secrets/${secret.id}/grants`, undefined],
          ["POST", `/v1/secrets/${secret.id}:rotate`, { value: "v2" }],
          ["POST", `/v1/secrets/${secret.id}:revoke`, {}],
        ];
        const before = await countSecrets(t(), t().orgA.id);
        for (const [method, url, body] of routes) {
          for (const bad of BAD_CREDENTIALS) {
            const res = await t().request(method, url, { headers: bad.headers, ...(body ? { body } : {}) });
            assertError(res, 401, "unauthenticated");
          }
        }
        assert.equal(await countSecrets(t(), t().orgA.id), before);
        const after = await grantsOf(t(), t().orgA.keys.owner, secret.id);
        assert.deepEqual(after, [
          { secret_id: secret.id, subject_kind: USER, subject_id: t().orgA.principalIds.owner },
        ]);
        const listed = await t().request("GET", "/v1/secrets", { key: t().orgA.keys.member });
        const row = (listed.body.secrets as SecretJson[]).find((s) => s.id === secret.id);
        assert.equal(row?.current_version, 1);
        assert.equal(row?.revoked_at, undefined);
      });
    });

    describe("no value leaves the server", () => {
      it("keeps a recognisable value out of every response, header, log line, stored reply and the OpenAPI document", async () => {
        const canary = `CANARY-${randomBytes(16).toString("hex")}`;
        const rotatedCanary = `ROTATED-${randomBytes(16).toString("hex")}`;
        const responses: TestResponse[] = [];
        const call = async (method: string, url: string, opts: Parameters<TestApp["request"]>[2] = {}) => {
          const res = await t().request(method, url, opts);
          responses.push(res);
          return res;
        };
        const a = t().orgA;
        const b = t().orgB;
        const name = uniqueName("LEAK");
        const body = { name, value: canary, dest_host: "api.openai.com" };

        // Create: success, replay, and every kind of refusal carrying the value.
        const created = secretOf(
          await call("POST", "/v1/secrets", {
            key: a.keys.owner,
            body,
            headers: { "idempotency-key": `leak-${name}` },
          }),
        );
        assert.equal(
          (
            await call("POST", "/v1/secrets", {
              key: a.keys.owner,
              body,
              headers: { "idempotency-key": `leak-${name}` },
            })
          ).status,
          200,
        );
        const refusals: [string | null, Record<string, unknown>, number][] = [
          [a.keys.owner, { ...body, value: rotatedCanary }, 409], // idempotency conflict (same key below)
          [a.keys.owner, body, 409], // duplicate name
          [a.keys.member, { ...body, name: uniqueName() }, 403],
          [a.keys.service, { ...body, name: uniqueName() }, 403],
          [await sandboxKey(t(), a), { ...body, name: uniqueName() }, 403],
          [null, { ...body, name: uniqueName() }, 401],
          [a.keys.owner, { ...body, name: "bad name" }, 400],
          [a.keys.owner, { ...body, name: uniqueName(), dest_host: "https://evil.example.com:8443/x" }, 400],
          [a.keys.owner, { ...body, name: uniqueName(), dest_host: "" }, 400],
          [a.keys.owner, { ...body, name: uniqueName(), delivery: ENVIRONMENT }, 400],
          [a.keys.owner, { ...body, name: uniqueName(), delivery: "NOPE" }, 400],
          [a.keys.owner, { ...body, name: uniqueName(), expires_at: "2000-01-01T00:00:00Z" }, 400],
          [a.keys.owner, { ...body, name: uniqueName(), value: canary.repeat(Math.ceil(65_537 / canary.length)) }, 400],
          [a.keys.owner, { ...body, name: uniqueName(), value: `${canary}${"€".repeat(21_846)}` }, 400],
          [a.keys.owner, { ...body, name: uniqueName(), extra: canary }, 400],
        ];
        for (const [i, [key, payload, status]] of refusals.entries()) {
          const headers: Record<string, string> = i === 0 ? { "idempotency-key": `leak-${name}` } : {};
          const res = await call("POST", "/v1/secrets", { key, body: payload, headers });
          assert.equal(res.status, status, `refusal ${i}: ${res.raw}`);
        }
        // Malformed JSON and the wrong media type, with the value inside.
        for (const [payload, contentType] of [
          [`{"name":"${uniqueName()}","value":"${canary}"`, "application/json"],
          [`{"name":"${uniqueName()}","value":"${canary}",}`, "application/json"],
          [`name=x&value=${canary}`, "application/x-www-form-urlencoded"],
        ] as const) {
          const res = await call("POST", "/v1/secrets", {
            key: a.keys.owner,
            body: payload,
            headers: { "content-type": contentType },
          });
          assert.ok(res.status === 400 || res.status === 415, res.raw);
        }

        // The other routes, successes and refusals alike.
        await call("GET", "/v1/secrets", { key: a.keys.member });
        await call("GET", "/v1/secrets", { key: b.keys.member });
        await call("POST", `/v1/secrets/${created.id}/grants`, {
          key: a.keys.admin,
          body: { subject_kind: USER, subject_id: a.principalIds.member },
        });
        await call("POST", `/v1/secrets/${created.id}/grants`, {
          key: a.keys.member,
          body: { subject_kind: USER, subject_id: a.principalIds.member },
        });
        await call("POST", `/v1/secrets/${created.id}/grants`, {
          key: b.keys.owner,
          body: { subject_kind: USER, subject_id: b.principalIds.member },
        });
        await call("GET", `/v1/secrets/${created.id}/grants`, { key: a.keys.member });
        await call("GET", `/v1/secrets/${created.id}/grants`, { key: b.keys.member });
        await call("DELETE", `/v1/secrets/${created.id}/grants/${USER}/${a.principalIds.member}`, {
          key: a.keys.member,
        });
        await call("DELETE", `/v1/secrets/${created.id}/grants/${USER}/${a.principalIds.member}`, {
          key: a.keys.admin,
        });
        for (const [key, payload, status] of [
          [a.keys.member, { value: rotatedCanary }, 403],
          [b.keys.owner, { value: rotatedCanary }, 404],
          [a.keys.owner, { value: `${rotatedCanary}${"v".repeat(65_536)}` }, 400],
          [a.keys.owner, { id: "sec_other", value: rotatedCanary }, 400],
          [a.keys.owner, { value: rotatedCanary, extra: canary }, 400],
          [null, { value: rotatedCanary }, 401],
          [a.keys.admin, { value: rotatedCanary }, 200],
        ] as const) {
          const res = await call("POST", `/v1/secrets/${created.id}:rotate`, { key, body: payload });
          assert.equal(res.status, status, res.raw);
        }
        await call("POST", `/v1/secrets/${created.id}:rotate`, { key: a.keys.owner, body: { value: rotatedCanary } });
        await call("POST", "/v1/secrets/sec_missing:rotate", { key: a.keys.owner, body: { value: rotatedCanary } });
        await call("POST", `/v1/secrets/${created.id}:revoke`, { key: a.keys.member });
        await call("POST", `/v1/secrets/${created.id}:revoke`, { key: b.keys.owner });

        // Sanity: the secret really holds the recognisable value, so the scan below can find it.
        const delivered = await t().c.secrets.resolveSecretForDelivery(
          a.id,
          name,
          { kind: USER, id: a.principalIds.owner },
          EGRESS,
        );
        assert.equal(delivered.ok && delivered.value, rotatedCanary);

        await call("POST", `/v1/secrets/${created.id}:revoke`, { key: a.keys.admin });
        await call("POST", `/v1/secrets/${created.id}:rotate`, { key: a.keys.owner, body: { value: canary } });
        await call("GET", "/v1/secrets", { key: a.keys.owner });
        const openapi = await call("GET", "/v1/openapi.json");
        assert.equal(openapi.status, 200);
        assert.ok(openapi.raw.includes("CreateSandboxSecret"));

        const statuses = new Set(responses.map((r) => r.status));
        for (const status of [200, 400, 401, 403, 404, 409]) assert.ok(statuses.has(status), `no ${status} exercised`);
        const { rows } = await t().c.db.query<{ response_body: string | null }>(
          "SELECT response_body FROM idempotency_keys WHERE org_id = $1",
          [a.id],
        );
        assert.ok(rows.some((row) => (row.response_body ?? "").includes(created.id)));
        const logs = t().logs();
        assert.ok(logs.includes(`/v1/secrets/${created.id}:rotate`), "the request log lines were captured");
        const haystacks = [
          ...responses.map((r) => `${r.raw}\n${JSON.stringify(r.headers)}`),
          logs,
          ...rows.map((row) => row.response_body ?? ""),
        ];
        for (const value of [canary, rotatedCanary]) {
          for (const needle of [
            value,
            value.toLowerCase(),
            Buffer.from(value).toString("base64"),
            Buffer.from(value).toString("hex"),
          ]) {
            for (const hay of haystacks)
              assert.equal(hay.includes(needle), false, `value found in: ${hay.slice(0, 300)}`);
          }
        }
      });
    });
  },
  { overrides: { keyring: Keyring.fromConfig(MASTER_1, []) } },
);

// Keys kept in the data dir: rotation generates a new key, re-wraps, and forgets the old one.
for (const store of STORE_KINDS) {
  describe(`secrets master-key file rotation [${store}]`, () => {
    let dir = "";
    let app: TestApp | null = null;
    const t = () => {
      if (!app) throw new Error("test app not started");
      return app;
    };
    before(async () => {
      dir = await mkdtemp(path.join(os.tmpdir(), "warren-keys-"));
      app = await startTestApp(store, { overrides: { keyring: await Keyring.fromDataDir(dir) } });
    });
    after(async () => {
      await app?.close();
      await rm(dir, { recursive: true, force: true });
    });

    it("rotates the key file's master key and keeps every value readable", async () => {
      const a = await createSecret(t(), t().orgA.keys.owner, { value: "file-key-a" });
      const b = await createSecret(t(), t().orgB.keys.owner, { value: "file-key-b" });
      const file = path.join(dir, KEY_FILE);
      assert.equal((await stat(file)).mode & 0o777, 0o600);
      const first = JSON.parse(await readFile(file, "utf8")) as { current: string; keys: string[] };
      assert.deepEqual(first.keys, [first.current]);
      const oldId = keyId(Buffer.from(first.current, "base64"));
      const versionsBefore = [...(await versionRows(t(), a.id)), ...(await versionRows(t(), b.id))];

      const result = await t().c.secrets.rotateMasterKey();
      assert.notEqual(result.master_key_id, oldId);
      assert.equal(result.data_keys_rewrapped, 2);
      const second = JSON.parse(await readFile(file, "utf8")) as { current: string; keys: string[] };
      assert.deepEqual(second.keys, [second.current]);
      assert.notEqual(second.current, first.current);
      assert.equal(keyId(Buffer.from(second.current, "base64")), result.master_key_id);
      assert.equal((await stat(file)).mode & 0o777, 0o600);
      for (const k of await dataKeyRows(t())) assert.equal(k.master_key_id, result.master_key_id);
      const versionsAfter = [...(await versionRows(t(), a.id)), ...(await versionRows(t(), b.id))];
      assert.deepEqual(versionsAfter, versionsBefore);

      for (const [org, secret, value] of [
        [t().orgA, a, "file-key-a"],
        [t().orgB, b, "file-key-b"],
      ] as const) {
        const read = await deliverToOwner(t().c.secrets, org, secret.name);
        assert.equal(read.ok && read.value, value);
      }
      // A restarted server reads the rotated file and still decrypts; new secrets work too.
      const restarted = new SecretService(t().c.db, t().c.clock, await Keyring.fromDataDir(dir));
      const read = await deliverToOwner(restarted, t().orgA, a.name);
      assert.equal(read.ok && read.value, "file-key-a");
      const later = await createSecret(t(), t().orgA.keys.owner, { value: "after-rotation" });
      const readLater = await deliverToOwner(restarted, t().orgA, later.name);
      assert.equal(readLater.ok && readLater.value, "after-rotation");
    });
  });
}
