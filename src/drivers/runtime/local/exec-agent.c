/*
 * Warren's exec agent: one resident process per running sandbox that runs commands for the
 * host. The driver starts it once per sandbox run with `runc exec --detach`, so it already
 * has everything runc sets up for an exec (namespaces, cgroup, capabilities, seccomp,
 * no_new_privs, rlimits, uid/gid/groups); each command is then a plain fork + execve that
 * inherits all of that, which takes well under a millisecond where `runc exec` takes
 * 20-40 ms (two Go processes per command). exec-agent.ts builds it and speaks to it.
 *
 * Protocol, over stdin (host -> agent) and stdout (agent -> host). Every frame is
 *   u32 exec_id, u8 type, u32 length, `length` bytes of payload     (little-endian)
 * Host -> agent:
 *   'R' run: u32 argc, argc x (u32 len, bytes), u32 envc, envc x (u32 len, bytes),
 *       u32 len, cwd bytes. Strings hold no NUL; env entries are KEY=value; cwd is absolute.
 *   'K' kill: SIGKILL to the exec's process group (while its command runs). No payload.
 *   'S' session: u32 flags (1: a terminal), u32 rows, u32 cols, then an 'R' payload. Like 'R',
 *       but the command's stdin is a pipe fed by 'I' frames, or with flag 1 all three of its
 *       stdio are the slave of a pseudo-terminal opened here (inside the sandbox), whose
 *       master's output comes as 'O'. Its output is flow-controlled: the agent stops reading
 *       the command while SESSION_WINDOW bytes it sent are not acknowledged by 'A'.
 *   'I' input for a session's stdin (at most SESSION_INPUT bytes not yet acknowledged by 'a');
 *       an empty one closes the stdin pipe (ignored with a terminal).
 *   'W' window size of a session's terminal: u32 rows, u32 cols.
 *   'A' u32: that many bytes of the session's output were delivered.
 * Agent -> host:
 *   'H' hello (exec_id 0, payload "warren-exec-agent 2"; version 1 had no sessions), once at start.
 *   'P' started: i32 pid (in the sandbox's PID namespace).
 *   'O' / 'E' bytes of the command's stdout / stderr, in arrival order.
 *   'X' exit: i32 exit code, or 128 + signal when a signal ended it (as runc exec reports).
 *   'F' the command did not start (message); last frame of the exec.
 *   'D' done: both output pipes closed after the exit, or DRAIN_GRACE_MS passed since the
 *       exit (a background child still holds them; they are closed); last frame of the exec.
 *   'a' u32: that many bytes of a session's input were written to its command.
 * The agent makes itself non-dumpable, so the sandbox's processes cannot reach its socket.
 * The command gets stdin from /dev/null, leads its own session and process group (as runc's
 * init does), and resolves argv[0] through the PATH of the request's environment. On stdin
 * EOF (the server is gone) the agent closes the command pipes and exits; commands already
 * running keep running. The agent ignores SIGPIPE and learns of exits through a signalfd.
 *
 * `exec-agent [--connect SOCKET] --reap /path/to/runc args...` is the same binary on the host
 * side (with --connect, its stdin and stdout are first connected to the server's socket): it runs
 * `runc exec --detach` of the agent as a child subreaper, so the agent, orphaned when runc
 * exits, becomes its child instead of the host's PID 1's. It reports runc's exit status on
 * stderr ("warren-exec-agent: runc exited N"), reaps the agent promptly when it ends (a
 * zombie of a process of the sandbox's PID namespace would hold up the sandbox's end until
 * reaped), and exits when it has no children left.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HEADER 9
#define MAX_EXECS 256
#define MAX_PAYLOAD (4u << 20)
#define MAX_STRINGS 65536
#define CHUNK 65536
#define DRAIN_GRACE_MS 200
#define SESSION_WINDOW (1024u << 10)
#define SESSION_INPUT (512u << 10)
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct exec {
	int used;
	uint32_t id;
	pid_t pid;
	int fd[2]; /* stdout, stderr read ends; -1 once closed */
	int exited;
	int64_t exited_at;
	/* Sessions ('S') only. */
	int session;
	int terminal;
	int in_fd;            /* the command's stdin (pipe write end or a dup of the master); -1 */
	unsigned char *input; /* SESSION_INPUT bytes: input not yet written */
	size_t input_len;
	int input_eof; /* close in_fd once input is written */
	uint32_t unacked; /* output bytes sent, not yet acknowledged */
};

