// CreateFeedback (contract 4.2, 5.10, 8): every limit just inside and just outside, the
// enums, de-duplication by fingerprint (given or derived, per organization), who may submit,
// and relaying to a real webhook server: relayed only on a 2xx, stored either way.
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, it } from "node:test";
import type { FeedbackCreatedJson } from "../src/modules/feedback/schemas.js";
import { forEachStore, type KeyRole, type TestApp, type TestOrg } from "./harness.js";

const SURFACES = ["cli", "api", "web", "sandbox", "telemetry", "annotations", "docs", "other"];
const SEVERITIES = ["critical", "high", "medium", "low", ""];
const LONG_FIELDS = ["body", "expected", "actual", "repro"] as const;
const SANDBOX_ID = `sbx-${"a".repeat(40)}`;

let seq = 0;
/** A minimal valid report with a title unique to this run, so no two tests collide by content. */
function report(extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq += 1;
  return { title: `report ${seq} ${Date.now()}`, surface: "api", ...extra };
}

async function submit(t: TestApp, body: unknown, key: string = t.orgA.keys.member) {
  return t.request("POST", "/v1/feedback", { key, body });
}

function assertAccepted(res: Awaited<ReturnType<TestApp["request"]>>): FeedbackCreatedJson {
  assert.equal(res.status, 200, res.raw);
  assert.deepEqual(Object.keys(res.body).sort(), ["id", "relayed"]);
  assert.equal(typeof res.body.id, "string");
  assert.ok((res.body.id as string).length > 0);
  assert.equal(typeof res.body.relayed, "boolean");
  return res.body as FeedbackCreatedJson;
}

function assertRejected(res: Awaited<ReturnType<TestApp["request"]>>, field: string) {
  assert.equal(res.status, 400, res.raw);
  assert.equal(res.body.code, "invalid_argument");
  assert.ok(String(res.body.message).includes(field), `message should name ${field}: ${res.body.message}`);
  assert.equal(res.body.request_id, res.headers["x-request-id"]);
  for (const key of Object.keys(res.body)) assert.ok(["code", "message", "details", "request_id"].includes(key));
}

async function storedRow(t: TestApp, id: string) {
  const { rows } = await t.c.db.query<Record<string, unknown>>("SELECT * FROM feedback WHERE id = $1", [id]);
  assert.equal(rows.length, 1, `feedback ${id} is not stored`);
  return rows[0] as Record<string, unknown>;
}

async function countRows(t: TestApp, where: string, params: unknown[]): Promise<number> {
  const { rows } = await t.c.db.query<{ n: string }>(`SELECT count(*)::text AS n FROM feedback WHERE ${where}`, params);
  return Number(rows[0]?.n);
}

// A real HTTP review channel on 127.0.0.1; each test sets how it answers.
type WebhookMode = "ok" | "accepted" | "error" | "hangup" | "silent";
interface Delivery {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}
let webhookMode: WebhookMode = "ok";
const deliveries: Delivery[] = [];
const silentResponses: ServerResponse[] = [];
const webhook = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    deliveries.push({
      method: req.method ?? "",
      url: req.url ?? "",
      headers: req.headers,
      body: Buffer.concat(chunks).toString("utf8"),
    });
    switch (webhookMode) {
      case "ok":
        res.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}');
        break;
      case "accepted":
        res.writeHead(202).end();
        break;
      case "error":
        res.writeHead(500, { "content-type": "text/plain" }).end("review channel down");
        break;
      case "hangup":
        req.socket.destroy();
        break;
      case "silent":
        silentResponses.push(res);
        break;
    }
  });
});
await new Promise<void>((resolve) => webhook.listen(0, "127.0.0.1", resolve));
const webhookUrl = `http://127.0.0.1:${(webhook.address() as AddressInfo).port}/hooks/feedback`;
after(async () => {
  for (const res of silentResponses) res.destroy();
  webhook.closeAllConnections();
  await new Promise<void>((resolve) => webhook.close(() => resolve()));
});

