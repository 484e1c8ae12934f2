// VM paths: requests name files as the VM sees them (`/workspace/...`, or relative to it); the
// emulator keeps each VM's workspace in a host directory. A path that leaves the workspace,
// lexically (`..`, another absolute path) or through a symbolic link, is refused with 400
// naming the request field, before anything touches the disk.
import { lstatSync, readlinkSync, realpathSync, type Stats } from "node:fs";
import { dirname, join, posix, relative, resolve, sep } from "node:path";
import { badRequest, ServiceError } from "../errors.js";

/** Where the workspace is on a VM. */
export const VM_WORKSPACE = "/workspace";

/**
 * The host path of `vmPath` inside `workspace` (a real path: no symbolic links in it). A relative
 * `vmPath` is relative to /workspace. Throws 400 `<field> ... is outside /workspace` (or `<field>
 * is too long`). A path the file system cannot resolve (under a regular file, through a symbolic
 * link loop) is not there: its host path is returned, and using it fails as for a missing one.
 */
export function hostPath(workspace: string, vmPath: unknown, field: string): string {
  if (typeof vmPath !== "string" || vmPath === "") throw badRequest(`${field} is required`);
  if (vmPath.includes("\0")) throw badRequest(`${field} must not contain a NUL character`);
  const abs = posix.resolve(VM_WORKSPACE, vmPath);
  if (abs !== VM_WORKSPACE && !abs.startsWith(`${VM_WORKSPACE}/`)) throw outside(field, vmPath);
  const rel = abs.slice(VM_WORKSPACE.length + 1);
  const host = rel === "" ? workspace : join(workspace, ...rel.split("/"));
  // The lexical check passed; a symbolic link on the way may still lead out.
  try {
    followLinks(workspace, host, field, vmPath);
  } catch (err) {
    // A name over NAME_MAX bytes, or a path over PATH_MAX: the caller's mistake.
    if ((err as NodeJS.ErrnoException).code === "ENAMETOOLONG") throw badRequest(`${field} is too long (a name over ${NAME_MAX} bytes or a path over 4096)`);
    throw err;
  }
  return host;
}

/** Throws 400 `<field> ... is outside /workspace` if a symbolic link on the way to `host` leads out. */
function followLinks(workspace: string, host: string, field: string, vmPath: string): void {
  let p = host;
  for (let links = 0; ; ) {
    try {
      if (!within(workspace, realpathSync(p))) throw outside(field, vmPath);
      return;
    } catch (err) {
      if (err instanceof ServiceError) throw err;
      const code = (err as NodeJS.ErrnoException).code;
      // A symbolic link loop at the end: it cannot be followed, by the kernel either, so its
      // directory decides (an unlink, a rename or an rm acts on the link itself, which must not
      // be reached through a link that leads out). Not there, if that is inside.
      if (code === "ELOOP") {
        const parent = dirname(p);
        if (parent === p) return;
        p = parent;
        continue;
      }
      if (code !== "ENOENT" && code !== "ENOTDIR") throw err;
      // A dangling symbolic link: a write through it creates its target, which decides.
      if (lstatOrUndefined(p)?.isSymbolicLink()) {
        if (++links > MAX_LINKS) throw outside(field, vmPath);
        // Relative to where the link really is: its directory may be reached through a link.
        p = resolve(realpathSync(dirname(p)), readlinkSync(p));
        continue;
      }
      const parent = dirname(p);
      if (parent === p) return;
      p = parent; // not there yet: the nearest existing ancestor decides
    }
  }
}

/**
 * lstat, with "not there" for a missing path, one under a regular file (ENOTDIR: `plain.txt/x`)
 * and one through a symbolic link loop (ELOOP).
 */
function lstatOrUndefined(p: string): Stats | undefined {
  try {
    return lstatSync(p, { throwIfNoEntry: false });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOTDIR" || code === "ELOOP") return undefined;
    throw err;
  }
}

/** Symbolic links followed before a path is refused (Linux's own limit, ELOOP). */
const MAX_LINKS = 40;

/** The VM path of a host path inside `workspace`. */
export function vmPath(workspace: string, host: string): string {
  const rel = relative(workspace, host);
  return rel === "" ? VM_WORKSPACE : `${VM_WORKSPACE}/${rel.split(sep).join("/")}`;
}

/** A plain name usable as one path segment (session ids, skill names). */
export function isPlainSegment(s: string): boolean {
  return /^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/.test(s);
}

/** The longest file name most file systems take, in bytes (NAME_MAX). */
const NAME_MAX = 255;

/**
 * Why `s` cannot be used as one path segment as it is (a session id): empty, `.` or `..`, a
 * `/`, `\` or NUL in it, or longer than NAME_MAX bytes; undefined when it can. Anything else
 * (`user:42`, spaces, non-ASCII) is a valid directory name on the emulator's (POSIX) host.
 */
export function unsafeSegment(s: string): string | undefined {
  if (s === "") return "must not be empty";
  if (s === "." || s === "..") return "must not be . or ..";
  if (/[/\\\0]/.test(s)) return "must not contain /, \\ or a NUL character";
  if (Buffer.byteLength(s) > NAME_MAX) return `must be at most ${NAME_MAX} bytes long`;
  return undefined;
}

function within(root: string, p: string): boolean {
  return p === root || p.startsWith(root.endsWith(sep) ? root : root + sep);
}

function outside(field: string, path: string): ServiceError {
  return badRequest(`${field} ${JSON.stringify(path)} is outside ${VM_WORKSPACE}`);
}
