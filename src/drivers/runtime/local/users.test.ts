import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RuntimeError } from "../interface.js";
import { parseGroup, parsePasswd, resolveUser } from "./users.js";

const passwd = [
  "root:x:0:0:root:/root:/bin/sh",
  "# a comment",
  "app:x:1000:1001:App:/home/app:/bin/sh",
  "nobody:x:65534:65534:nobody:/nonexistent:/bin/false",
  "broken:x:notanumber:1::/:/bin/sh",
  "",
].join("\n");
const group = ["root:x:0:", "app:x:1001:", "docker:x:998:app,other", "video:x:44:app", "staff:x:50:"].join("\n");

const invalid = (error: unknown) => error instanceof RuntimeError && error.code === "invalid_spec";

describe("resolveUser", () => {
  it("runs as root when the image names no user", () => {
    assert.deepEqual(resolveUser("", passwd, group), { uid: 0, gid: 0, additionalGids: [], home: "/root" });
    assert.deepEqual(resolveUser("", "", ""), { uid: 0, gid: 0, additionalGids: [], home: "/" });
  });

  it("resolves a name through passwd and its groups", () => {
    assert.deepEqual(resolveUser("app", passwd, group), {
      uid: 1000,
      gid: 1001,
      additionalGids: [998, 44],
      home: "/home/app",
    });
  });

  it("takes numeric ids as they are, with gid 0 when passwd has no entry", () => {
    assert.deepEqual(resolveUser("4242", passwd, group), { uid: 4242, gid: 0, additionalGids: [], home: "/" });
    assert.deepEqual(resolveUser("4242:7", passwd, group), { uid: 4242, gid: 7, additionalGids: [], home: "/" });
    assert.equal(resolveUser("1000", passwd, group).gid, 1001);
  });

  it("resolves an explicit group by name or number", () => {
    assert.equal(resolveUser("app:staff", passwd, group).gid, 50);
    assert.equal(resolveUser("app:12", passwd, group).gid, 12);
    assert.deepEqual(resolveUser("app:docker", passwd, group).additionalGids, [44]);
  });

  it("refuses unknown names and malformed specs", () => {
    assert.throws(() => resolveUser("ghost", passwd, group), invalid);
    assert.throws(() => resolveUser("app:ghosts", passwd, group), invalid);
    assert.throws(() => resolveUser("app:", passwd, group), invalid);
    assert.throws(() => resolveUser(":1", passwd, group), invalid);
    assert.throws(() => resolveUser("a:b:c", passwd, group), invalid);
    assert.throws(() => resolveUser("99999999999", passwd, group), invalid);
  });

  it("skips lines it cannot read", () => {
    assert.deepEqual(
      parsePasswd(passwd).map((u) => u.name),
      ["root", "app", "nobody"],
    );
    assert.deepEqual(parseGroup("bad\nok:x:5:a,b\n").at(0), { name: "ok", gid: 5, members: ["a", "b"] });
  });
});