static struct exec execs[MAX_EXECS];
static unsigned char in[HEADER + MAX_PAYLOAD];
static size_t in_len;
static char strings[MAX_PAYLOAD + MAX_STRINGS];
static char *argv_env[MAX_STRINGS + 2];
static char path_buf[8192];
static char message[8192];
static unsigned char chunk[CHUNK];
static int devnull = -1;
static int sigfd = -1;
static sigset_t old_mask;

static int64_t now_ms(void) {
	struct timespec ts;
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put32(unsigned char *p, uint32_t v) {
	p[0] = v & 0xff;
	p[1] = (v >> 8) & 0xff;
	p[2] = (v >> 16) & 0xff;
	p[3] = (v >> 24) & 0xff;
}

static uint32_t get32(const unsigned char *p) {
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void die(const char *what) {
	dprintf(2, "warren-exec-agent: %s: %s\n", what, strerror(errno));
	_exit(2);
}

/* Writes a whole frame to stdout, waiting while the host's side is full. */
static void send_frame(uint32_t id, char type, const void *data, size_t len) {
	unsigned char header[HEADER];
	put32(header, id);
	header[4] = (unsigned char)type;
	put32(header + 5, (uint32_t)len);
	struct iovec iov[2] = {{header, HEADER}, {(void *)data, len}};
	int n = len > 0 ? 2 : 1;
	struct iovec *v = iov;
	while (n > 0) {
		ssize_t w = writev(1, v, n);
		if (w < 0) {
			if (errno == EINTR) continue;
			if (errno == EAGAIN) {
				struct pollfd p = {.fd = 1, .events = POLLOUT};
				if (poll(&p, 1, -1) < 0 && errno != EINTR) die("poll stdout");
				continue;
			}
			_exit(0); /* the host is gone */
		}
		while (n > 0 && (size_t)w >= v->iov_len) {
			w -= (ssize_t)v->iov_len;
			v++;
			n--;
		}
		if (n > 0) {
			v->iov_base = (char *)v->iov_base + w;
			v->iov_len -= (size_t)w;
		}
	}
}

static void send_int(uint32_t id, char type, int32_t value) {
	unsigned char b[4];
	put32(b, (uint32_t)value);
	send_frame(id, type, b, 4);
}

static void send_message(uint32_t id, char type, const char *text) {
	send_frame(id, type, text, strlen(text));
}

static struct exec *find(uint32_t id) {
	for (int i = 0; i < MAX_EXECS; i++)
		if (execs[i].used && execs[i].id == id) return &execs[i];
	return NULL;
}

static void close_fd(int *fd) {
	if (*fd >= 0) close(*fd);
	*fd = -1;
}

/* Reads one chunk of a command pipe and forwards it; closes the pipe at EOF. */
static void forward(struct exec *e, int stream) {
	ssize_t r = read(e->fd[stream], chunk, CHUNK);
	if (r > 0) {
		send_frame(e->id, stream == 0 ? 'O' : 'E', chunk, (size_t)r);
		if (e->session) e->unacked += (uint32_t)r;
	} else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
		close_fd(&e->fd[stream]);
	}
}

static void finish(struct exec *e) {
	close_fd(&e->fd[0]);
	close_fd(&e->fd[1]);
	close_fd(&e->in_fd);
	free(e->input);
	e->input = NULL;
	send_frame(e->id, 'D', NULL, 0);
	e->used = 0;
}

/* What a failed child reports through its close-on-exec pipe before it exits. */
struct failure {
	int stage; /* 1 chdir, 2 not found in PATH, 3 execve */
	int error;
};

static void child_fail(int pipe_fd, int stage, int error) {
	struct failure f = {stage, error};
	ssize_t ignored = write(pipe_fd, &f, sizeof f);
	(void)ignored;
	_exit(127);
}

/* Like Go's exec.LookPath, which runc uses: a name with a slash is taken as is. */
static const char *look_path(const char *name, char *const env[]) {
	if (strchr(name, '/')) return name;
	const char *path = DEFAULT_PATH;
	for (int i = 0; env[i]; i++)
		if (strncmp(env[i], "PATH=", 5) == 0) path = env[i] + 5;
	size_t name_len = strlen(name);
	while (*path) {
		const char *end = strchrnul(path, ':');
		size_t dir_len = (size_t)(end - path);
		if (dir_len > 0 && dir_len + 1 + name_len < sizeof path_buf) {
			memcpy(path_buf, path, dir_len);
			path_buf[dir_len] = '/';
			memcpy(path_buf + dir_len + 1, name, name_len + 1);
			struct stat st;
			if (stat(path_buf, &st) == 0 && !S_ISDIR(st.st_mode) && (st.st_mode & 0111)) return path_buf;
		}
		path = *end ? end + 1 : end;
	}
	return NULL;
}

/* `tty`: the slave's path, opened after setsid() so it becomes the controlling terminal. */
static void child(char *const argv[], char *const env[], const char *cwd, int in, int out, int err, int fail,
                  const char *tty) {
	if (sigprocmask(SIG_SETMASK, &old_mask, NULL) != 0) child_fail(fail, 3, errno);
	if (signal(SIGPIPE, SIG_DFL) == SIG_ERR) child_fail(fail, 3, errno);
	if (setsid() < 0) child_fail(fail, 3, errno);
	if (tty) {
		int slave = open(tty, O_RDWR);
		if (slave < 0 || ioctl(slave, TIOCSCTTY, 0) != 0) child_fail(fail, 3, errno);
		in = out = err = slave;
	}
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) child_fail(fail, 3, errno);
	if (tty && in > 2) close(in); /* the slave lives on as fds 0-2 only */
	if (chdir(cwd) != 0) child_fail(fail, 1, errno);
	const char *file = look_path(argv[0], env);
	if (!file) child_fail(fail, 2, ENOENT);
	execve(file, argv, env);
	child_fail(fail, 3, errno);
}