forEachStore("feedback", (t) => {
  it("accepts a minimal report from an org-scoped key and stores it with defaults", async () => {
    const body = report({ surface: "cli" });
    const created = assertAccepted(await submit(t(), body));
    assert.equal(created.relayed, false);
    const row = await storedRow(t(), created.id);
    assert.equal(row.org_id, t().orgA.id);
    assert.equal(row.principal_id, t().orgA.principalIds.member);
    assert.equal(row.title, body.title);
    assert.equal(row.surface, "cli");
    assert.equal(row.severity, "");
    assert.equal(row.body, "");
    assert.deepEqual(row.evidence, []);
    assert.equal(row.relayed, false);
  });

  it("stores every field of a full report", async () => {
    const body = report({
      surface: "telemetry",
      body: "the body",
      expected: "it works",
      actual: "it broke",
      repro: "1. run it",
      severity: "high",
      fingerprint: `fp-full-${seq}`,
      svc_version: "1.2.3",
      evidence: ["log line", "https://example.test/trace/1"],
    });
    const created = assertAccepted(await submit(t(), body));
    const row = await storedRow(t(), created.id);
    for (const field of ["title", "surface", "body", "expected", "actual", "repro", "severity", "fingerprint"]) {
      assert.equal(row[field], body[field], field);
    }
    assert.equal(row.svc_version, "1.2.3");
    assert.deepEqual(row.evidence, body.evidence);
  });

  // Limits of contract section 8: just inside is stored unchanged, just outside is refused.
  it("accepts a 300-character title and refuses 301 characters or an empty title", async () => {
    const inside = assertAccepted(
      await submit(t(), report({ title: `${"t".repeat(296)}${String(seq).padStart(4, "0")}` })),
    );
    assert.equal(String((await storedRow(t(), inside.id)).title).length, 300);
    assertRejected(await submit(t(), report({ title: "t".repeat(301) })), "title");
    assertRejected(await submit(t(), report({ title: "" })), "title");
  });

  it("counts title characters, not UTF-16 units or bytes", async () => {
    const title = `${"é".repeat(150)}${"😀".repeat(150)}`;
    const created = assertAccepted(await submit(t(), report({ title })));
    assert.equal((await storedRow(t(), created.id)).title, title);
    assertRejected(await submit(t(), report({ title: `${title}😀` })), "title");
  });

  it("refuses a report without a title or a surface", async () => {
    assertRejected(await submit(t(), { surface: "api" }), "title");
    assertRejected(await submit(t(), { title: "no surface" }), "surface");
  });

  for (const field of LONG_FIELDS) {
    it(`accepts ${field} of 10000 characters and refuses 10001`, async () => {
      const text = `${field}:`.padEnd(10_000, "x");
      const created = assertAccepted(await submit(t(), report({ [field]: text })));
      assert.equal((await storedRow(t(), created.id))[field], text);
      assertRejected(await submit(t(), report({ [field]: `${text}x` })), field);
    });
  }

  it("accepts 50 evidence entries and refuses 51", async () => {
    const evidence = Array.from({ length: 50 }, (_, i) => `evidence ${i}`);
    const created = assertAccepted(await submit(t(), report({ evidence })));
    assert.deepEqual((await storedRow(t(), created.id)).evidence, evidence);
    assertRejected(await submit(t(), report({ evidence: [...evidence, "one too many"] })), "evidence");
  });

  it("accepts an evidence entry of 256 characters and refuses 257", async () => {
    const entry = "e".repeat(256);
    const created = assertAccepted(await submit(t(), report({ evidence: ["short", entry] })));
    assert.deepEqual((await storedRow(t(), created.id)).evidence, ["short", entry]);
    assertRejected(await submit(t(), report({ evidence: ["short", `${entry}e`] })), "evidence");
  });

  it("refuses evidence that is not an array of strings", async () => {
    assertRejected(await submit(t(), report({ evidence: "one string" })), "evidence");
    assertRejected(await submit(t(), report({ evidence: [1, 2] })), "evidence");
  });

  it("accepts a 300-character fingerprint and refuses 301", async () => {
    const fingerprint = `fp-${seq}-`.padEnd(300, "f");
    const created = assertAccepted(await submit(t(), report({ fingerprint })));
    assert.equal((await storedRow(t(), created.id)).fingerprint, fingerprint);
    assertRejected(await submit(t(), report({ fingerprint: `${fingerprint}f` })), "fingerprint");
  });

  it("accepts a 100-character svc_version and refuses 101", async () => {
    const version = "v".repeat(100);
    const created = assertAccepted(await submit(t(), report({ svc_version: version })));
    assert.equal((await storedRow(t(), created.id)).svc_version, version);
    assertRejected(await submit(t(), report({ svc_version: `${version}v` })), "svc_version");
  });

  it("accepts a report at every limit at once", async () => {
    const body = report({
      body: "b".repeat(10_000),
      expected: "e".repeat(10_000),
      actual: "a".repeat(10_000),
      repro: "r".repeat(10_000),
      fingerprint: `max-${seq}`.padEnd(300, "m"),
      svc_version: "s".repeat(100),
      evidence: Array.from({ length: 50 }, (_, i) => String(i).padEnd(256, "x")),
      severity: "critical",
    });
    body.title = String(body.title).padEnd(300, "t");
    assertAccepted(await submit(t(), body));
  });

  for (const surface of SURFACES) {
    it(`accepts surface "${surface}"`, async () => {
      const created = assertAccepted(await submit(t(), report({ surface })));
      assert.equal((await storedRow(t(), created.id)).surface, surface);
    });
  }

  it("refuses a surface outside the enum, naming the allowed values", async () => {
    for (const surface of ["mobile", "API", "", 1]) {
      const res = await submit(t(), report({ surface }));
      assertRejected(res, "surface");
    }
    const res = await submit(t(), report({ surface: "mobile" }));
    for (const surface of SURFACES) assert.ok(String(res.body.message).includes(`"${surface}"`), res.raw);
  });

  for (const severity of SEVERITIES) {
    it(`accepts severity "${severity}"`, async () => {
      const created = assertAccepted(await submit(t(), report({ severity })));
      assert.equal((await storedRow(t(), created.id)).severity, severity);
    });
  }

  it("refuses a severity outside the enum", async () => {
    for (const severity of ["urgent", "HIGH", " ", null])
      assertRejected(await submit(t(), report({ severity })), "severity");
  });

  it("refuses unknown fields and non-object bodies", async () => {
    assertRejected(await submit(t(), report({ organization_id: t().orgB.id })), "organization_id");
    assertRejected(await submit(t(), report({ id: "fb_mine" })), "id");
    assert.equal((await submit(t(), [report()])).status, 400);
    const scalar = await t().request("POST", "/v1/feedback", {
      key: t().orgA.keys.member,
      body: JSON.stringify("just text"),
      headers: { "content-type": "application/json" },
    });
    assertRejected(scalar, "body");
  });

  it("refuses a submission without a credential", async () => {
    const res = await t().request("POST", "/v1/feedback", { body: report() });
    assert.equal(res.status, 401);
    assert.equal(res.body.code, "unauthenticated");
  });

  // De-duplication.
  it("returns the original id for a repeated fingerprint and stores no duplicate", async () => {
    const fingerprint = `dup-${seq}-${Date.now()}`;
    const first = assertAccepted(await submit(t(), report({ fingerprint, title: "first wording" })));
    const second = assertAccepted(
      await submit(t(), report({ fingerprint, title: "second wording", surface: "docs" }), t().orgA.keys.owner),
    );
    assert.equal(second.id, first.id);
    assert.equal(await countRows(t(), "org_id = $1 AND fingerprint = $2", [t().orgA.id, fingerprint]), 1);
    const row = await storedRow(t(), first.id);
    assert.equal(row.title, "first wording");
    assert.equal(row.surface, "api");
  });

  it("converges concurrent submissions of one fingerprint on one stored report", async () => {
    const fingerprint = `race-${seq}-${Date.now()}`;
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => submit(t(), report({ fingerprint, body: `attempt ${i}` }))),
    );
    const ids = new Set(results.map((res) => assertAccepted(res).id));
    assert.equal(ids.size, 1);
    assert.equal(await countRows(t(), "org_id = $1 AND fingerprint = $2", [t().orgA.id, fingerprint]), 1);
  });

  it("derives a fingerprint when none is given: an identical resend converges", async () => {
    const body = report({ body: "same content", evidence: ["a", "b"], severity: "low" });
    const first = assertAccepted(await submit(t(), body));
    const again = assertAccepted(await submit(t(), { ...body }, t().orgA.keys.service));
    assert.equal(again.id, first.id);
    assert.equal(await countRows(t(), "org_id = $1 AND title = $2", [t().orgA.id, body.title]), 1);
    const row = await storedRow(t(), first.id);
    assert.ok(String(row.fingerprint).length > 0, "a derived fingerprint is stored");
  });

  it("treats an empty fingerprint like an omitted one", async () => {
    const body = report({ fingerprint: "", body: "empty fingerprint" });
    const first = assertAccepted(await submit(t(), body));
    const again = assertAccepted(await submit(t(), { ...body }));
    assert.equal(again.id, first.id);
    const other = assertAccepted(await submit(t(), report({ fingerprint: "", body: "empty fingerprint" })));
    assert.notEqual(other.id, first.id, "reports with an empty fingerprint must not all collapse into one");
  });

  it("gives different content a different id when no fingerprint is given", async () => {
    const base = report({ body: "content", evidence: ["x"], severity: "medium", svc_version: "1.0.0" });
    const first = assertAccepted(await submit(t(), base));
    const variants: Record<string, unknown>[] = [
      { ...base, title: `${base.title} changed` },
      { ...base, surface: "web" },
      { ...base, body: "other content" },
      { ...base, expected: "e" },
      { ...base, actual: "a" },
      { ...base, repro: "r" },
      { ...base, severity: "high" },
      { ...base, svc_version: "1.0.1" },
      { ...base, evidence: ["y"] },
      { ...base, evidence: ["x", "x"] },
    ];
    const ids = new Set([first.id]);
    for (const variant of variants) ids.add(assertAccepted(await submit(t(), variant)).id);
    assert.equal(ids.size, variants.length + 1);
  });

  it("keeps fingerprints per organization", async () => {
    const fingerprint = `shared-${seq}-${Date.now()}`;
    const a = assertAccepted(await submit(t(), report({ fingerprint }), t().orgA.keys.member));
    const b = assertAccepted(await submit(t(), report({ fingerprint }), t().orgB.keys.member));
    assert.notEqual(b.id, a.id);
    assert.equal((await storedRow(t(), a.id)).org_id, t().orgA.id);
    assert.equal((await storedRow(t(), b.id)).org_id, t().orgB.id);
    const bAgain = assertAccepted(await submit(t(), report({ fingerprint }), t().orgB.keys.owner));
    assert.equal(bAgain.id, b.id);
    assert.equal(await countRows(t(), "fingerprint = $1", [fingerprint]), 2);

    // Derived fingerprints are per organization too.
    const body = report({ body: "same text in two organizations" });
    const da = assertAccepted(await submit(t(), body, t().orgA.keys.owner));
    const db = assertAccepted(await submit(t(), body, t().orgB.keys.owner));
    assert.notEqual(da.id, db.id);
  });

  // Who may submit (contract 5.10).
  for (const role of ["owner", "admin", "member", "service", "workload"] as KeyRole[]) {
    for (const orgName of ["orgA", "orgB"] as const) {
      it(`accepts a report from the ${orgName} ${role} key and attributes it`, async () => {
        const org: TestOrg = t()[orgName];
        const created = assertAccepted(await submit(t(), report(), org.keys[role]));
        const row = await storedRow(t(), created.id);
        assert.equal(row.org_id, org.id);
        assert.equal(row.principal_id, org.principalIds[role]);
      });
    }
  }

  it("accepts a report from a sandbox-scoped credential", async () => {
    const issued = await t().issueKey(t().orgB, { sandbox: { sandboxId: SANDBOX_ID, lineagePath: SANDBOX_ID } });
    const created = assertAccepted(await submit(t(), report({ surface: "sandbox" }), issued.key));
    const row = await storedRow(t(), created.id);
    assert.equal(row.org_id, t().orgB.id);
    assert.equal(row.principal_id, issued.principalId);
  });

  it("reports relayed false and stores the report when no review channel is configured", async () => {
    const created = assertAccepted(await submit(t(), report()));
    assert.equal(created.relayed, false);
    assert.equal((await storedRow(t(), created.id)).relayed, false);
  });
});

