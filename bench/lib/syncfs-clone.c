// The snapshot path NOT taken, for bench/snapshot-floor.ts only: syncfs of both mounts (a
// thread each) then FICLONE of each image, with no FIFREEZE. The clone is crash-consistent
// (everything written before is in it, but the XFS log is not clean: a restore replays it
// at mount), which is why Warren freezes instead; this measures what that costs.
//   syncfs-clone <mount> <mount> <source> <target> <source> <target>
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static void *flush(void *fd) {
  if (syncfs(*(int *)fd) != 0) perror("syncfs");
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: syncfs-clone <mount> <mount> <source> <target> <source> <target>\n");
    return 2;
  }
  int fds[2];
  pthread_t threads[2];
  for (int i = 0; i < 2; i++) {
    fds[i] = open(argv[1 + i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fds[i] < 0 || pthread_create(&threads[i], NULL, flush, &fds[i]) != 0) return 1;
  }
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  for (int p = 0; p < 2; p++) {
    int in = open(argv[3 + 2 * p], O_RDONLY | O_CLOEXEC);
    int out = open(argv[4 + 2 * p], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (in < 0 || out < 0 || ioctl(out, FICLONE, in) != 0) {
      fprintf(stderr, "clone %s: %s\n", argv[3 + 2 * p], strerror(errno));
      return 1;
    }
    close(in);
    close(out);
  }
  return 0;
}
