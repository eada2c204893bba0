import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type EntryDescription, type EntryPlan, type NodeKind, normalizeEntryPath, planEntry } from "./path-safety.js";

describe("normalizeEntryPath", () => {
  const accepted: [string, string][] = [
    ["a", "a"],
    ["./a", "a"],
    ["a/", "a"],
    ["./a/b/", "a/b"],
    ["a//b", "a/b"],
    ["a/./b", "a/b"],
    ["././a", "a"],
    [".", ""],
    ["./", ""],
    ["a..b", "a..b"],
    ["..a/b..", "..a/b.."],
    ["...", "..."],
    [".hidden/.x", ".hidden/.x"],
    ["a b/ü", "a b/ü"],
  ];
  for (const [name, expected] of accepted) {
    it(`accepts ${JSON.stringify(name)} as ${JSON.stringify(expected)}`, () => {
      const result = normalizeEntryPath(name);
      assert.equal(result.ok, true);
      if (result.ok) {
        assert.equal(result.path, expected);
        assert.deepEqual(result.parts, expected === "" ? [] : expected.split("/"));
      }
    });
  }

  const rejected: [string, RegExp][] = [
    ["", /empty/],
    ["/etc/passwd", /absolute/],
    ["/", /absolute/],
    ["//a", /absolute/],
    ["..", /'\.\.'/],
    ["../a", /'\.\.'/],
    ["./../a", /'\.\.'/],
    ["a/../b", /'\.\.'/],
    ["a/..", /'\.\.'/],
    ["a/../../b", /'\.\.'/],
    ["a/b/../../..", /'\.\.'/],
    ["a\0b", /NUL/],
  ];
  for (const [name, reason] of rejected) {
    it(`rejects ${JSON.stringify(name)}`, () => {
      const result = normalizeEntryPath(name);
      assert.equal(result.ok, false);
      if (!result.ok) assert.match(result.reason, reason);
    });
  }
});

