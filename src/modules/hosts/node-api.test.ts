// What the owner's operations let leave the host (docs/hosts.md "The host boundary in the
// code"): a network switch answers the mode, the namespace's name and identity and the rules,
// never the namespace's host path or the veth pair and its addresses. The runtime is a
// recording stand-in returning a full local receipt (the real one runs in multi-host-routing).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { NetworkReceipt } from "../../drivers/runtime/interface.js";
import type { GrantClaims } from "./grants.js";
import { ownerOperations } from "./node-api.js";

const HOST = "h_0123456789abcdef01234567";
const SANDBOX = "sbx-1111111111111111111111111111111111111111";

describe("the owner's operations", () => {
  it("answer a network switch without the namespace's host path or the veth pair", async () => {
    const full: NetworkReceipt = {
      mode: "public",
      namespace: { name: "warren-sbx-1", path: "/run/netns/warren-sbx-1", inode: 4026532999 },
      link: {
        hostInterface: "wv1h",
        sandboxInterface: "wv1s",
        sandboxAddress: "10.77.0.2",
        gatewayAddress: "10.77.0.1",
      },
      rules: [{ family: "inet", table: "warren", chain: "sbx-1", handle: 12, rule: "ip daddr 10.0.0.0/8 drop" }],
    };
    const operations = ownerOperations({
      sandboxOf: async () => ({
        org_id: "org_a",
        host_id: HOST,
        quarantined: false,
        state: "running",
        network_access: "public",
      }),
      host: { id: HOST, owner: () => ({ hostId: HOST, epoch: 1 }), canAct: () => true },
      runtime: {
        setNetwork: async () => full,
        growWorkspace: async () => undefined,
        openSession: async () => assert.fail("no session here"),
      },
      sandboxAddress: async () => assert.fail("no forward here"),
      exec: async () => assert.fail("no exec here"),
      snapshot: async () => assert.fail("no snapshot here"),
      sessionBegan: () => undefined,
      sessionEnded: () => undefined,
    });
    const claims = { operation: "network", orgId: "org_a", sandboxId: SANDBOX, hostId: HOST, epoch: 1 } as GrantClaims;
    const answer = await operations.network(claims, "public");
    assert.deepEqual(JSON.parse(JSON.stringify(answer)), {
      mode: "public",
      namespace: { name: "warren-sbx-1", inode: 4026532999 },
      rules: full.rules,
    });
    const wire = JSON.stringify(answer);
    for (const hostOnly of ["/run/netns", "wv1h", "wv1s", "10.77.0.2", "10.77.0.1"]) {
      assert.equal(wire.includes(hostOnly), false, `${hostOnly} stays on the host`);
    }
  });
});
