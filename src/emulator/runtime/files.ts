// File operations of agentd on a VM's workspace: info (models.FileInfo) and search.
import { readFileSync, type Stats } from "node:fs";
import { lstat, readdir } from "node:fs/promises";
import { userInfo } from "node:os";
import { join, matchesGlob, relative, sep } from "node:path";
import { rfc3339 } from "../util.js";
import { vmPath } from "./paths.js";

/** agentd's models.FileInfo. */
export interface FileInfo {
  path: string;
  size: number;
  is_dir: boolean;
  /** ls-style: "-rw-r--r--", "drwxr-xr-x", "lrwxrwxrwx". */
  mode: string;
  mod_time: string;
  owner: string;
  group: string;
}

/** Search stops after this many matches. */
export const SEARCH_LIMIT = 1000;

export function fileInfo(workspace: string, host: string, st: Stats): FileInfo {
  return {
    path: vmPath(workspace, host),
    size: st.isDirectory() ? 0 : st.size,
    is_dir: st.isDirectory(),
    mode: modeString(st),
    mod_time: rfc3339(st.mtimeMs),
    owner: userName(st.uid),
    group: groupName(st.gid),
  };
}

/**
 * Entries under `dir` (recursively, not following symbolic links) whose name matches the glob
 * `pattern`; a pattern with a "/" is matched against the path relative to `dir` instead.
 */
export async function search(workspace: string, dir: string, pattern: string): Promise<FileInfo[]> {
  const out: FileInfo[] = [];
  const byPath = pattern.includes("/");
  const walk = async (d: string): Promise<void> => {
    let names: string[];
    try {
      names = await readdir(d);
    } catch {
      return;
    }
    for (const name of names.sort()) {
      if (out.length >= SEARCH_LIMIT) return;
      const p = join(d, name);
      let st: Stats;
      try {
        st = await lstat(p);
      } catch {
        continue;
      }
      const subject = byPath ? relative(dir, p).split(sep).join("/") : name;
      if (matchesGlob(subject, pattern)) out.push(fileInfo(workspace, p, st));
      if (st.isDirectory()) await walk(p);
    }
  };
  await walk(dir);
  return out;
}

function modeString(st: Stats): string {
  const type = st.isDirectory() ? "d" : st.isSymbolicLink() ? "l" : "-";
  let bits = "";
  for (let shift = 6; shift >= 0; shift -= 3) {
    const m = (st.mode >> shift) & 7;
    bits += `${m & 4 ? "r" : "-"}${m & 2 ? "w" : "-"}${m & 1 ? "x" : "-"}`;
  }
  return type + bits;
}

let me: { uid: number; name: string } | undefined;
function userName(uid: number): string {
  try {
    me ??= { uid: userInfo().uid, name: userInfo().username };
  } catch {
    me = { uid: -1, name: "" };
  }
  return uid === me.uid && me.name !== "" ? me.name : String(uid);
}

let groups: Map<number, string> | undefined;
function groupName(gid: number): string {
  if (!groups) {
    groups = new Map();
    try {
      for (const line of readFileSync("/etc/group", "utf8").split("\n")) {
        const [name, , id] = line.split(":");
        if (name && id !== undefined && /^\d+$/.test(id)) groups.set(Number(id), name);
      }
    } catch {
      // no /etc/group: numeric ids
    }
  }
  return groups.get(gid) ?? String(gid);
}
