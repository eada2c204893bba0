// The edges of a deployment of several servers (issue 25, docs/hosts.md "Roles" and "Routing"):
// two hosts (A, B) and one `api` replica (WARREN_ROLE=api, no runtime, no hosts row) over one
// PostgreSQL and one S3 bucket (test/support/multi-host.ts). A port endpoint of a sandbox on A
// opens through B's plane and the replica's (HTTP and a WebSocket echo), relayed to A's plane,
// which checks the credential again; every server names the deployment's plane and SSH host;
// the replica reads, stops, wakes and deletes A's sandboxes.
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import { eventually } from "./support/eventually.js";
import { pushHttpEchoImage } from "./support/http-echo.js";
import { type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";

const PLANE_PORT = 8081;
const SSH_PORT = 2222;
const PLANE_HOST = "plane.warren.test";
const SSH_HOST = "ssh.warren.test";

interface PlaneAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  bytes: Buffer;
}

/** A request to `host`'s plane listener, with the endpoint's Host header. */
function viaPlane(
  host: Host,
  endpointHost: string,
  path = "/",
  headers: Record<string, string> = {},
  method = "GET",
  body: Buffer | null = null,
): Promise<PlaneAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: host.address,
        port: PLANE_PORT,
        path,
        method,
        headers: { host: endpointHost, ...headers },
        agent: false,
        timeout: 60_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () => {
          const bytes = Buffer.concat(chunks);
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text: bytes.toString(), bytes });
        });
      },
    );
    req.on("error", reject);
    req.on("timeout", () => req.destroy(new Error("the plane did not answer")));
    req.end(body ?? undefined);
  });
}

/** A raw exchange with `host`'s plane: `request`, then `payload` once the answer head is in; what came back. */
function rawExchange(host: Host, request: string, payload: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: host.address, port: PLANE_PORT });
    let received = "";
    let sent = false;
    const finish = () => {
      socket.destroy();
      resolve(received);
    };
    let quiet = setTimeout(finish, 30_000);
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString();
      if (!sent && received.includes("\r\n\r\n")) {
        sent = true;
        socket.write(payload);
      }
      clearTimeout(quiet);
      quiet = setTimeout(finish, received.endsWith(payload) ? 10 : 2000);
    });
    socket.on("error", reject);
    socket.on("close", () => {
      clearTimeout(quiet);
      resolve(received);
    });
    socket.write(request);
  });
}

const codeOf = (answer: PlaneAnswer) => (JSON.parse(answer.text) as { code?: string }).code;

