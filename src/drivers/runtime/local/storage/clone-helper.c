// warren-clone: the few ioctls a copy-on-write snapshot needs, in one short-lived process,
// so the time a sandbox stays frozen is a handful of system calls rather than one spawned
// tool (sync, fsfreeze, cp) per step.
//
//   warren-clone sync <mount>...
//       syncfs(2) each mounted filesystem (writers go on).
//   warren-clone freeze-clone <mount>... -- <source> <target> [<source> <target>]...
//       FIFREEZE each mount (flushes it and makes its log clean), FICLONE each source into a
//       new target (O_EXCL, 0600), then FITHAW every mount it froze, whatever happened. On any
//       failure the targets it made are removed, the reason goes to stderr, and it exits 1.
//
// Built with `gcc -static` by the driver (cached by this file's hash, like the exec agent).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
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

static int do_sync(int argc, char **argv) {
  for (int i = 2; i < argc; i++) {
    int fd = open_dir(argv[i]);
    if (fd < 0) return 1;
    if (syncfs(fd) != 0) {
      fprintf(stderr, "syncfs %s: %s\n", argv[i], strerror(errno));
      close(fd);
      return 1;
    }
    close(fd);
  }
  return 0;
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

static int do_freeze_clone(int argc, char **argv) {
  int mounts[MAX_ITEMS];
  const char *mount_paths[MAX_ITEMS];
  int n_mounts = 0, i = 2;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (n_mounts == MAX_ITEMS) {
      fprintf(stderr, "too many mounts\n");
      return 2;
    }
    mount_paths[n_mounts++] = argv[i];
  }
  if (i >= argc || (argc - i - 1) % 2 != 0 || (argc - i - 1) / 2 > MAX_ITEMS) {
    fprintf(stderr, "usage: warren-clone freeze-clone <mount>... -- <source> <target>...\n");
    return 2;
  }
  int first_pair = i + 1, n_pairs = (argc - first_pair) / 2;
  int frozen = 0, status = 0;
  for (int m = 0; m < n_mounts && status == 0; m++) {
    mounts[m] = open_dir(mount_paths[m]);
    if (mounts[m] < 0) {
      status = 1;
      break;
    }
    if (ioctl(mounts[m], FIFREEZE, 0) != 0) {
      fprintf(stderr, "freeze %s: %s\n", mount_paths[m], strerror(errno));
      close(mounts[m]);
      status = 1;
      break;
    }
    frozen++;
  }
  int cloned = 0;
  for (int p = 0; p < n_pairs && status == 0; p++) {
    if (clone_file(argv[first_pair + 2 * p], argv[first_pair + 2 * p + 1]) != 0) status = 1;
    else cloned++;
  }
  for (int m = 0; m < frozen; m++) {
    if (ioctl(mounts[m], FITHAW, 0) != 0 && errno != EINVAL) {
      fprintf(stderr, "thaw %s: %s\n", mount_paths[m], strerror(errno));
      status = 1;
    }
    close(mounts[m]);
  }
  if (status != 0) {
    for (int p = 0; p < cloned; p++) unlink(argv[first_pair + 2 * p + 1]);
  }
  return status;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "sync") == 0) return do_sync(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "freeze-clone") == 0) return do_freeze_clone(argc, argv);
  fprintf(stderr, "usage: warren-clone sync|freeze-clone ...\n");
  return 2;
}
