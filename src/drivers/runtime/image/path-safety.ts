// The decision half of layer extraction, kept pure so it can be tested exhaustively: given
// a tar entry and what this layer has created so far, say what to do on disk. A layer is
// unpacked into an empty directory of its own (an overlay lower dir), so the unpacker's
// record of what it created is the whole truth about that directory.
//
// Safety rules: entry names and hardlink targets are relative and never contain `..`;
// nothing is ever created under a symlink (no writing through a link made earlier);
// hardlinks point only at files or symlinks this layer already holds. Symlink targets are
// not checked: they are resolved inside the sandbox's root at run time, and we never follow
// them here. OCI whiteouts become overlayfs whiteouts (a 0:0 character device) and opaque
// directories (the `trusted.overlay.opaque` xattr).

/** What the unpacker has put at a path of this layer. */
export type NodeKind = "dir" | "file" | "symlink" | "special" | "whiteout";

/** Tar entry types we extract (tar's `0`/`7`, `1`, `2`, `3`, `4`, `5`, `6`). */
export type EntryType = "file" | "hardlink" | "symlink" | "char-device" | "block-device" | "dir" | "fifo";

export interface EntryDescription {
  name: string;
  type: EntryType;
  /** Target of a hardlink or symlink. */
  linkname?: string;
}

/** Looks up a normalized relative path (`""` is the layer root). */
export type KindLookup = (path: string) => NodeKind | undefined;

export type NormalizedPath = { ok: true; path: string; parts: string[] } | { ok: false; reason: string };

export type EntryPlan =
  | { kind: "reject"; reason: string }
  | { kind: "skip"; reason: string }
  | { kind: "opaque"; dir: string; parentsToCreate: string[] }
  | { kind: "whiteout"; path: string; parentsToCreate: string[] }
  | {
      kind: "create";
      path: string;
      /** What to remove first: nothing, a non-directory, or a whole directory tree. */
      replace: "none" | "unlink" | "remove-tree";
      /** True when the entry is a directory that already exists (only its metadata changes). */
      existingDir: boolean;
      /** Mark the new directory opaque (it replaces a whiteout made earlier in this layer). */
      opaque: boolean;
      /** Missing parents to create, outermost first. */
      parentsToCreate: string[];
      /** Normalized target of a hardlink. */
      hardlinkTarget?: string;
    };

export const WHITEOUT_PREFIX = ".wh.";
export const OPAQUE_MARKER = ".wh..wh..opq";
const AUFS_META_PREFIX = ".wh..wh.";

/**
 * Normalizes a tar entry name to a relative path inside the layer: `./a//b/` -> `a/b`.
 * Rejects absolute names, `..` anywhere, NUL bytes and empty names. `.` yields the root (`""`).
 */
export function normalizeEntryPath(name: string): NormalizedPath {
  if (name.length === 0) return { ok: false, reason: "empty path" };
  if (name.includes("\0")) return { ok: false, reason: "path contains a NUL byte" };
  if (name.startsWith("/")) return { ok: false, reason: "absolute path" };
  const parts: string[] = [];
  for (const part of name.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") return { ok: false, reason: "path contains '..'" };
    parts.push(part);
  }
  return { ok: true, path: parts.join("/"), parts };
}

type ParentCheck = { ok: true; parentsToCreate: string[] } | { ok: false; reason: string };

/** Every proper prefix of `parts` must be a directory or absent (to be created). */
function checkParents(parts: readonly string[], kindOf: KindLookup): ParentCheck {
  const parentsToCreate: string[] = [];
  for (let i = 1; i < parts.length; i++) {
    const prefix = parts.slice(0, i).join("/");
    const kind = parentsToCreate.length > 0 ? undefined : kindOf(prefix);
    if (kind === "dir") continue;
    if (kind === undefined || kind === "whiteout") {
      // A whiteout made earlier in this layer turns into an opaque directory (see planEntry).
      parentsToCreate.push(prefix);
      continue;
    }
    if (kind === "symlink") return { ok: false, reason: `path passes through the symlink "${prefix}"` };
    return { ok: false, reason: `parent "${prefix}" is not a directory` };
  }
  return { ok: true, parentsToCreate };
}

