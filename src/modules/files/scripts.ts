// What the file API runs inside a sandbox (docs/api-decisions.md "Files"): the host's static
// busybox, bound read-only at FILES_BUSYBOX_PATH in every sandbox, as `busybox sh -c SCRIPT`
// with the caller's paths as positional arguments (never spliced into the script). It runs as
// the sandbox's own user in its own mount namespace, so every path, symlink and `..` resolves
// inside the sandbox's root by construction; the image's own tools (or lack of a shell) do not
// matter. A script says what went wrong by its exit status (FILE_EXIT), and its output is
// parsed here, bounded, as hostile input.
import { FILES_BUSYBOX_PATH } from "../../drivers/runtime/local/oci-config.js";

export const BUSYBOX = FILES_BUSYBOX_PATH;

/** Exit statuses the scripts use for the answers they know (anything else: the stderr text decides). */
export const FILE_EXIT = {
  notFound: 64,
  wrongType: 65,
  isDirectory: 66,
  exists: 67,
  notEmpty: 68,
} as const;

const PRELUDE = `B=${BUSYBOX}\n`;

/** One stat record: raw mode (hex), size, atime, mtime, uid, gid, links. */
const STAT_FORMAT = "%f %s %X %Y %u %g %h";

/** The argv running `script` with `args` as $1... (argv[0] of the script is `warren-files`). */
export function scriptArgv(script: string, args: string[]): string[] {
  return [BUSYBOX, "sh", "-c", PRELUDE + script, "warren-files", ...args];
}

/** $1 path, $2 temporary path beside it, $3 mode: stdin into the temporary file, then renamed over the path. */
export const WRITE_FILE = `p=$1; t=$2; m=$3
[ -d "$p" ] && exit ${FILE_EXIT.isDirectory}
d=\${p%/*}; [ -z "$d" ] && d=/
$B mkdir -p -- "$d" || exit 1
$B cat > "$t" || { $B rm -f -- "$t"; exit 1; }
$B chmod "$m" "$t" || { $B rm -f -- "$t"; exit 1; }
$B mv -f -- "$t" "$p" || { $B rm -f -- "$t"; exit 1; }
exec $B stat -c '${STAT_FORMAT}' -- "$p"
`;

/** $1 a temporary file an interrupted upload left. */
export const REMOVE_TEMPORARY = `exec $B rm -f -- "$1"\n`;

/** $1 directory (created with its parents): a tar stream on stdin extracted there, owners not restored. */
export const EXTRACT_TAR = `d=$1
$B mkdir -p -- "$d" || exit 1
[ -d "$d" ] || exit ${FILE_EXIT.wrongType}
cd -- "$d" || exit 1
exec $B tar -x -o -f -
`;

/**
 * $1 path: a directory as `d\\n` then a tar stream of it (symlinks as symlinks, FIFOs and
 * devices as entries, never read); a regular file as `f SIZE\\n` then exactly its bytes. The
 * type is checked on the opened descriptor, so a file swapped for a FIFO or a device after the
 * first check is refused, and never more than the size read at open is sent.
 */
export const READ = `p=$1
if [ -d "$p" ]; then echo d; exec $B tar -c -f - -C "$p" .; fi
[ -e "$p" ] || exit ${FILE_EXIT.notFound}
[ -f "$p" ] || exit ${FILE_EXIT.wrongType}
exec 3<"$p" || exit 1
set -- $($B stat -L -c '%f %s' /proc/self/fd/3)
[ -n "$2" ] || exit 1
case $(( 0x$1 & 0xF000 )) in 32768) ;; *) exit ${FILE_EXIT.wrongType} ;; esac
echo "f $2"
exec $B dd bs=65536 count="$2" iflag=count_bytes <&3 2>/dev/null
`;

/** $1 path: its stat record (not following a symlink), then a symlink's target. */
export const STAT = `p=$1
[ -e "$p" ] || [ -L "$p" ] || exit ${FILE_EXIT.notFound}
$B stat -c '${STAT_FORMAT}' -- "$p" || exit 1
if [ -L "$p" ]; then exec $B readlink -- "$p"; fi
`;

const LIST_ONCE = `$B find . -mindepth 1 -maxdepth 1 -exec $B stat -c '${STAT_FORMAT}' -- {} \\; -print0`;

/** $1 directory: one record per entry, `STAT\\n./NAME\\0` (a name may hold anything but NUL). */
export const LIST = `p=$1
[ -e "$p" ] || [ -L "$p" ] || exit ${FILE_EXIT.notFound}
[ -d "$p" ] || exit ${FILE_EXIT.wrongType}
cd -- "$p" || exit 1
exec ${LIST_ONCE}
`;

/** $1 directory, $2 seconds between passes: LIST's records, each pass ended by the record `.\\n.\\0`, until killed. */
export const WATCH = `p=$1
[ -e "$p" ] || [ -L "$p" ] || exit ${FILE_EXIT.notFound}
[ -d "$p" ] || exit ${FILE_EXIT.wrongType}
cd -- "$p" || exit 1
while :; do
  ${LIST_ONCE}
  printf '.\\n.\\0'
  $B sleep "$2"
done
`;

/** $1 path, $2 mode: the directory and its parents; an existing directory is fine. */
export const MKDIR = `p=$1
if [ -e "$p" ] || [ -L "$p" ]; then [ -d "$p" ] && exit 0; exit ${FILE_EXIT.exists}; fi
exec $B mkdir -p -m "$2" -- "$p"
`;

/** $1 path, $2 `1` for recursive: a file or symlink, an empty directory, or (recursive) a tree. */
export const REMOVE = `p=$1
[ -e "$p" ] || [ -L "$p" ] || exit ${FILE_EXIT.notFound}
if [ -d "$p" ] && ! [ -L "$p" ]; then
  [ "$2" = 1 ] && exec $B rm -rf -- "$p"
  [ -z "$($B ls -A -- "$p")" ] || exit ${FILE_EXIT.notEmpty}
  exec $B rmdir -- "$p"
fi
exec $B rm -f -- "$p"
`;

/** $1 from, $2 to, $3 `1` to replace an existing file: a rename (parents of `to` created). */
export const RENAME = `f=$1; t=$2
[ -e "$f" ] || [ -L "$f" ] || exit ${FILE_EXIT.notFound}
if [ -e "$t" ] || [ -L "$t" ]; then
  [ "$3" = 1 ] || exit ${FILE_EXIT.exists}
  [ -d "$t" ] && ! [ -L "$t" ] && exit ${FILE_EXIT.isDirectory}
fi
d=\${t%/*}; [ -z "$d" ] && d=/
$B mkdir -p -- "$d" || exit 1
exec $B mv -f -- "$f" "$t"
`;