/* Decodes `count` strings at *p into argv_env from *slot on; NULL-terminates the list. */
static int take_strings(const unsigned char **p, const unsigned char *end, size_t *slot, char **store) {
	if (end - *p < 4) return -1;
	uint32_t count = get32(*p);
	*p += 4;
	if (*slot + (size_t)count + 1 > MAX_STRINGS + 2) return -1;
	for (uint32_t i = 0; i < count; i++) {
		if (end - *p < 4) return -1;
		uint32_t len = get32(*p);
		*p += 4;
		if ((size_t)(end - *p) < len || memchr(*p, 0, len)) return -1;
		memcpy(*store, *p, len);
		(*store)[len] = 0;
		argv_env[(*slot)++] = *store;
		*store += len + 1;
		*p += len;
	}
	argv_env[(*slot)++] = NULL;
	return (int)count;
}

/* `session`: null for 'R', else the 'S' header (flags, rows, cols). */
static void run_request(uint32_t id, const unsigned char *p, size_t len, const unsigned char *session) {
	const unsigned char *end = p + len;
	char *store = strings;
	size_t slot = 0;
	if (find(id)) {
		send_message(id, 'F', "duplicate exec id");
		return;
	}
	int argc = take_strings(&p, end, &slot, &store);
	size_t env_at = slot;
	int envc = argc < 0 ? -1 : take_strings(&p, end, &slot, &store);
	if (argc < 1 || envc < 0 || end - p < 4 || get32(p) != (uint32_t)(end - p - 4) || memchr(p + 4, 0, get32(p))) {
		send_message(id, 'F', "malformed exec request");
		return;
	}
	char *cwd = store;
	memcpy(cwd, p + 4, get32(p));
	cwd[get32(p)] = 0;
	struct exec *e = NULL;
	for (int i = 0; i < MAX_EXECS && !e; i++)
		if (!execs[i].used) e = &execs[i];
	if (cwd[0] != '/' || !e) {
		send_message(id, 'F', !e ? "too many concurrent execs" : "cwd must be an absolute path");
		return;
	}

	int out[2] = {-1, -1}, err[2] = {-1, -1}, fail[2] = {-1, -1}, inp[2] = {-1, -1}, master = -1;
	unsigned char *input = NULL;
	static char tty[128];
	int terminal = session && (get32(session) & 1);
	if (pipe2(fail, O_CLOEXEC)) {
		snprintf(message, sizeof message, "pipe: %s", strerror(errno));
		goto failed;
	}
	if (session && !(input = malloc(SESSION_INPUT))) {
		snprintf(message, sizeof message, "out of memory");
		goto failed;
	}
	if (terminal) {
		struct winsize size = {.ws_row = (unsigned short)get32(session + 4), .ws_col = (unsigned short)get32(session + 8)};
		master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0 || ptsname_r(master, tty, sizeof tty) != 0 ||
		    ioctl(master, TIOCSWINSZ, &size) != 0 || (out[0] = fcntl(master, F_DUPFD_CLOEXEC, 0)) < 0) {
			snprintf(message, sizeof message, "pseudo-terminal: %s", strerror(errno));
			goto failed;
		}
		inp[1] = master;
		master = -1;
	} else if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || (session && pipe2(inp, O_CLOEXEC))) {
		snprintf(message, sizeof message, "pipe: %s", strerror(errno));
		goto failed;
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(message, sizeof message, "fork: %s", strerror(errno));
		goto failed;
	}
	if (pid == 0)
		child(argv_env, argv_env + env_at, cwd, inp[0] >= 0 ? inp[0] : devnull, out[1], err[1], fail[1],
		      terminal ? tty : NULL);
	close_fd(&out[1]);
	close_fd(&err[1]);
	close_fd(&fail[1]);
	close_fd(&inp[0]);
	struct failure f;
	ssize_t r;
	do r = read(fail[0], &f, sizeof f);
	while (r < 0 && errno == EINTR);
	close_fd(&fail[0]);
	if (r == (ssize_t)sizeof f) {
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
		}
		if (f.stage == 1)
			snprintf(message, sizeof message, "chdir to cwd (\"%s\"): %s", cwd, strerror(f.error));
		else if (f.stage == 2)
			snprintf(message, sizeof message, "exec: \"%s\": executable file not found in $PATH", argv_env[0]);
		else
			snprintf(message, sizeof message, "exec %s: %s", argv_env[0], strerror(f.error));
		goto failed;
	}
	if (fcntl(out[0], F_SETFL, O_NONBLOCK) != 0 || (err[0] >= 0 && fcntl(err[0], F_SETFL, O_NONBLOCK) != 0) ||
	    (inp[1] >= 0 && fcntl(inp[1], F_SETFL, O_NONBLOCK) != 0))
		die("fcntl");
	*e = (struct exec){.used = 1, .id = id, .pid = pid, .fd = {out[0], err[0]}, .session = session != NULL,
	                   .terminal = terminal, .in_fd = inp[1], .input = input};
	send_int(id, 'P', pid);
	return;
