// Makes a sandbox's user namespace and pins it to a file (as `ip netns add` pins a network
// namespace), so runc can join it by path: `userns-helper make OWNER USERNS_FILE [NETNS_FILE]`.
//
// The namespace is created by a process whose effective uid is OWNER (an unprivileged host
// uid of the sandbox's own), so the kernel charges the per-user counts of everything made
// inside it (inotify instances and watches, fanotify groups and marks, namespaces: the
// ucounts, which walk up to the namespace's owner) to OWNER in the initial namespace and not to
// host root, whose budget the server and every other sandbox share. Ids are mapped one to one
// (0 inside is 0 outside), so files keep the owners they have on the host. With NETNS_FILE
// a network namespace owned by the new user namespace is made and pinned there too: runc
// joins the user namespace first, and from inside it may join only namespaces it owns. A
// pin file is created (it must not exist); `umount` of it drops the pin.
//
// `userns-helper owner USERNS_FILE` prints the host uid owning a pinned user namespace
// (NS_GET_OWNER_UID), for diagnostics and tests.
//
// With id mapping (id-mapping.ts) the sandbox's ids are shifted instead:
// `userns-helper make-mapped FIRST USERNS_FILE [NETNS_FILE]` makes the namespace owned by
// host uid FIRST with ids 0..65535 inside mapped to FIRST..FIRST+65535 outside, so root inside
// is an unprivileged host uid for every per-user count (epoll watches, RLIMIT_NPROC, inotify).
// `userns-helper idmap USERNS_FILE SOURCE TARGET [ro]` binds SOURCE (a file or a directory,
// not its submounts) at TARGET as an idmapped mount through that namespace (mount_setattr
// MOUNT_ATTR_IDMAP): a file owned by host uid N on disk shows as FIRST+N, so as N inside, and
// what the sandbox writes lands as N on disk. `userns-helper overlay FSUID OPTIONS TARGET`
// mounts an overlayfs (options relative to the cwd) with fsuid and fsgid FSUID, so its
// mounter's credentials (which it creates its work dirs and copies up with) map through
// idmapped upper and lower layers.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *what) {
  fprintf(stderr, "userns-helper: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(path);
  ssize_t n = write(fd, text, strlen(text));
  if (n != (ssize_t)strlen(text)) fail(path);
  close(fd);
}

static void pin(const char *ns, const char *file) {
  int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
  if (fd < 0) fail(file);
  close(fd);
  if (mount(ns, file, NULL, MS_BIND, NULL) != 0) {
    int saved = errno;
    unlink(file);
    errno = saved;
    fail(file);
  }
}

#ifndef NS_GET_OWNER_UID
#define NS_GET_OWNER_UID _IO(0xb7, 0x4)
#endif

static int print_owner(const char *file) {
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(file);
  uid_t uid;
  if (ioctl(fd, NS_GET_OWNER_UID, &uid) != 0) fail("NS_GET_OWNER_UID");
  close(fd);
  printf("%u\n", (unsigned)uid);
  return 0;
}

#define MAPPED_IDS 65536UL

static int idmap(const char *user_file, const char *source, const char *target, int read_only) {
  int userns = open(user_file, O_RDONLY | O_CLOEXEC);
  if (userns < 0) fail(user_file);
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (tree < 0) fail("open_tree");
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (read_only ? MOUNT_ATTR_RDONLY : 0);
  attr.userns_fd = (unsigned)userns;
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) fail("mount_setattr");
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) != 0) fail("move_mount");
  return 0;
}

static int mount_overlay(const char *fsuid_text, const char *options, const char *target) {
  char *end = NULL;
  unsigned long id = strtoul(fsuid_text, &end, 10);
  if (*fsuid_text == '\0' || *end != '\0' || id == 0 || id >= 0xffffffffUL) {
    fprintf(stderr, "userns-helper: FSUID must be a non-root uid\n");
    return 2;
  }
  setfsgid((gid_t)id);
  setfsuid((uid_t)id);
  if ((uid_t)setfsuid((uid_t)-1) != (uid_t)id) fail("setfsuid");
  // A nonzero fsuid drops the file capabilities from the effective set; the overlay keeps the
  // mounter's credentials for copy-up (which chowns), so they are raised again.
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &header, data) != 0) fail("capget");
  data[0].effective = data[0].permitted;
  data[1].effective = data[1].permitted;
  if (syscall(SYS_capset, &header, data) != 0) fail("capset");
  if (mount("overlay", target, "overlay", 0, options) != 0) fail("mounting the overlay");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "owner") == 0) return print_owner(argv[2]);
  if ((argc == 5 || argc == 6) && strcmp(argv[1], "idmap") == 0) {
    return idmap(argv[2], argv[3], argv[4], argc == 6 && strcmp(argv[5], "ro") == 0);
  }
  if (argc == 5 && strcmp(argv[1], "overlay") == 0) return mount_overlay(argv[2], argv[3], argv[4]);
  int mapped = argc > 1 && strcmp(argv[1], "make-mapped") == 0;
  if ((argc != 4 && argc != 5) || (strcmp(argv[1], "make") != 0 && !mapped)) {
    fprintf(stderr,
            "usage: userns-helper make OWNER_UID USERNS_FILE [NETNS_FILE] | make-mapped FIRST_UID USERNS_FILE "
            "[NETNS_FILE] | idmap USERNS_FILE SOURCE TARGET [ro] | overlay FSUID OPTIONS TARGET | owner USERNS_FILE\n");
    return 2;
  }
  char *end = NULL;
  unsigned long owner = strtoul(argv[2], &end, 10);
  if (*argv[2] == '\0' || *end != '\0' || owner == 0 || owner >= 0xffffffffUL ||
      (mapped && owner > 0xffffffffUL - MAPPED_IDS)) {
    fprintf(stderr, "userns-helper: OWNER_UID must be a non-root uid\n");
    return 2;
  }
  const char *user_file = argv[3];
  const char *net_file = argc == 5 ? argv[4] : NULL;
  int ready[2], go[2];
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) fail("pipe");
  pid_t child = fork();
  if (child < 0) fail("fork");
  if (child == 0) {
    char byte = 0;
    close(ready[0]);
    close(go[1]);
    if (setgroups(0, NULL) != 0) _exit(10);
    if (setresgid(owner, owner, owner) != 0 || setresuid(owner, owner, owner) != 0) _exit(11);
    if (unshare(CLONE_NEWUSER | (net_file ? CLONE_NEWNET : 0)) != 0) _exit(12);
    if (write(ready[1], &byte, 1) != 1) _exit(13);
    // Stay until the parent has mapped and pinned the namespace (or died).
    (void)!read(go[0], &byte, 1);
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  char byte;
  if (read(ready[0], &byte, 1) != 1) {
    int status = 0;
    waitpid(child, &status, 0);
    fprintf(stderr, "userns-helper: the child could not make the namespace (exit %d)\n",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 1;
  }
  char path[64], map[64];
  // One to one: the whole id space, so every file's owner inside is its owner outside; or,
  // mapped, 65536 ids from the owner on.
  if (mapped) snprintf(map, sizeof map, "0 %lu %lu\n", owner, MAPPED_IDS);
  else snprintf(map, sizeof map, "0 0 4294967295\n");
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)child);
  write_file(path, map);
  snprintf(path, sizeof path, "/proc/%d/gid_map", (int)child);
  write_file(path, map);
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
  pin(path, user_file);
  if (net_file) {
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)child);
    pin(path, net_file);
  }
  close(go[1]);
  int status = 0;
  waitpid(child, &status, 0);
  return 0;
}