forEachStore(
  "feedback relayed to a webhook",
  (t) => {
    const deliveriesSince = async (mark: number, count: number) => {
      // The relay runs inside the request, so deliveries have arrived once the response has.
      assert.equal(deliveries.length - mark, count, "webhook deliveries");
      return deliveries.slice(mark);
    };

    it("relays to a webhook answering 200: relayed true, the JSON report delivered, stored", async () => {
      webhookMode = "ok";
      const mark = deliveries.length;
      const body = report({
        surface: "cli",
        body: "b",
        expected: "e",
        actual: "a",
        repro: "r",
        severity: "critical",
        fingerprint: `relay-${seq}-${Date.now()}`,
        svc_version: "9.9.9",
        evidence: ["one", "two"],
      });
      const created = assertAccepted(await submit(t(), body, t().orgB.keys.admin));
      assert.equal(created.relayed, true);
      const [delivery] = await deliveriesSince(mark, 1);
      assert.ok(delivery);
      assert.equal(delivery.method, "POST");
      assert.equal(delivery.url, "/hooks/feedback");
      assert.match(String(delivery.headers["content-type"]), /^application\/json/);
      const sent = JSON.parse(delivery.body) as Record<string, unknown>;
      assert.equal(sent.id, created.id);
      assert.deepEqual(sent.organization, { id: t().orgB.id, slug: "org-b" });
      for (const field of ["title", "surface", "body", "expected", "actual", "repro", "severity", "fingerprint"]) {
        assert.equal(sent[field], body[field], field);
      }
      assert.equal(sent.svc_version, "9.9.9");
      assert.deepEqual(sent.evidence, ["one", "two"]);
      assert.ok(!delivery.body.includes(t().orgB.keys.admin), "the caller's key must not be relayed");
      assert.equal(delivery.headers.authorization, undefined);
      const row = await storedRow(t(), created.id);
      assert.equal(row.relayed, true);
    });

    it("treats any 2xx answer as relayed", async () => {
      webhookMode = "accepted";
      const mark = deliveries.length;
      const created = assertAccepted(await submit(t(), report()));
      assert.equal(created.relayed, true);
      await deliveriesSince(mark, 1);
      assert.equal((await storedRow(t(), created.id)).relayed, true);
    });

    it("does not relay a repeated fingerprint again and returns the original outcome", async () => {
      webhookMode = "ok";
      const fingerprint = `relay-once-${seq}-${Date.now()}`;
      const mark = deliveries.length;
      const first = assertAccepted(await submit(t(), report({ fingerprint })));
      assert.equal(first.relayed, true);
      const again = assertAccepted(await submit(t(), report({ fingerprint })));
      assert.deepEqual(again, first);
      await deliveriesSince(mark, 1);
    });

    it("reports relayed false when the webhook answers 500, and still stores the report", async () => {
      webhookMode = "error";
      const mark = deliveries.length;
      const body = report({ body: "relay refused" });
      const created = assertAccepted(await submit(t(), body));
      assert.equal(created.relayed, false);
      const [delivery] = await deliveriesSince(mark, 1);
      assert.equal(JSON.parse(delivery?.body ?? "{}").id, created.id);
      const row = await storedRow(t(), created.id);
      assert.equal(row.relayed, false);
      assert.equal(row.title, body.title);
    });

    it("reports relayed false when the webhook drops the connection, and still stores the report", async () => {
      webhookMode = "hangup";
      const created = assertAccepted(await submit(t(), report()));
      assert.equal(created.relayed, false);
      assert.equal((await storedRow(t(), created.id)).relayed, false);
    });

    it("reports relayed false when the webhook does not answer in time, and still stores the report", async () => {
      webhookMode = "silent";
      const started = Date.now();
      const created = assertAccepted(await submit(t(), report()));
      assert.equal(created.relayed, false);
      assert.ok(Date.now() - started < 4000, "the relay must give up after its timeout");
      assert.equal((await storedRow(t(), created.id)).relayed, false);
    });

    it("logs neither the caller's key nor the relayed report's secrets", async () => {
      assert.ok(!t().logs().includes(t().orgA.keys.member));
      assert.ok(!t().logs().includes(t().orgB.keys.admin));
    });
  },
  { config: { feedbackWebhookUrl: webhookUrl, feedbackWebhookTimeoutMs: 400 } },
);
