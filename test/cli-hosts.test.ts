// `warren admin host list|drain|cordon|uncordon` run as a process through a listening server's
// /v1/admin/hosts routes with an operator owner key (docs/hosts.md "Draining").
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { HostJson } from "../src/modules/admin/schemas.js";
import { type CliResult, runCli } from "./support/cli.js";
import { type ApiServer, startApiServer } from "./support/sdk-server.js";

const HOST = "h_c0000000000000000000000c";

describe("warren admin host [pglite]", () => {
  let api: ApiServer;
  let home: string;
  const cli = (args: string[]) =>
    runCli(["admin", "host", ...args], {
      home,
      env: { WARREN_ADMIN_URL: api.url, WARREN_API_KEY: api.t.orgA.keys.owner },
    });
  const json = <T>(res: CliResult): T => {
    assert.equal(res.code, 0, `exit ${res.code}\nstdout: ${res.stdout}\nstderr: ${res.stderr}`);
    return JSON.parse(res.stdout) as T;
  };

  before(async () => {
    api = await startApiServer("pglite");
    home = await mkdtemp(path.join(os.tmpdir(), "warren-cli-hosts-home-"));
    await api.t.c.db.query("INSERT INTO hosts (id, state, epoch) VALUES ($1, 'ready', 1)", [HOST]);
  });
  after(async () => {
    await api?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  it("lists, drains, cordons and uncordons a host; an unknown one exits non-zero with not_found", async () => {
    const listed = json<{ hosts: HostJson[] }>(await cli(["list"]));
    assert.equal(listed.hosts.find((h) => h.id === HOST)?.state, "ready");
    const drained = json<{ host: HostJson }>(await cli(["drain", HOST]));
    assert.equal(drained.host.state, "draining");
    assert.equal(drained.host.drained, true, "no pool member, no pending replication");
    assert.equal(json<{ host: HostJson }>(await cli(["cordon", HOST])).host.state, "cordoned");
    assert.equal(json<{ host: HostJson }>(await cli(["uncordon", HOST])).host.state, "ready");
    const unknown = await cli(["drain", `h_${"9".repeat(24)}`]);
    assert.notEqual(unknown.code, 0);
    assert.match(unknown.stderr, /404 not_found/);
  });
});
