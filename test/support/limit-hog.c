// A process that takes as much of one kernel limit as it is let, then holds it (the
// kernel-limits tests run it inside a sandbox). `limit-hog MODE [ARG]` prints one line,
// `MODE COUNT ERRNO` (ERRNO "-" when it reached its target), then waits to be killed.
//   inotify DIR     watches on 2000 files of DIR, in instances of 2000, until refused
//   epoll N         N epoll watches (1000 eventfds in each of N/1000 epoll instances)
//   fds             opens /dev/null until refused
//   pids            forks sleeping children until refused
//   owner NSFILE    prints the host uid owning that user namespace (NS_GET_OWNER_UID) and exits
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define NS_GET_OWNER_UID 0xb704
#define FILES 2000

static void report(const char *mode, long count, int err) {
  printf("%s %ld %s\n", mode, count, err ? strerrorname_np(err) : "-");
  fflush(stdout);
  for (;;) pause();
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *mode = argv[1];
  long count = 0;
  if (strcmp(mode, "owner") == 0 && argc == 3) {
    int fd = open(argv[2], O_RDONLY);
    unsigned int uid = 0;
    if (fd < 0 || ioctl(fd, NS_GET_OWNER_UID, &uid) != 0) return perror(argv[2]), 1;
    printf("%u\n", uid);
    return 0;
  }
  if (strcmp(mode, "inotify") == 0 && argc == 3) {
    char path[4096];
    for (int i = 0; i < FILES; i++) {
      snprintf(path, sizeof path, "%s/f%d", argv[2], i);
      int fd = open(path, O_CREAT | O_WRONLY, 0644);
      if (fd < 0) return perror(path), 1;
      close(fd);
    }
    for (;;) {
      int group = inotify_init1(IN_CLOEXEC);
      if (group < 0) report(mode, count, errno);
      for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof path, "%s/f%d", argv[2], i);
        if (inotify_add_watch(group, path, IN_MODIFY) < 0) report(mode, count, errno);
        count++;
      }
    }
  }
  if (strcmp(mode, "epoll") == 0 && argc == 3) {
    long target = atol(argv[2]);
    int fds[1000];
    for (int i = 0; i < 1000; i++) {
      fds[i] = eventfd(0, EFD_CLOEXEC);
      if (fds[i] < 0) report(mode, count, errno);
    }
    while (count < target) {
      int ep = epoll_create1(EPOLL_CLOEXEC);
      if (ep < 0) report(mode, count, errno);
      for (int i = 0; i < 1000 && count < target; i++) {
        struct epoll_event event = {.events = EPOLLIN, .data.fd = fds[i]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &event) != 0) report(mode, count, errno);
        count++;
      }
    }
    report(mode, count, 0);
  }
  if (strcmp(mode, "fds") == 0) {
    for (;;) {
      if (open("/dev/null", O_RDONLY) < 0) report(mode, count, errno);
      count++;
    }
  }
  if (strcmp(mode, "pids") == 0) {
    for (;;) {
      pid_t child = fork();
      if (child < 0) report(mode, count, errno);
      if (child == 0) {
        for (;;) pause();
      }
      count++;
    }
  }
  return 2;
}