failed:
	for (int i = 0; i < 2; i++) {
		close_fd(&out[i]);
		close_fd(&err[i]);
		close_fd(&fail[i]);
		close_fd(&inp[i]);
	}
	close_fd(&master);
	free(input);
	send_message(id, 'F', message);
}

/* Writes what it can of a session's pending input; acknowledges what was written. */
static void flush_input(struct exec *e) {
	size_t done = 0;
	while (e->in_fd >= 0 && done < e->input_len) {
		ssize_t w = write(e->in_fd, e->input + done, e->input_len - done);
		if (w > 0) done += (size_t)w;
		else if (w < 0 && errno == EINTR) continue;
		else if (w < 0 && errno == EAGAIN) break;
		else {
			/* The command closed its stdin: the rest is dropped (and acknowledged). */
			close_fd(&e->in_fd);
			done = e->input_len;
		}
	}
	if (e->in_fd < 0) done = e->input_len;
	if (done > 0) {
		memmove(e->input, e->input + done, e->input_len - done);
		e->input_len -= done;
		send_int(e->id, 'a', (int32_t)done);
	}
	if (e->input_len == 0 && e->input_eof) close_fd(&e->in_fd);
}

static void session_frame(uint32_t id, char type, const unsigned char *p, uint32_t len) {
	struct exec *e = find(id);
	if (!e || !e->session) return;
	if (type == 'I') {
		if (len == 0) {
			if (!e->terminal) e->input_eof = 1;
		} else if (e->in_fd < 0 || e->input_eof) {
			send_int(id, 'a', (int32_t)len); /* nowhere to go: dropped */
			return;
		} else if (len > SESSION_INPUT - e->input_len) {
			dprintf(2, "warren-exec-agent: more session input than allowed\n");
			_exit(2);
		} else {
			memcpy(e->input + e->input_len, p, len);
			e->input_len += len;
		}
		flush_input(e);
	} else if (type == 'W' && len == 8 && e->terminal && e->in_fd >= 0) {
		struct winsize size = {.ws_row = (unsigned short)get32(p), .ws_col = (unsigned short)get32(p + 4)};
		ioctl(e->in_fd, TIOCSWINSZ, &size);
	} else if (type == 'A' && len == 4) {
		uint32_t n = get32(p);
		e->unacked = n > e->unacked ? 0 : e->unacked - n;
	}
}

