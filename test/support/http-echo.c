#define _GNU_SOURCE
/*
 * A tiny HTTP/1.1 server for endpoint tests and benchmarks, run inside a sandbox (static,
 * no libc beyond what -static brings). One forked child per connection, keep-alive:
 *   GET /headers   200, the request head as the body (what the proxy forwarded)
 *   POST /echo     200, the request body (Content-Length) streamed back as it arrives
 *   GET /bigheader 200 with a 20,000-byte header (a response head over the proxy's cap)
 *   any Upgrade    101, then every byte received is echoed back (a raw upgrade passthrough)
 *   anything else  200 "hello" (5 bytes)
 * Other requests' bodies are not read (the tests and benchmark send none). Usage: http-echo PORT
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static int write_all(int fd, const char *data, size_t length) {
  while (length > 0) {
    ssize_t n = write(fd, data, length);
    if (n <= 0) return -1;
    data += n;
    length -= (size_t)n;
  }
  return 0;
}

static void serve(int fd) {
  char buffer[65536];
  size_t filled = 0;
  for (;;) {
    char *end = NULL;
    while (!(end = memmem(buffer, filled, "\r\n\r\n", 4))) {
      if (filled == sizeof buffer) return;
      ssize_t n = read(fd, buffer + filled, sizeof buffer - filled);
      if (n <= 0) return;
      filled += (size_t)n;
    }
    size_t head = (size_t)(end - buffer) + 4;
    char saved = buffer[head - 1];
    buffer[head - 1] = '\0';
    int upgrade = strcasestr(buffer, "\r\nupgrade:") != NULL;
    int headers = strncmp(buffer, "GET /headers", 12) == 0 && (buffer[12] == ' ' || buffer[12] == '?');
    int echo = strncmp(buffer, "POST /echo ", 11) == 0;
    int big = strncmp(buffer, "GET /bigheader ", 15) == 0;
    char *length_at = strcasestr(buffer, "\r\ncontent-length:");
    size_t length = length_at ? strtoul(length_at + 17, NULL, 10) : 0;
    buffer[head - 1] = saved;
    if (echo) {
      char reply[128];
      int n = snprintf(reply, sizeof reply, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", length);
      if (write_all(fd, reply, (size_t)n) < 0) return;
      size_t have = filled - head < length ? filled - head : length;
      if (write_all(fd, buffer + head, have) < 0) return;
      size_t left = length - have;
      memmove(buffer, buffer + head + have, filled - head - have);
      filled -= head + have;
      while (left > 0) {
        ssize_t got = read(fd, buffer, left < sizeof buffer ? left : sizeof buffer);
        if (got <= 0 || write_all(fd, buffer, (size_t)got) < 0) return;
        left -= (size_t)got;
      }
      continue;
    }
    if (big) {
      static char filler[20001];
      memset(filler, 'a', 20000);
      const char *start = "HTTP/1.1 200 OK\r\nX-Big: ", *end_of_head = "\r\nContent-Length: 0\r\n\r\n";
      if (write_all(fd, start, strlen(start)) < 0 || write_all(fd, filler, 20000) < 0 ||
          write_all(fd, end_of_head, strlen(end_of_head)) < 0)
        return;
      memmove(buffer, buffer + head, filled - head);
      filled -= head;
      continue;
    }
    if (upgrade) {
      const char *reply = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
      if (write_all(fd, reply, strlen(reply)) < 0) return;
      if (filled > head && write_all(fd, buffer + head, filled - head) < 0) return;
      for (;;) {
        ssize_t n = read(fd, buffer, sizeof buffer);
        if (n <= 0 || write_all(fd, buffer, (size_t)n) < 0) return;
      }
    }
    char reply[256];
    if (headers) {
      int n = snprintf(reply, sizeof reply, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n", head);
      if (write_all(fd, reply, (size_t)n) < 0 || write_all(fd, buffer, head) < 0) return;
    } else {
      const char *hello = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
      if (write_all(fd, hello, strlen(hello)) < 0) return;
    }
    memmove(buffer, buffer + head, filled - head);
    filled -= head;
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: http-echo PORT\n");
    return 2;
  }
  signal(SIGCHLD, SIG_IGN);
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1]))};
  if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof address) < 0 || listen(listener, 512) < 0) {
    perror("http-echo");
    return 1;
  }
  for (;;) {
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) continue;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pid_t pid = fork();
    if (pid == 0) {
      close(listener);
      serve(fd);
      _exit(0);
    }
    close(fd);
  }
}