describe("planEntry", () => {
  // The layer as created so far: dirs a, a/b; a file; a symlink inside and one pointing out.
  const tree = new Map<string, NodeKind>([
    ["", "dir"],
    ["a", "dir"],
    ["a/b", "dir"],
    ["a/file", "file"],
    ["a/link", "symlink"],
    ["out", "symlink"],
    ["dev0", "special"],
    ["gone", "whiteout"],
    ["a/gone", "whiteout"],
  ]);
  const kindOf = (path: string) => tree.get(path);

  const cases: [string, EntryDescription, EntryPlan | RegExp][] = [
    // Plain creations.
    [
      "new file at the top",
      { name: "x", type: "file" },
      { kind: "create", path: "x", replace: "none", existingDir: false, opaque: false, parentsToCreate: [] },
    ],
    [
      "new file under missing dirs",
      { name: "./p/q/r", type: "file" },
      {
        kind: "create",
        path: "p/q/r",
        replace: "none",
        existingDir: false,
        opaque: false,
        parentsToCreate: ["p", "p/q"],
      },
    ],
    [
      "new file under an existing dir",
      { name: "a/b/c", type: "file" },
      { kind: "create", path: "a/b/c", replace: "none", existingDir: false, opaque: false, parentsToCreate: [] },
    ],
    [
      "directory again (metadata only)",
      { name: "a/b/", type: "dir" },
      { kind: "create", path: "a/b", replace: "none", existingDir: true, opaque: false, parentsToCreate: [] },
    ],
    [
      "root entry",
      { name: "./", type: "dir" },
      { kind: "create", path: "", replace: "none", existingDir: true, opaque: false, parentsToCreate: [] },
    ],
    ["root as a file", { name: ".", type: "file" }, /layer root can only be a directory/],
    [
      "file replaces file",
      { name: "a/file", type: "file" },
      { kind: "create", path: "a/file", replace: "unlink", existingDir: false, opaque: false, parentsToCreate: [] },
    ],
    [
      "file replaces symlink (the link itself, never its target)",
      { name: "a/link", type: "file" },
      { kind: "create", path: "a/link", replace: "unlink", existingDir: false, opaque: false, parentsToCreate: [] },
    ],
    [
      "file replaces dir tree",
      { name: "a/b", type: "file" },
      { kind: "create", path: "a/b", replace: "remove-tree", existingDir: false, opaque: false, parentsToCreate: [] },
    ],
    [
      "dir replaces file",
      { name: "a/file/", type: "dir" },
      { kind: "create", path: "a/file", replace: "unlink", existingDir: false, opaque: false, parentsToCreate: [] },
    ],
    [
      "dir replaces a whiteout of this layer and becomes opaque",
      { name: "gone", type: "dir" },
      { kind: "create", path: "gone", replace: "unlink", existingDir: false, opaque: true, parentsToCreate: [] },
    ],
    [
      "file replaces a whiteout of this layer",
      { name: "gone", type: "file" },
      { kind: "create", path: "gone", replace: "unlink", existingDir: false, opaque: false, parentsToCreate: [] },
    ],
    [
      "entry below a whiteout turns it into an opaque dir",
      { name: "a/gone/x", type: "file" },
      {
        kind: "create",
        path: "a/gone/x",
        replace: "none",
        existingDir: false,
        opaque: false,
        parentsToCreate: ["a/gone"],
      },
    ],
    [
      "symlink with an absolute target (resolved in the sandbox, not here)",
      { name: "a/abs", type: "symlink", linkname: "/etc/passwd" },
      { kind: "create", path: "a/abs", replace: "none", existingDir: false, opaque: false, parentsToCreate: [] },
    ],
    [
      "symlink with a target going up",
      { name: "a/up", type: "symlink", linkname: "../../../../etc" },
      { kind: "create", path: "a/up", replace: "none", existingDir: false, opaque: false, parentsToCreate: [] },
    ],
    ["symlink without a target", { name: "a/s", type: "symlink" }, /symlink without a valid target/],
    [
      "device",
      { name: "dev/null", type: "char-device" },
      {
        kind: "create",
        path: "dev/null",
        replace: "none",
        existingDir: false,
        opaque: false,
        parentsToCreate: ["dev"],
      },
    ],

    // Traversal and absolute names.
    ["absolute path", { name: "/etc/passwd", type: "file" }, /absolute path/],
    ["dot-dot at the start", { name: "../evil", type: "file" }, /'\.\.'/],
    ["dot-dot in the middle", { name: "a/../../evil", type: "file" }, /'\.\.'/],
    ["dot-dot in a directory", { name: "a/../", type: "dir" }, /'\.\.'/],
    ["dot-dot in a whiteout's dir", { name: "../.wh.x", type: "file" }, /'\.\.'/],
    ["empty name", { name: "", type: "file" }, /empty path/],

    // Writing through symlinks.
    ["file through a symlink to outside", { name: "out/passwd", type: "file" }, /through the symlink "out"/],
    ["dir through a symlink", { name: "out/x/", type: "dir" }, /through the symlink "out"/],
    ["deep through a symlink", { name: "a/link/x/y", type: "file" }, /through the symlink "a\/link"/],
    ["symlink through a symlink", { name: "out/s", type: "symlink", linkname: "x" }, /through the symlink "out"/],
    [
      "hardlink through a symlink",
      { name: "out/h", type: "hardlink", linkname: "a/file" },
      /through the symlink "out"/,
    ],
    ["whiteout through a symlink", { name: "out/.wh.x", type: "file" }, /through the symlink "out"/],
    ["opaque marker through a symlink", { name: "out/.wh..wh..opq", type: "file" }, /through the symlink "out"/],
    ["under a file", { name: "a/file/x", type: "file" }, /parent "a\/file" is not a directory/],
    ["under a device", { name: "dev0/x", type: "file" }, /parent "dev0" is not a directory/],

    // Hardlinks.
    [
      "hardlink to a file of this layer",
      { name: "h", type: "hardlink", linkname: "./a/file" },
      {
        kind: "create",
        path: "h",
        replace: "none",
        existingDir: false,
        opaque: false,
        parentsToCreate: [],
        hardlinkTarget: "a/file",
      },
    ],
    [
      "hardlink to a symlink of this layer",
      { name: "h", type: "hardlink", linkname: "out" },
      {
        kind: "create",
        path: "h",
        replace: "none",
        existingDir: false,
        opaque: false,
        parentsToCreate: [],
        hardlinkTarget: "out",
      },
    ],
    [
      "hardlink with an absolute target",
      { name: "h", type: "hardlink", linkname: "/etc/shadow" },
      /hardlink target: absolute/,
    ],
    [
      "hardlink with a dot-dot target",
      { name: "h", type: "hardlink", linkname: "../etc/shadow" },
      /hardlink target: .*'\.\.'/,
    ],
    ["hardlink target behind a symlink", { name: "h", type: "hardlink", linkname: "out/shadow" }, /not in this layer/],
    ["hardlink to a missing file", { name: "h", type: "hardlink", linkname: "nope" }, /not in this layer/],
    ["hardlink to a directory", { name: "h", type: "hardlink", linkname: "a/b" }, /is a dir/],
    ["hardlink to the root", { name: "h", type: "hardlink", linkname: "." }, /is a dir/],
    ["hardlink to a device", { name: "h", type: "hardlink", linkname: "dev0" }, /is a special/],
    ["hardlink to a whiteout", { name: "h", type: "hardlink", linkname: "gone" }, /is a whiteout/],
    ["hardlink to itself", { name: "a/file", type: "hardlink", linkname: "a/file" }, /hardlink to itself/],
    [
      "hardlink replacing its target's parent",
      { name: "a", type: "hardlink", linkname: "a/file" },
      /hardlink to itself/,
    ],
    ["hardlink without a target", { name: "h", type: "hardlink" }, /hardlink target: empty/],

    // Whiteouts and opaque directories.
    [
      "whiteout of a lower file",
      { name: "a/.wh.lower", type: "file" },
      { kind: "whiteout", path: "a/lower", parentsToCreate: [] },
    ],
    [
      "whiteout in a missing dir",
      { name: "p/q/.wh.x", type: "file" },
      { kind: "whiteout", path: "p/q/x", parentsToCreate: ["p", "p/q"] },
    ],
    ["whiteout at the top", { name: ".wh.etc", type: "file" }, { kind: "whiteout", path: "etc", parentsToCreate: [] }],
    [
      "whiteout of this layer's dir makes it opaque",
      { name: "a/.wh.b", type: "file" },
      { kind: "opaque", dir: "a/b", parentsToCreate: [] },
    ],
    [
      "whiteout of this layer's file is ignored",
      { name: "a/.wh.file", type: "file" },
      /whiteout of an entry of the same layer/,
    ],
    ["opaque marker", { name: "a/b/.wh..wh..opq", type: "file" }, { kind: "opaque", dir: "a/b", parentsToCreate: [] }],
    [
      "opaque marker in a missing dir",
      { name: "n/.wh..wh..opq", type: "file" },
      { kind: "opaque", dir: "n", parentsToCreate: ["n"] },
    ],
    [
      "opaque marker at the top",
      { name: "./.wh..wh..opq", type: "file" },
      { kind: "opaque", dir: "", parentsToCreate: [] },
    ],
    ["AUFS metadata", { name: ".wh..wh.plnk/123", type: "file" }, /AUFS metadata/],
    ["AUFS metadata file", { name: "a/.wh..wh.aufs", type: "file" }, /AUFS metadata/],
    ["whiteout of nothing", { name: "a/.wh.", type: "file" }, /malformed whiteout/],
    ["whiteout of dot", { name: "a/.wh..", type: "file" }, /malformed whiteout/],
    ["whiteout of dot-dot", { name: "a/.wh...", type: "file" }, /malformed whiteout/],
  ];

  for (const [title, entry, expected] of cases) {
    it(title, () => {
      const plan = planEntry(entry, kindOf);
      if (expected instanceof RegExp) {
        assert.ok(plan.kind === "reject" || plan.kind === "skip", `expected reject/skip, got ${JSON.stringify(plan)}`);
        assert.match(plan.reason, expected);
      } else {
        assert.deepEqual(plan, expected);
      }
    });
  }

  it("rejects every name with a '..' component, whatever the entry type", () => {
    const types: EntryDescription["type"][] = [
      "file",
      "dir",
      "symlink",
      "hardlink",
      "char-device",
      "block-device",
      "fifo",
    ];
    const names = ["..", "../x", "x/..", "x/../y", "./..", "x/./../..", ".wh../..", "../.wh..wh..opq"];
    for (const type of types) {
      for (const name of names) {
        const plan = planEntry({ name, type, linkname: "a/file" }, kindOf);
        assert.equal(plan.kind, "reject", `${type} ${name}`);
      }
    }
  });

  it("never plans anything below a symlink", () => {
    const symlinks = [...tree].filter(([, kind]) => kind === "symlink").map(([path]) => path);
    for (const link of symlinks) {
      for (const suffix of ["x", "x/y", ".wh.x", ".wh..wh..opq", "./x", "x/"]) {
        for (const type of ["file", "dir", "symlink", "fifo"] as const) {
          const plan = planEntry({ name: `${link}/${suffix}`, type, linkname: "t" }, kindOf);
          assert.equal(plan.kind, "reject", `${type} ${link}/${suffix}`);
        }
      }
    }
  });
});
