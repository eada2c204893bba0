// The owner's side of a routed SSH port forward (ownerOperations.openForward): the checks a
// forward on one host makes, made again by the owner from the sandbox's row, a real TCP
// connection to the port it answers, and the awake hold taken for exactly as long as that
// connection is open. The row and the runtime's portAddress are stand-ins; the socket is real.
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import { eventually } from "../../../test/support/eventually.js";
import type { GrantClaims } from "./grants.js";
import { ownerOperations } from "./node-api.js";

const HOST = "h_0123456789abcdef01234567";
const SANDBOX = "sbx-1111111111111111111111111111111111111111";

describe("the owner's side of a routed forward", () => {
  let server: net.Server;
  let port = 0;
  let open = 0;
  const row = {
    org_id: "org_a",
    host_id: HOST as string | null,
    quarantined: false,
    state: "running",
    network_access: "public",
  };
  let acting = true;
  let address: string | null = "127.0.0.1";
  const held = new Map<string, string>();
  const ops = ownerOperations({
    sandboxOf: async (id) => (id === SANDBOX ? { ...row } : null),
    host: { id: HOST, owner: () => ({ hostId: HOST, epoch: 1 }), canAct: () => acting },
    runtime: {
      growWorkspace: async () => assert.fail("no growth here"),
      setNetwork: async () => assert.fail("no network switch here"),
      openSession: async () => assert.fail("no session here"),
    },
    sandboxAddress: async () => address,
    exec: async () => ({}),
    snapshot: async () => undefined,
    sessionBegan: (sessionId, sandboxId) => held.set(sessionId, sandboxId),
    sessionEnded: (sessionId) => held.delete(sessionId),
  });
  const claims = (orgId = "org_a"): GrantClaims => ({
    operation: "forward",
    orgId,
    sandboxId: SANDBOX,
    hostId: HOST,
    epoch: 1,
    digest: "",
    nonce: "n",
    expiresAt: Date.now() + 30_000,
  });

  before(async () => {
    server = net.createServer((socket) => {
      open++;
      socket.once("close", () => open--);
      socket.on("error", () => undefined);
      socket.pipe(socket);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as net.AddressInfo).port;
  });
  after(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  const refused = async (code: string, what: string, orgId?: string, to = port) => {
    let error: (Error & { code?: string }) | null = null;
    try {
      // A forward that opened after all is closed at once, so a failing case cannot hang the file.
      (await ops.openForward(claims(orgId), to)).destroy();
    } catch (caught) {
      error = caught as Error & { code?: string };
    }
    assert.equal(error?.code, code, `${what}: ${error?.message ?? "it connected"}`);
  };

  it("connects to the sandbox's port and holds it awake until the connection closes", async () => {
    const socket = await ops.openForward(claims(), port);
    assert.deepEqual([...held.values()], [SANDBOX], "held awake while open");
    const back = new Promise<string>((resolve) => socket.once("data", (d: Buffer) => resolve(d.toString())));
    socket.write("ping");
    assert.equal(await back, "ping");
    const closed = new Promise((resolve) => socket.once("close", resolve));
    socket.destroy();
    await closed;
    assert.equal(held.size, 0, "released once closed");
    await eventually("the port's end to close", async () => open === 0);
  });

  it("refuses what a forward on one host refuses, and connects nothing", async () => {
    await refused("not_found", "another organization's sandbox", "org_b");
    await refused("invalid_argument", "port 0", undefined, 0);
    await refused("invalid_argument", "port 65536", undefined, 65536);
    row.quarantined = true;
    await refused("quarantined", "a quarantined sandbox");
    row.quarantined = false;
    row.state = "stopped";
    await refused("sandbox_not_running", "a stopped sandbox");
    row.state = "running";
    row.network_access = "none";
    await refused("failed_precondition", "network none");
    row.network_access = "public";
    address = null;
    await refused("failed_precondition", "no link");
    address = "127.0.0.1";
    row.host_id = "h_ffffffffffffffffffffffff";
    await refused("host_unavailable", "another host's sandbox");
    row.host_id = HOST;
    acting = false;
    await refused("host_unavailable", "a host that cannot act");
    acting = true;
    // A port nothing listens on: refused, nothing held.
    const closedPort = await new Promise<number>((resolve) => {
      const probe = net.createServer();
      probe.listen(0, "127.0.0.1", () => {
        const free = (probe.address() as net.AddressInfo).port;
        probe.close(() => resolve(free));
      });
    });
    await refused("failed_precondition", "a closed port", undefined, closedPort);
    assert.equal(held.size, 0);
    assert.equal(open, 0);
  });
});
