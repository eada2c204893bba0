/* Test probe (host-isolation.test.ts): tries socket(AF_VSOCK) and prints the outcome. */
#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>

int main(void) {
  int fd = socket(40 /* AF_VSOCK */, SOCK_STREAM, 0);
  if (fd < 0) printf("vsock errno %d\n", errno);
  else printf("vsock fd %d\n", fd);
  return 0;
}