static void kill_request(uint32_t id) {
	struct exec *e = find(id);
	if (e && !e->exited && kill(-e->pid, SIGKILL) != 0 && errno == ESRCH) kill(e->pid, SIGKILL);
}

static void reap(void) {
	struct signalfd_siginfo info;
	while (read(sigfd, &info, sizeof info) > 0) {
	}
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (int i = 0; i < MAX_EXECS; i++) {
			struct exec *e = &execs[i];
			if (!e->used || e->exited || e->pid != pid) continue;
			e->exited = 1;
			e->exited_at = now_ms();
			send_int(e->id, 'X', WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
		}
	}
}

/* Handles the complete frames in `in`; keeps a partial one for the next read. */
static void handle_input(void) {
	size_t at = 0;
	while (in_len - at >= HEADER) {
		uint32_t id = get32(in + at), len = get32(in + at + 5);
		char type = (char)in[at + 4];
		if (len > MAX_PAYLOAD) {
			dprintf(2, "warren-exec-agent: frame of %u bytes is too large\n", len);
			_exit(2);
		}
		if (in_len - at < HEADER + len) break;
		if (type == 'R') run_request(id, in + at + HEADER, len, NULL);
		else if (type == 'S' && len >= 12) run_request(id, in + at + HEADER + 12, len - 12, in + at + HEADER);
		else if (type == 'S') send_message(id, 'F', "malformed session request");
		else if (type == 'K') kill_request(id);
		else if (type == 'I' || type == 'W' || type == 'A') session_frame(id, type, in + at + HEADER, len);
		at += HEADER + len;
	}
	memmove(in, in + at, in_len - at);
	in_len -= at;
}

static int reaper(char **command) {
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal");
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) die("prctl");
	pid_t runc = fork();
	if (runc < 0) die("fork");
	if (runc == 0) {
		execv(command[0], command);
		die("execv");
	}
	/* The agent keeps the request/response socket; this process lets go of it. */
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0) die("dup2");
	int code = 0;
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == EINTR) continue;
			if (errno == ECHILD) return code;
			die("waitpid");
		}
		if (pid == runc) {
			code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
			dprintf(2, "warren-exec-agent: runc exited %d\n", code);
		}
	}
}

/* Connects to the host's Unix socket at `path` and makes it stdin and stdout. */
static void connect_stdio(const char *path) {
	struct sockaddr_un address = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof address.sun_path) {
		errno = ENAMETOOLONG;
		die("connect");
	}
	strcpy(address.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0) die("socket");
	if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) die("connect");
	if (dup2(fd, 0) < 0 || dup2(fd, 1) < 0) die("dup2");
	if (fd > 1) close(fd);
}

