import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RuntimeError } from "../../drivers/runtime/interface.js";
import { tenantFailureMessage, withoutHostPaths } from "./host-changes.js";

describe("a host failure's message for a tenant (issue 24 A17f)", () => {
  it("shows no host path: every absolute path becomes <host path>", () => {
    const cases: [string, string][] = [
      [
        "mount /var/lib/warren/volumes/cache/org_1/v3 onto /var/lib/warren/sandboxes/sbx_x/rootfs/data: No such file or directory",
        "mount <host path> onto <host path>: No such file or directory",
      ],
      [
        "ENOENT: no such file or directory, open '/srv/warren/run/console.log'",
        "ENOENT: no such file or directory, open '<host path>'",
      ],
      ['cp failed (src="/data dir/x")', 'cp failed (src="<host path> dir/x")'],
      ["/abs/at/start failed", "<host path> failed"],
      ["paths=[/a/b,/c]", "paths=[<host path>,<host path>]"],
    ];
    for (const [message, shown] of cases) {
      assert.equal(withoutHostPaths(message), shown);
      assert.ok(!tenantFailureMessage(new Error(message)).includes("/var/lib"));
    }
    // Image references and plain words are left alone.
    for (const message of [
      "pull of 127.0.0.1:5000/library/busybox:latest failed",
      "image docker.io/x/y not found",
      "5/10 layers",
    ]) {
      assert.equal(withoutHostPaths(message), message);
    }
    const runtime = new RuntimeError("host_failure", "mount of volume failed: /var/lib/warren/volumes/abc: EEXIST");
    assert.equal(tenantFailureMessage(runtime), "mount of volume failed: <host path>: EEXIST");
  });
});
