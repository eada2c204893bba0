/*
 * Test-only (exec-agent.test.ts): what hostile code in a sandbox would try against the exec
 * agent's channel to the server. It finds the agent (the process whose exe, or failing that
 * argv[0], is /dev/.warren-exec), then tries to take or reach its fd 1 (the socket to the
 * server) every way it can, and writes a frame that once crashed the server where it gets a
 * copy. Each attempt prints `name=ok` or `name=<errno name>`, one per line.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define AGENT "/dev/.warren-exec"

static void report(const char *name, long result) {
	if (result >= 0) printf("%s=ok\n", name);
	else printf("%s=%s\n", name, strerrorname_np(errno));
	fflush(stdout);
}

/*
 * The 9-byte frame `u32 id, 'X', u32 len=0` the server once read an exit code out of, for
 * the first exec ids: one of them is this probe's own exec, which the server is waiting on.
 */
static void attack(int fd) {
	long written = 0;
	for (uint32_t id = 1; id <= 64 && written >= 0; id++) {
		unsigned char frame[9] = {id & 0xff, 0, 0, 0, 'X', 0, 0, 0, 0};
		written = write(fd, frame, sizeof frame);
	}
	report("write_frame", written);
}

static pid_t find_agent(const char **via) {
	DIR *proc = opendir("/proc");
	struct dirent *entry;
	pid_t found = 0;
	char path[64], target[256];
	while (proc && (entry = readdir(proc)) && !found) {
		pid_t pid = (pid_t)atoi(entry->d_name);
		if (pid <= 0 || pid == getpid()) continue;
		snprintf(path, sizeof path, "/proc/%d/exe", pid);
		ssize_t n = readlink(path, target, sizeof target - 1);
		if (n > 0) {
			target[n] = 0;
			if (strcmp(target, AGENT) == 0) {
				found = pid;
				*via = "exe";
				break;
			}
		}
		snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
		int fd = open(path, O_RDONLY);
		if (fd < 0) continue;
		n = read(fd, target, sizeof target - 1);
		close(fd);
		if (n > 0) {
			target[n] = 0;
			if (strcmp(target, AGENT) == 0) {
				found = pid;
				*via = "cmdline";
			}
		}
	}
	if (proc) closedir(proc);
	return found;
}

int main(void) {
	const char *via = "none";
	pid_t pid = find_agent(&via);
	printf("agent=%d via=%s\n", pid, via);
	if (pid <= 0) return 1;

	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	report("pidfd_open", pidfd);
	if (pidfd >= 0) {
		int fd = (int)syscall(SYS_pidfd_getfd, pidfd, 1, 0);
		report("pidfd_getfd", fd);
		if (fd >= 0) attack(fd);
	}

	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd/1", pid);
	int fd = open(path, O_RDWR);
	report("proc_fd_open", fd);
	if (fd >= 0) attack(fd);

	long traced = ptrace(PTRACE_ATTACH, pid, NULL, NULL);
	report("ptrace_attach", traced);
	if (traced == 0) ptrace(PTRACE_DETACH, pid, NULL, NULL);

	/* The agent is a static non-PIE binary: its ELF header is mapped at 0x400000. */
	unsigned char byte = 0;
	struct iovec local = {&byte, 1}, remote = {(void *)0x400000, 1};
	report("process_vm_readv", process_vm_readv(pid, &local, 1, &remote, 1, 0));
	/* Into a read-only page: at worst EFAULT, never a change to the agent. */
	report("process_vm_writev", process_vm_writev(pid, &local, 1, &remote, 1, 0));
	report("kcmp", syscall(SYS_kcmp, getpid(), pid, KCMP_FILE, 1, 1));
	return 0;
}
