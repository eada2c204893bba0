// Fixtures shared by the HTTP test files: isolated organizations, row counts, paging
// through a list route, and sandbox-scoped keys.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import type { RuntimeDriver } from "../../src/drivers/runtime/interface.js";
import type { TestApp, TestOrg } from "../harness.js";

/**
 * A new organization with one user key of `role` (email `<role>@<slug>.test`, key name
 * `<role>`), so list tests see only their own rows.
 */
export async function freshOrg(t: TestApp, role: "owner" | "member") {
  const slug = `org-${randomBytes(4).toString("hex")}`;
  const org = await t.c.identity.createOrganization({ slug });
  const issued = await t.c.identity.issueKey({
    orgId: org.id,
    kind: "user",
    role,
    email: `${role}@${slug}.test`,
    name: role,
  });
  return { id: org.id, defaultProjectId: org.default_project_id, key: issued.api_key };
}

/** `SELECT count(*) FROM <from>`: `from` is a table and its WHERE clause, e.g. "runs WHERE org_id = $1". */
export async function countRows(t: TestApp, from: string, params: unknown[]): Promise<number> {
  const { rows } = await t.c.db.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${from}`, params);
  return Number(rows[0]?.n);
}

/**
 * Every page of a list route, following next_page_token until it is empty: each page must
 * answer 200 with a string token. `field` names the body's list, e.g. "runs".
 */
export async function listPages<T>(
  t: TestApp,
  url: string,
  field: string,
  key: string,
  pageSize: number,
  filter: Record<string, string> = {},
): Promise<T[][]> {
  const pages: T[][] = [];
  let token = "";
  for (let i = 0; i < 100; i++) {
    const res = await t.request("GET", url, {
      key,
      query: { ...filter, page_size: String(pageSize), ...(token ? { page_token: token } : {}) },
    });
    assert.equal(res.status, 200, res.raw);
    pages.push(res.body[field] as T[]);
    token = res.body.next_page_token as string;
    assert.equal(typeof token, "string");
    if (!token) return pages;
  }
  throw new Error("paging did not end");
}

/** A user key of `role` in `org` scoped to the root sandbox `sandboxId`. */
export async function sandboxScopedKey(
  t: TestApp,
  org: TestOrg,
  sandboxId: string,
  role: "owner" | "admin" | "member" = "owner",
): Promise<string> {
  return (await t.issueKey(org, { kind: "user", role, sandbox: { sandboxId, lineagePath: sandboxId } })).key;
}

/**
 * A runtime for tests of the API alone: with no reconciler running, CreateSandbox only writes
 * the row (state `requested`), so sandboxes exist to read, update and refuse without runc or
 * an image registry. Any call that would reach a host (exec, a network switch) fails loudly.
 */
export const API_ONLY_RUNTIME: RuntimeDriver = new Proxy(
  { kind: "api-only", close: async () => undefined } as unknown as RuntimeDriver,
  {
    get(target, property) {
      if (property in target) return target[property as keyof RuntimeDriver];
      // Optional methods (metrics, storage and compute admission) are absent, as from a driver that does not offer them.
      const optional = [
        "then",
        "imagePullBytes",
        "servedFromPool",
        "measureStorage",
        "storageReport",
        "hostCompute",
        "cacheHints",
      ];
      if (typeof property === "string" && optional.includes(property)) return undefined;
      return () => Promise.reject(new Error(`the API-only test runtime has no ${String(property)}`));
    },
  },
);
