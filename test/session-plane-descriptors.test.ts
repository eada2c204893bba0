// Issue 24 A4 end to end: the real server (the bundle, as a child process) with its
// RLIMIT_NOFILE lowered to 1024 takes WebSocket upgrades and idle connections from many
// loopback addresses until the session plane refuses them, and another organization's API
// calls, a store write and a sandbox create still work meanwhile, with no EMFILE: the plane's
// caps (lib/connection-slots.ts, descriptorBudget) keep a reserve of descriptors.
//
// PGlite only: the server under test runs on its default embedded store in its data dir.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir } from "node:fs/promises";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import { descriptorBudget } from "../src/lib/connection-slots.js";
import { pushHttpEchoImage } from "./support/http-echo.js";
import { freePort } from "./support/ports.js";
import { type CrashRig, eventually, type ServerProcess, startCrashRig } from "./support/server-process.js";

const OPEN_FILES = 1024;
/** Loopback addresses the clients connect from (all of 127/8 is local on Linux). */
const ADDRESSES = Array.from({ length: 20 }, (_, i) => `127.0.0.${i + 2}`);
/** Upgrades tried from each address: 800 in all, 2 descriptors each in an uncapped server (more than it has). */
const UPGRADES_PER_ADDRESS = 40;
/** Idle connections (no request) held from each address: 800 in all, more than the server has descriptors for. */
const IDLE_PER_ADDRESS = 40;