int main(int argc, char **argv) {
	/* `--connect PATH --reap ...`: started without stdio (by the server's spawner process). */
	if (argc >= 5 && strcmp(argv[1], "--connect") == 0) {
		connect_stdio(argv[2]);
		argc -= 2;
		argv += 2;
	}
	if (argc >= 3 && strcmp(argv[1], "--reap") == 0) return reaper(argv + 2);
	/*
	 * Not dumpable: /proc/<pid>/fd, /proc/<pid>/mem, ptrace, process_vm_* and pidfd_getfd of
	 * this process then need CAP_SYS_PTRACE, which the sandbox lacks, so code in the sandbox
	 * (running as the same user) cannot take or reach fd 1, the socket to the server.
	 * First, before anything is read or sent. Commands get their own, dumpable, mm at execve.
	 */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die("prctl");
	sigset_t mask;
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal");
	if (sigemptyset(&mask) || sigaddset(&mask, SIGCHLD) || sigprocmask(SIG_BLOCK, &mask, &old_mask)) die("sigprocmask");
	sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigfd < 0) die("signalfd");
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0) die("open /dev/null");
	send_message(0, 'H', "warren-exec-agent 2");

	static struct pollfd fds[2 + 3 * MAX_EXECS];
	static struct exec *owner[2 + 3 * MAX_EXECS];
	static int stream_of[2 + 3 * MAX_EXECS]; /* 0 stdout, 1 stderr, 2 a session's stdin */
	for (;;) {
		int n = 0, timeout = -1;
		int64_t now = now_ms();
		fds[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
		fds[n++] = (struct pollfd){.fd = sigfd, .events = POLLIN};
		for (int i = 0; i < MAX_EXECS; i++) {
			struct exec *e = &execs[i];
			if (!e->used) continue;
			if (e->in_fd >= 0 && e->input_len > 0) {
				owner[n] = e;
				stream_of[n] = 2;
				fds[n++] = (struct pollfd){.fd = e->in_fd, .events = POLLOUT};
			}
			/*
			 * A session whose output is not acknowledged waits (its pipes fill, its command
			 * blocks), after the exit too (a background child may still write): what is left
			 * when the drain grace ends is read once, at most 16 chunks per stream.
			 */
			int paused = e->session && e->unacked >= SESSION_WINDOW;
			for (int s = 0; s < 2 && !paused; s++) {
				if (e->fd[s] < 0) continue;
				owner[n] = e;
				stream_of[n] = s;
				fds[n++] = (struct pollfd){.fd = e->fd[s], .events = POLLIN};
			}
			if (e->exited) {
				int64_t left = e->exited_at + DRAIN_GRACE_MS - now;
				int wait = left < 0 ? 0 : (int)left;
				if (timeout < 0 || wait < timeout) timeout = wait;
			}
		}
		if (poll(fds, (nfds_t)n, timeout) < 0) {
			if (errno == EINTR) continue;
			die("poll");
		}
		if (fds[1].revents) reap();
		for (int i = 2; i < n; i++) {
			if (!fds[i].revents || !owner[i]->used) continue;
			if (stream_of[i] == 2) {
				if (owner[i]->in_fd == fds[i].fd) flush_input(owner[i]);
			} else if (owner[i]->fd[stream_of[i]] == fds[i].fd) {
				forward(owner[i], stream_of[i]);
			}
		}
		now = now_ms();
		for (int i = 0; i < MAX_EXECS; i++) {
			struct exec *e = &execs[i];
			if (!e->used || !e->exited) continue;
			if (e->fd[0] >= 0 || e->fd[1] >= 0) {
				if (now < e->exited_at + DRAIN_GRACE_MS) continue;
				/* Whatever is buffered was written before now: forward it, then let go. */
				for (int s = 0; s < 2; s++)
					for (int k = 0; k < 16 && e->fd[s] >= 0; k++) {
						ssize_t r = read(e->fd[s], chunk, CHUNK);
						if (r <= 0) break;
						send_frame(e->id, s == 0 ? 'O' : 'E', chunk, (size_t)r);
					}
			}
			finish(e);
		}
		if (fds[0].revents) {
			ssize_t r = read(0, in + in_len, sizeof in - in_len);
			if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
				for (int i = 0; i < MAX_EXECS; i++) {
					close_fd(&execs[i].fd[0]);
					close_fd(&execs[i].fd[1]);
					close_fd(&execs[i].in_fd);
				}
				return 0;
			}
			if (r > 0) {
				in_len += (size_t)r;
				handle_input();
			}
		}
	}
}
