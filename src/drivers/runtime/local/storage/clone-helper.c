// warren-clone: the few system calls a copy-on-write snapshot needs, in one short-lived
// process, so the time a sandbox stays frozen is a handful of system calls rather than one
// spawned tool (sync, cp) per step.
//
//   warren-clone sync <mount>...
//       syncfs(2) each mounted filesystem (writers go on).
//   warren-clone sync-clone <mount>... -- <source> <target> [<source> <target>]...
//       syncfs(2) each mount, then FICLONE each source (the image file under a mount) into
//       a new target (O_EXCL, 0600). On any failure the targets it made are removed, the
//       reason goes to stderr, and it exits 1.
//
// The clone is taken with the sandbox's processes frozen (cgroup freezer) and its
// filesystems mounted and live: everything written before the freeze is flushed by the
// syncfs and so in the clone, and the filesystem in it is what a power cut at that instant
// would leave (FICLONE takes the image's inode lock, so each write the loop device makes is
// wholly in or out), which XFS's log recovery makes consistent at the restore's mount. No
// FIFREEZE: a clean log cost 35-50 ms more of the frozen window on this stack (ARCHITECTURE.md
// "Snapshots"), and a helper killed mid-way leaves no filesystem frozen.
//
// The mounts are flushed each on a thread of its own, at once: on a loop-mounted image every
// flush is an fsync of the image file in the pool and then of the pool's file on the host,
// and the two filesystems' chains overlap instead of adding up.
//
// Built with `gcc -static` by the driver (cached by this file's hash, like the exec agent).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MAX_ITEMS 16

static int open_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fprintf(stderr, "open %s: %s\n", path, strerror(errno));
  return fd;
}

/** One mount's part of a parallel step: its fd, path, the call to make and its outcome. */
struct mount_job {
  int fd;
  const char *path;
  int (*op)(int fd);
  int error;
};

static int op_syncfs(int fd) { return syncfs(fd); }

static void *run_job(void *arg) {
  struct mount_job *job = arg;
  job->error = job->op(job->fd) == 0 ? 0 : errno;
  return NULL;
}

/** Runs `op` on every job at once (a thread each; inline when one cannot be made); 0 when all succeeded. */
static int run_parallel(struct mount_job *jobs, int n, int (*op)(int fd)) {
  pthread_t threads[MAX_ITEMS];
  int started[MAX_ITEMS] = {0};
  for (int j = 0; j < n; j++) {
    jobs[j].op = op;
    jobs[j].error = 0;
    if (j < n - 1 && pthread_create(&threads[j], NULL, run_job, &jobs[j]) == 0) started[j] = 1;
    else run_job(&jobs[j]);
  }
  int failed = 0;
  for (int j = 0; j < n; j++) {
    if (started[j]) pthread_join(threads[j], NULL);
    if (jobs[j].error != 0) failed = 1;
  }
  return failed;
}

/** Opens the `n` mounts of `paths`; on failure closes what it opened and returns -1. */
static int open_mounts(struct mount_job *jobs, char **paths, int n) {
  for (int j = 0; j < n; j++) {
    jobs[j].path = paths[j];
    jobs[j].fd = open_dir(paths[j]);
    if (jobs[j].fd < 0) {
      while (j-- > 0) close(jobs[j].fd);
      return -1;
    }
  }
  return 0;
}

static int do_sync(int argc, char **argv) {
  struct mount_job jobs[MAX_ITEMS];
  int n = argc - 2;
  if (n > MAX_ITEMS) {
    fprintf(stderr, "too many mounts\n");
    return 2;
  }
  if (open_mounts(jobs, argv + 2, n) != 0) return 1;
  int status = 0;
  if (run_parallel(jobs, n, op_syncfs) != 0) {
    for (int j = 0; j < n; j++) {
      if (jobs[j].error != 0) fprintf(stderr, "syncfs %s: %s\n", jobs[j].path, strerror(jobs[j].error));
    }
    status = 1;
  }
  for (int j = 0; j < n; j++) close(jobs[j].fd);
  return status;
}

static int clone_file(const char *source, const char *target) {
  int in = open(source, O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    fprintf(stderr, "open %s: %s\n", source, strerror(errno));
    return -1;
  }
  int out = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    fprintf(stderr, "create %s: %s\n", target, strerror(errno));
    close(in);
    return -1;
  }
  int status = 0;
  if (ioctl(out, FICLONE, in) != 0) {
    fprintf(stderr, "clone %s: %s\n", source, strerror(errno));
    status = -1;
  }
  close(in);
  close(out);
  if (status != 0) unlink(target);
  return status;
}

static int do_sync_clone(int argc, char **argv) {
  struct mount_job jobs[MAX_ITEMS];
  int n_mounts = 0, i = 2;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (n_mounts == MAX_ITEMS) {
      fprintf(stderr, "too many mounts\n");
      return 2;
    }
    n_mounts++;
  }
  if (i >= argc || (argc - i - 1) % 2 != 0 || (argc - i - 1) / 2 > MAX_ITEMS) {
    fprintf(stderr, "usage: warren-clone sync-clone <mount>... -- <source> <target>...\n");
    return 2;
  }
  int first_pair = i + 1, n_pairs = (argc - first_pair) / 2;
  if (open_mounts(jobs, argv + 2, n_mounts) != 0) return 1;
  int status = 0;
  if (run_parallel(jobs, n_mounts, op_syncfs) != 0) {
    for (int m = 0; m < n_mounts; m++) {
      if (jobs[m].error != 0) fprintf(stderr, "syncfs %s: %s\n", jobs[m].path, strerror(jobs[m].error));
    }
    status = 1;
  }
  for (int m = 0; m < n_mounts; m++) close(jobs[m].fd);
  int cloned = 0;
  for (int p = 0; p < n_pairs && status == 0; p++) {
    if (clone_file(argv[first_pair + 2 * p], argv[first_pair + 2 * p + 1]) != 0) status = 1;
    else cloned++;
  }
  if (status != 0) {
    for (int p = 0; p < cloned; p++) unlink(argv[first_pair + 2 * p + 1]);
  }
  return status;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "sync") == 0) return do_sync(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "sync-clone") == 0) return do_sync_clone(argc, argv);
  fprintf(stderr, "usage: warren-clone sync|sync-clone ...\n");
  return 2;
}