/** Decides what one tar entry does to the layer directory. */
export function planEntry(entry: EntryDescription, kindOf: KindLookup): EntryPlan {
  const normalized = normalizeEntryPath(entry.name);
  if (!normalized.ok) return { kind: "reject", reason: `${normalized.reason}: "${entry.name}"` };
  const { parts } = normalized;
  const base = parts[parts.length - 1];
  if (parts.slice(0, -1).some((part) => part.startsWith(AUFS_META_PREFIX))) {
    return { kind: "skip", reason: `AUFS metadata "${entry.name}"` };
  }

  if (base?.startsWith(WHITEOUT_PREFIX)) {
    const dirParts = parts.slice(0, -1);
    const parents = checkParents(parts, kindOf);
    if (!parents.ok) return { kind: "reject", reason: `${parents.reason}: "${entry.name}"` };
    if (base === OPAQUE_MARKER) {
      return { kind: "opaque", dir: dirParts.join("/"), parentsToCreate: parents.parentsToCreate };
    }
    if (base.startsWith(AUFS_META_PREFIX)) {
      return { kind: "skip", reason: `AUFS metadata "${entry.name}"` };
    }
    const hidden = base.slice(WHITEOUT_PREFIX.length);
    if (hidden === "" || hidden === "." || hidden === "..") {
      return { kind: "reject", reason: `malformed whiteout: "${entry.name}"` };
    }
    const path = [...dirParts, hidden].join("/");
    const existing = parents.parentsToCreate.length > 0 ? undefined : kindOf(path);
    // A whiteout hides only lower layers; what this layer already put there stays. A directory
    // of this layer must then hide the lower one's contents, which is what opaque means.
    if (existing === "dir") return { kind: "opaque", dir: path, parentsToCreate: [] };
    if (existing !== undefined) return { kind: "skip", reason: `whiteout of an entry of the same layer: "${path}"` };
    return { kind: "whiteout", path, parentsToCreate: parents.parentsToCreate };
  }

  if (parts.length === 0) {
    if (entry.type !== "dir")
      return { kind: "reject", reason: `the layer root can only be a directory: "${entry.name}"` };
    return { kind: "create", path: "", replace: "none", existingDir: true, opaque: false, parentsToCreate: [] };
  }

  const parents = checkParents(parts, kindOf);
  if (!parents.ok) return { kind: "reject", reason: `${parents.reason}: "${entry.name}"` };
  const path = normalized.path;

  let hardlinkTarget: string | undefined;
  if (entry.type === "hardlink") {
    const target = normalizeEntryPath(entry.linkname ?? "");
    if (!target.ok) return { kind: "reject", reason: `hardlink target: ${target.reason}: "${entry.linkname ?? ""}"` };
    if (target.path === path || target.path.startsWith(`${path}/`)) {
      return { kind: "reject", reason: `hardlink to itself or to something beneath it: "${entry.name}"` };
    }
    const targetKind = target.path === "" ? "dir" : kindOf(target.path);
    if (targetKind !== "file" && targetKind !== "symlink") {
      const what = targetKind === undefined ? "not in this layer" : `a ${targetKind}`;
      return { kind: "reject", reason: `hardlink target "${target.path}" is ${what}: "${entry.name}"` };
    }
    hardlinkTarget = target.path;
  } else if (entry.type === "symlink" && (entry.linkname === undefined || entry.linkname.includes("\0"))) {
    return { kind: "reject", reason: `symlink without a valid target: "${entry.name}"` };
  }

  const existing = parents.parentsToCreate.length > 0 ? undefined : kindOf(path);
  const isDir = entry.type === "dir";
  const plan: EntryPlan = {
    kind: "create",
    path,
    replace:
      existing === undefined || (existing === "dir" && isDir) ? "none" : existing === "dir" ? "remove-tree" : "unlink",
    existingDir: existing === "dir" && isDir,
    opaque: isDir && existing === "whiteout",
    parentsToCreate: parents.parentsToCreate,
  };
  if (hardlinkTarget !== undefined) plan.hardlinkTarget = hardlinkTarget;
  return plan;
}