describe("the edges of a deployment: the plane relayed to the owner, the deployment's names, an api replica [postgres, s3]", () => {
  let cluster: MultiHost | undefined;
  let a: Host;
  let b: Host;
  let api: Host;
  let echoImage: string;

  before(async () => {
    cluster = await startMultiHost("edges", {
      hosts: 2,
      env: {
        WARREN_SESSION_LISTEN: `0.0.0.0:${PLANE_PORT}`,
        WARREN_SESSION_PLANE_URL: `http://${PLANE_HOST}:${PLANE_PORT}`,
        WARREN_SSH_LISTEN: `0.0.0.0:${SSH_PORT}`,
        WARREN_SSH_HOST: SSH_HOST,
        WARREN_SSH_PUBLIC_PORT: "22",
      },
    });
    [a, b] = cluster.hosts as [Host, Host];
    api = await cluster.addApiReplica();
    await pushHttpEchoImage(cluster.registry);
    // The hosts pull through the registry's forward on the bridge, as they pull busybox.
    echoImage = `${cluster.busyboxRef.split("/")[0]}/test/http-echo:latest`;
  });

  after(async () => {
    await cluster?.cleanup();
  });

  it("the api replica is no host (no hosts row); the hosts publish their plane and SSH listeners", async () => {
    const rows = await (cluster as MultiHost).query<{ role: string; plane_address: string; ssh_address: string }>(
      "SELECT role, plane_address, ssh_address FROM hosts ORDER BY plane_address",
    );
    assert.deepEqual(
      rows,
      [a, b]
        .map((host) => ({
          role: "all",
          plane_address: `${host.address}:${PLANE_PORT}`,
          ssh_address: `${host.address}:${SSH_PORT}`,
        }))
        .sort((x, y) => x.plane_address.localeCompare(y.plane_address)),
    );
  });

  it("an endpoint of a sandbox on A opens through B's plane and the api replica's: HTTP both ways and a WebSocket echo", async () => {
    const id = await a.createSandbox({ image: echoImage, command: undefined, ports: [8080], network_access: "public" });
    await a.waitFor(id, "running");
    const endpointHost = `8080-${id}.${PLANE_HOST}`;
    const key = (cluster as MultiHost).apiKey;
    // A's own plane first (it serves once the sandbox's server listens).
    await eventually("A's plane to serve the endpoint", async () => {
      const answer = await viaPlane(a, endpointHost, "/", { authorization: `Bearer ${key}` });
      return answer.status === 200 && answer.text === "hello";
    });
    for (const edge of [b, api]) {
      const hello = await viaPlane(edge, endpointHost, "/", { authorization: `Bearer ${key}` });
      assert.equal(hello.status, 200, `${edge.name}: ${hello.text}`);
      assert.equal(hello.text, "hello");
      // The request reached the sandbox on A without Warren's credential or the relay mark.
      const head = await viaPlane(edge, endpointHost, "/headers?x=1", {
        authorization: `Bearer ${key}`,
        cookie: "app=1",
      });
      assert.equal(head.status, 200, head.text);
      assert.match(head.text, /^GET \/headers\?x=1 HTTP\/1\.1\r\n/);
      assert.doesNotMatch(head.text, /authorization|x-warren-plane-relay/i);
      assert.ok(!head.text.includes(key), "the API key is not forwarded");
      assert.match(head.text, /\r\nCookie: app=1\r\n/i);
      // A body streamed in and back out, byte for byte.
      const payload = Buffer.alloc(2 * 1_048_576, edge.index + 7);
      const echoed = await viaPlane(edge, endpointHost, "/echo", { authorization: `Bearer ${key}` }, "POST", payload);
      assert.equal(echoed.status, 200);
      assert.ok(echoed.bytes.equals(payload), `${edge.name}: the body came back byte for byte`);
      // An endpoint token issued through this server, in the query: moved to a cookie, then served.
      const issued = await edge.api("POST", `/v1/sandboxes/${id}/endpoints/8080:token`, {});
      assert.equal(issued.status, 200, issued.raw);
      const token = issued.body.token as string;
      const redirect = await viaPlane(edge, endpointHost, `/?warren_token=${encodeURIComponent(token)}`);
      assert.equal(redirect.status, 302, redirect.text);
      const cookie = viaPlane(edge, endpointHost, "/", { cookie: `warren_endpoint_token=${token}` });
      assert.equal((await cookie).text, "hello");
      // A WebSocket (any upgrade): 101 from the sandbox on A, then bytes echoed through both planes.
      const ping = `ping-through-${edge.name}`;
      const upgraded = await rawExchange(
        edge,
        `GET /ws HTTP/1.1\r\nHost: ${endpointHost}\r\nAuthorization: Bearer ${token}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
        ping,
      );
      assert.match(upgraded, /^HTTP\/1\.1 101 Switching Protocols\r\n/, upgraded);
      assert.ok(upgraded.endsWith(`\r\n\r\n${ping}`), upgraded);
      // The edge's own checks stay: no credential, a token of another port.
      const anonymous = await viaPlane(edge, endpointHost, "/");
      assert.equal(anonymous.status, 401, anonymous.text);
      assert.equal(codeOf(anonymous), "unauthenticated");
      const otherPort = await viaPlane(edge, `8081-${id}.${PLANE_HOST}`, "/", { authorization: `Bearer ${token}` });
      assert.equal(otherPort.status, 403, otherPort.text);
    }
    // Another organization's key is not_found through any plane, as on the owner's.
    const org = await a.api("POST", "/v1/admin/organizations", { slug: "edges-other" });
    assert.equal(org.status, 200, org.raw);
    const other = await a.api("POST", "/v1/admin/api-keys", {
      organization: "edges-other",
      name: "owner",
      kind: "user",
      role: "owner",
      email: "owner@edges-other.test",
    });
    assert.equal(other.status, 200, other.raw);
    for (const edge of [a, b, api]) {
      const foreign = await viaPlane(edge, endpointHost, "/", { authorization: `Bearer ${other.body.api_key}` });
      assert.equal(foreign.status, 404, `${edge.name}: ${foreign.text}`);
      assert.equal(codeOf(foreign), "not_found");
    }
    // A relayed request is never relayed again: the mark on a request to B for A's sandbox is refused there.
    const marked = await viaPlane(b, endpointHost, "/", {
      authorization: `Bearer ${key}`,
      "x-warren-plane-relay": "1",
    });
    assert.equal(marked.status, 503, marked.text);
    assert.equal(codeOf(marked), "host_unavailable");
    // The owner checks the credential itself: the relay mark opens nothing on A.
    const bare = await viaPlane(a, endpointHost, "/", { "x-warren-plane-relay": "1" });
    assert.equal(bare.status, 401, bare.text);
    const bad = await viaPlane(a, endpointHost, "/", {
      authorization: "Bearer wst1.forged",
      "x-warren-plane-relay": "1",
    });
    assert.ok([401, 403].includes(bad.status), bad.text);
    // A stopped sandbox serves nothing through the edge either.
    const stopped = await b.api("PATCH", `/v1/sandboxes/${id}`, { state: "stopped" });
    assert.equal(stopped.status, 200, stopped.raw);
    await a.waitFor(id, "stopped");
    await eventually("B's plane to see the stop", async () => {
      const answer = await viaPlane(b, endpointHost, "/", { authorization: `Bearer ${key}` });
      return answer.status === 409 && codeOf(answer) === "sandbox_not_running";
    });
    assert.ok([200, 202].includes((await a.api("DELETE", `/v1/sandboxes/${id}`)).status));
  });

  it("every server names the deployment: the same ssh.host, endpoint URLs and service config", async () => {
    const id = await a.createSandbox({ image: echoImage, command: undefined, ports: [8080], network_access: "public" });
    await a.waitFor(id, "running");
    const configs = await Promise.all([a, b, api].map((host) => host.api("GET", "/v1/service-config")));
    for (const res of configs) {
      assert.equal(res.status, 200, res.raw);
      assert.equal(res.body.session_plane_url, `http://${PLANE_HOST}:${PLANE_PORT}`);
      assert.equal(res.body.ssh_host, SSH_HOST);
    }
    const url = `http://8080-${id}.${PLANE_HOST}:${PLANE_PORT}/`;
    for (const host of [a, b, api]) {
      const issued = await host.api("POST", `/v1/sandboxes/${id}/endpoints/8080:token`, {});
      assert.equal(issued.status, 200, `${host.name}: ${issued.raw}`);
      assert.equal(String(issued.body.url).split("?")[0], url, host.name);
    }
    // The view: endpoints (once A sees the port listen) and ssh through both hosts alike.
    const views = await eventually("the port to be listed through A and B", async () => {
      const shown = await Promise.all([a, b].map((host) => host.sandbox(id)));
      const all = shown as unknown as { endpoints: { url: string }[]; ssh?: { host: string; port: number } }[];
      return all.every((view) => view.endpoints.length === 1) && all;
    });
    for (const view of views) {
      assert.deepEqual(
        view.endpoints.map((endpoint) => endpoint.url),
        [url],
      );
      assert.equal(view.ssh?.host, SSH_HOST);
      assert.equal(view.ssh?.port, 22);
    }
    assert.ok([200, 202].includes((await a.api("DELETE", `/v1/sandboxes/${id}`)).status));
  });

  it("the api replica reads, stops, wakes, execs in and deletes a host's sandboxes, and places its creates on a host", async () => {
    const id = await a.createSandbox();
    await a.waitFor(id, "running");
    const listed = await api.api("GET", "/v1/sandboxes");
    assert.equal(listed.status, 200, listed.raw);
    assert.ok(
      (listed.body.sandboxes as { id: string }[]).some((s) => s.id === id),
      listed.raw,
    );
    assert.equal((await api.sandbox(id)).state, "running");
    // Stop through the replica: A's reconciler stops its container.
    const stop = await api.api("PATCH", `/v1/sandboxes/${id}`, { state: "stopped" });
    assert.equal(stop.status, 200, stop.raw);
    await api.waitFor(id, "stopped");
    await eventually("A's container to stop", async () => {
      const container = (await a.containers()).find((c) => c.id === id);
      return container?.status !== "running";
    });
    const wake = await api.api("PATCH", `/v1/sandboxes/${id}`, { state: "running" });
    assert.equal(wake.status, 200, wake.raw);
    await api.waitFor(id, "running");
    assert.ok(
      (await a.containers()).some((c) => c.id === id && c.status === "running"),
      "running on A again",
    );
    // An exec through the replica is routed to the owner's internal API and runs there.
    const exec = await api.exec(id, ["cat", "/etc/hostname"]);
    assert.equal(exec.status, 200, exec.raw);
    assert.equal(exec.body.exit, 0, exec.raw);
    const del = await api.api("DELETE", `/v1/sandboxes/${id}`);
    assert.ok([200, 202].includes(del.status), del.raw);
    await eventually("A's container to go", async () => !(await a.containers()).some((c) => c.id === id));
    // A create through the replica is placed on one of the hosts, which runs it.
    const placed = await api.createSandbox({ command: ["sleep", "60"] });
    await api.waitFor(placed, "running");
    const runners = [];
    for (const host of [a, b]) {
      if ((await host.containers()).some((c) => c.id === placed && c.status === "running")) runners.push(host.name);
    }
    assert.equal(runners.length, 1, `exactly one host runs the placed sandbox: ${runners.join(", ")}`);
    const placedExec = await api.exec(placed, ["echo", "placed"]);
    assert.equal(placedExec.status, 200, placedExec.raw);
    assert.equal(placedExec.body.stdout, "placed\n", placedExec.raw);
    assert.ok([200, 202].includes((await api.api("DELETE", `/v1/sandboxes/${placed}`)).status));
    const hosts = await (cluster as MultiHost).query<{ n: string }>("SELECT count(*)::text AS n FROM hosts");
    assert.equal(hosts[0]?.n, "2", "the replica never registered as a host");
  });
});
