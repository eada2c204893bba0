// Resolves an image's USER (`name`, `uid`, `name:group`, `uid:gid`, empty for root) to the
// numeric ids runc needs, the way Docker does: names from the image's /etc/passwd and
// /etc/group, a bare uid without an entry runs with gid 0, and supplementary groups come
// from the group file's member lists.
import { RuntimeError } from "../interface.js";

export interface ResolvedUser {
  uid: number;
  gid: number;
  additionalGids: number[];
  /** From the passwd entry; `/` when there is none (Docker's default). */
  home: string;
}

interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

interface GroupEntry {
  name: string;
  gid: number;
  members: string[];
}

const NUMERIC_RE = /^[0-9]+$/;
const MAX_ID = 2 ** 32 - 2;

function parseId(text: string): number | null {
  if (!NUMERIC_RE.test(text)) return null;
  const value = Number(text);
  return value <= MAX_ID ? value : null;
}

export function parsePasswd(text: string): PasswdEntry[] {
  const entries: PasswdEntry[] = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const [name, , uid, gid, , home] = line.split(":");
    const uidValue = parseId(uid ?? "");
    const gidValue = parseId(gid ?? "");
    if (!name || uidValue === null || gidValue === null) continue;
    entries.push({ name, uid: uidValue, gid: gidValue, home: home || "/" });
  }
  return entries;
}

export function parseGroup(text: string): GroupEntry[] {
  const entries: GroupEntry[] = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const [name, , gid, members] = line.split(":");
    const gidValue = parseId(gid ?? "");
    if (!name || gidValue === null) continue;
    entries.push({ name, gid: gidValue, members: (members ?? "").split(",").filter(Boolean) });
  }
  return entries;
}

/** `passwd` and `group` are the image's files (empty when it has none). */
export function resolveUser(spec: string, passwd: string, group: string): ResolvedUser {
  const trimmed = spec.trim();
  const [userPart = "", groupPart, extra] = trimmed === "" ? ["0"] : trimmed.split(":");
  if (extra !== undefined || userPart === "" || groupPart === "") {
    throw new RuntimeError("invalid_spec", `invalid image user "${spec}"`);
  }
  const users = parsePasswd(passwd);
  const groups = parseGroup(group);

  const numericUid = parseId(userPart);
  const entry = numericUid === null ? users.find((u) => u.name === userPart) : users.find((u) => u.uid === numericUid);
  if (numericUid === null && !entry) {
    throw new RuntimeError("invalid_spec", `image user "${userPart}" is not in the image's /etc/passwd`);
  }
  const uid = numericUid ?? (entry as PasswdEntry).uid;

  let gid = entry?.gid ?? 0;
  if (groupPart !== undefined) {
    const numericGid = parseId(groupPart);
    if (numericGid !== null) gid = numericGid;
    else {
      const named = groups.find((g) => g.name === groupPart);
      if (!named) throw new RuntimeError("invalid_spec", `image group "${groupPart}" is not in the image's /etc/group`);
      gid = named.gid;
    }
  }

  const additionalGids = entry
    ? [...new Set(groups.filter((g) => g.members.includes(entry.name) && g.gid !== gid).map((g) => g.gid))]
    : [];
  return { uid, gid, additionalGids, home: entry?.home ?? "/" };
}
