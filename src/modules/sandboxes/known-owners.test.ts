// What a server remembers of other hosts' sandboxes' owners (known-owners.ts): for one
// organization only, for KNOWN_OWNER_MS, bounded, and forgotten on demand.
import assert from "node:assert/strict";
import { it } from "node:test";
import { KNOWN_OWNER_MS, KnownOwners } from "./known-owners.js";

const OWNER = { orgId: "org_a", hostId: "h_a", epoch: 3 };

it("an owner is known for its organization only, and for KNOWN_OWNER_MS", () => {
  let now = 0;
  const known = new KnownOwners(() => now);
  known.remember("sbx-1", OWNER);
  assert.deepEqual(known.get("sbx-1", "org_a"), { ...OWNER, seenAt: 0 });
  assert.equal(known.get("sbx-1", "org_b"), null, "another organization never learns where a sandbox is");
  assert.equal(known.get("sbx-2", "org_a"), null);
  now = KNOWN_OWNER_MS - 1;
  assert.ok(known.get("sbx-1", "org_a"));
  now = KNOWN_OWNER_MS;
  assert.equal(known.get("sbx-1", "org_a"), null);
  known.remember("sbx-1", OWNER);
  known.forget("sbx-1");
  assert.equal(known.get("sbx-1", "org_a"), null);
});

it("at most 4,096 sandboxes are remembered, the oldest forgotten first", () => {
  const known = new KnownOwners(() => 0);
  for (let i = 0; i <= 4_096; i++) known.remember(`sbx-${i}`, OWNER);
  assert.equal(known.get("sbx-0", "org_a"), null);
  assert.ok(known.get("sbx-1", "org_a"));
  assert.ok(known.get("sbx-4096", "org_a"));
});