describe("session plane descriptors under a low RLIMIT_NOFILE [pglite]", () => {
  const apiKey = `wrn_${randomBytes(32).toString("base64url")}`;
  const budget = descriptorBudget(OPEN_FILES);
  let rig: CrashRig | undefined;
  let server: ServerProcess;
  let planePort = 0;
  let echoImage = "";
  const sockets: net.Socket[] = [];

  before(async () => {
    planePort = await freePort();
    rig = await startCrashRig(
      "plane-fds",
      apiKey,
      (busyboxRef) => ({
        WARREN_DEFAULT_IMAGE: busyboxRef,
        WARREN_SANDBOX_MEMORY_MB: "128",
        WARREN_SANDBOX_PIDS: "128",
        WARREN_SESSION_LISTEN: `127.0.0.1:${planePort}`,
        WARREN_SANDBOX_POOL_SIZE: "0",
      }),
      // Soft and hard: Node raises the soft limit to the hard one at start.
      { launcher: ["prlimit", `--nofile=${OPEN_FILES}:${OPEN_FILES}`, "--"] },
    );
    server = rig.server;
    echoImage = await pushHttpEchoImage(rig.fixture.registry);
  });

  after(async () => {
    for (const socket of sockets) socket.destroy();
    await rig?.cleanup();
  });

  /** An upgrade to the sandbox's port 8080 from `from`: the answer head ("" if closed without one); a 101's socket stays open. */
  const upgrade = (id: string, key: string, from: string) =>
    new Promise<string>((resolve) => {
      const socket = net.connect({ host: "127.0.0.1", port: planePort, localAddress: from });
      sockets.push(socket);
      let received = "";
      const done = () => {
        clearTimeout(timer);
        if (!/^HTTP\/1\.1 101 /.test(received)) socket.destroy();
        resolve(received);
      };
      const timer = setTimeout(done, 60_000);
      socket.on("data", (chunk: Buffer) => {
        received += chunk.toString("latin1");
        if (received.includes("\r\n\r\n")) done();
      });
      socket.on("error", () => undefined);
      socket.on("close", done);
      socket.write(
        `GET /ws HTTP/1.1\r\nHost: 8080-${id}.localhost:${planePort}\r\nAuthorization: Bearer ${key}\r\n` +
          "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
      );
    });

  /** A connection from `from` that sends nothing (held until the plane closes it or the test ends). */
  const idle = (from: string) =>
    new Promise<void>((resolve) => {
      const socket = net.connect({ host: "127.0.0.1", port: planePort, localAddress: from }, () => resolve());
      sockets.push(socket);
      socket.on("error", () => resolve());
      socket.on("close", () => resolve());
    });

  const openDescriptors = async () => (await readdir(`/proc/${server.pid}/fd`)).length;

  it("refuses upgrades and connections past its caps, and another organization's calls and creates still work", async (t) => {
    await server.start();
    // Another organization, with an owner key of its own.
    const org = await server.api("POST", "/v1/admin/organizations", { slug: "other-org" });
    assert.equal(org.status, 200, org.raw);
    const issued = await server.api("POST", "/v1/admin/api-keys", {
      organization: "other-org",
      name: "other-owner",
      kind: "user",
      role: "owner",
      email: "other@example.test",
    });
    assert.equal(issued.status, 200, issued.raw);
    const otherKey = issued.body.api_key as string;
    const asOther = (method: string, url: string, body?: unknown) =>
      server.api(method, url, body, { authorization: `Bearer ${otherKey}` });

    const created = await server.api("POST", "/v1/sandboxes", {
      image: echoImage,
      ports: [8080],
      network_access: "public",
    });
    assert.equal(created.status, 200, created.raw);
    const id = created.body.id as string;
    await server.waitFor(id, "running");
    await eventually("the endpoint of port 8080", async () => {
      const shown = (await server.api("GET", `/v1/sandboxes/${id}`)).body.sandbox as { endpoints?: { port: number }[] };
      return shown.endpoints?.some((endpoint) => endpoint.port === 8080);
    });

    // Every address tries its upgrades one after another, the addresses all at once.
    const answers = (
      await Promise.all(
        ADDRESSES.map(async (from) => {
          const mine: string[] = [];
          for (let i = 0; i < UPGRADES_PER_ADDRESS; i++) mine.push(await upgrade(id, apiKey, from));
          return mine;
        }),
      )
    ).flat();
    await Promise.all(ADDRESSES.flatMap((from) => Array.from({ length: IDLE_PER_ADDRESS }, () => idle(from))));
    const switched = answers.filter((head) => /^HTTP\/1\.1 101 /.test(head)).length;
    const limited = answers.filter((head) => /^HTTP\/1\.1 429 /.test(head));
    const held = await openDescriptors();
    t.diagnostic(
      `${answers.length} upgrades: ${switched} switched, ${limited.length} 429; the server holds ${held} descriptors`,
    );

    // Meanwhile another organization: WhoAmI, a store write, a sandbox created and used.
    const whoami = await asOther("GET", "/v1/whoami");
    assert.equal(whoami.status, 200, whoami.raw);
    assert.equal((whoami.body.organization as { slug: string }).slug, "other-org");
    const project = await asOther("POST", "/v1/projects", { name: "still here", slug: "still-here" });
    assert.equal(project.status, 200, project.raw);
    const theirs = await asOther("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none" });
    assert.equal(theirs.status, 200, theirs.raw);
    const theirsId = theirs.body.id as string;
    const running = await asOther("GET", `/v1/sandboxes/${theirsId}?wait_state=running&wait_timeout_seconds=25`);
    assert.equal((running.body.sandbox as { state: string }).state, "running", running.raw);
    const exec = await asOther("POST", `/v1/sandboxes/${theirsId}:exec`, { cmd: ["echo", "fine"] });
    assert.equal(exec.status, 200, exec.raw);
    assert.equal(exec.body.stdout, "fine\n", exec.raw);
    assert.doesNotMatch(server.log, /EMFILE|too many open files/i);
    // And the plane held them to its caps, a reserve of descriptors left.
    assert.ok(switched > 0, "some upgrades went through");
    assert.ok(
      switched <= budget.plane.perOrganization,
      `${switched} upgrades held by one organization (at most ${budget.plane.perOrganization})`,
    );
    assert.ok(limited.length > 0, `no 429 among ${answers.length} answers`);
    assert.match(limited[0] as string, /\r\nretry-after: \d+\r\n/i);
    assert.match(limited[0] as string, /"code":"rate_limited"/);
    assert.ok(held < OPEN_FILES - budget.reserve / 2, `the server holds ${held} of ${OPEN_FILES} descriptors`);

    // The places come back with the closes: an upgrade goes through again.
    for (const socket of sockets.splice(0)) socket.destroy();
    await eventually("an upgrade after the others closed", async () =>
      /^HTTP\/1\.1 101 /.test(await upgrade(id, apiKey, ADDRESSES[0] as string)),
    );
    for (const sandbox of [id]) assert.equal((await server.api("DELETE", `/v1/sandboxes/${sandbox}`)).status, 202);
    assert.equal((await asOther("DELETE", `/v1/sandboxes/${theirsId}`)).status, 202);
  });
});
