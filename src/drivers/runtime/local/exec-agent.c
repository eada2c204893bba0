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
 *   Background processes (version 3; docs/api-decisions.md "Processes"): the agent keeps them,
 *   and a bounded ring of their output, across connections. `exec_id` is the request's id
 *   (answered with 'j' or 'Q'), a reader's id ('G', 'C'), or a process's serial ('q').
 *   'B' start: u32 flags (1: a terminal, 2: stdin is a pipe fed by 'J'), u32 rows, u32 cols,
 *       then an 'R' payload. Answered 'Q' (u32 serial, i32 pid) or 'F'.
 *   'G' read: u32 serial, u64 offset, u32 max. Answered by 'g' frames (u64 offset, u8 stream
 *       1 stdout / 2 stderr, bytes) from the offset on (or from the oldest byte kept, when the
 *       offset was dropped: the reader sees the gap), as soon as there is output, then 'h'
 *       (u64 next offset, u8 flags: 1 the output is complete, 2 no such process). A reader
 *       holds its process: bytes at or after its offset are never dropped while it exists
 *       (the agent stops reading the process instead), until 'C' or the connection's end.
 *   'C' drop reader. 'N' signal: u32 serial, u32 signo (to the process group). 'J' stdin:
 *       u32 serial, bytes (taken whole or not at all: 'j' says how many). 'Y' close stdin:
 *       u32 serial. 'V' resize: u32 serial, u32 rows, u32 cols. 'U' release: u32 serial
 *       (SIGKILL if it runs; its buffer is freed). 'L' list: 'l' per process (u32 serial,
 *       i32 pid, u8 exited, i32 code, u64 first offset kept, u64 end offset, u8 done), then
 *       'j' with the count. 'j' i32: >= 0 done (bytes taken for 'J'), -1 no such process,
 *       -2 not running or no stdin.
 * Agent -> host:
 *   'H' hello (exec_id 0, payload "warren-exec-agent 3 <16 hex: this agent's boot id>";
 *       version 1 had no sessions, 2 no background processes), at start and on each reconnect.
 *   'q' a background process exited (exec_id its serial): i32 code, as 'X'.
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
 * EOF (the server is gone) the agent closes the pipes of its execs and sessions (their commands
 * keep running); it exits then unless it was started `--kept` (fd 3: a socket to its host-side
 * keeper) and holds background processes: it then waits on fd 3 for the keeper to hand it the
 * next server's connection (SCM_RIGHTS) and says hello on it. The agent ignores SIGPIPE and
 * learns of exits through a signalfd.
 *
 * `exec-agent [--connect SOCKET] --reap /path/to/runc args...` is the same binary on the host
 * side (with --connect, its stdin and stdout are first connected to the server's socket): it runs
 * `runc exec --detach` of the agent as a child subreaper, so the agent, orphaned when runc
 * exits, becomes its child instead of the host's PID 1's. It reports runc's exit status on
 * stderr ("warren-exec-agent: runc exited N"), reaps the agent promptly when it ends (a
 * zombie of a process of the sandbox's PID namespace would hold up the sandbox's end until
 * reaped), and exits when it has no children left. With `--listen PATH` (before --reap) it is
 * also the agent's keeper: it gives runc (which passes it on with --preserve-fds 1) one end of a
 * socket pair as fd 3, listens on PATH (mode 0600; only root may connect, SO_PEERCRED checked)
 * and hands each connection to the agent over the pair, so a restarted server reattaches.
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
#define MAX_PROCS 64
#define RING_CAP (1u << 20)
#define RING_START (16u << 10)
#define MAX_READERS 1024
#define READ_CHUNK (64u << 10)
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

/* A background process ('B'): kept across connections, its output in a ring of records. */
struct proc {
	int used;
	uint32_t serial;
	pid_t pid;
	int fd[2];
	int terminal;
	int in_fd;
	unsigned char *input;
	size_t input_len;
	int input_eof;
	int exited;
	int32_t code;
	int64_t exited_at;
	int done; /* exited and its output pipes closed: the output is complete */
	/* Records of u8 stream, u32 length, bytes; `head` is the output offset of the first byte. */
	unsigned char *buf;
	size_t len, cap;
	uint64_t head, end;
	size_t scan_pos; /* a record start in buf, whose first byte is at output offset scan_off */
	uint64_t scan_off;
};

struct reader {
	int used;
	uint32_t id, serial;
	uint64_t offset;
	uint32_t left;
	int waiting;
	int sent; /* bytes sent by the current read */
};

static struct exec execs[MAX_EXECS];
static struct proc procs[MAX_PROCS];
static struct reader readers[MAX_READERS];
static uint32_t next_serial = 1;
static int connected = 1;
static int broken = 0;
static int keeper = -1;
static char hello[64];
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
static pid_t child_pdeath; /* the agent's pid, when the child is a background process */

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
	if (!connected || broken) return;
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
				if (p.revents & (POLLERR | POLLHUP)) {
					broken = 1;
					return;
				}
				continue;
			}
			broken = 1; /* the host is gone */
			return;
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
	/* A background process ends with the agent that keeps it: none runs on without its keeper. */
	if (child_pdeath && (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != child_pdeath))
		child_fail(fail, 3, errno ? errno : ESRCH);
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
static void run_request(uint32_t id, const unsigned char *p, size_t len, const unsigned char *session, int background) {
	const unsigned char *end = p + len;
	char *store = strings;
	size_t slot = 0;
	if (!background && find(id)) {
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
	struct proc *q = NULL;
	if (background) {
		for (int i = 0; i < MAX_PROCS && !q; i++)
			if (!procs[i].used) q = &procs[i];
	} else {
		for (int i = 0; i < MAX_EXECS && !e; i++)
			if (!execs[i].used) e = &execs[i];
	}
	if (cwd[0] != '/' || (!e && !q)) {
		send_message(id, 'F',
		             cwd[0] != '/' ? "cwd must be an absolute path"
		             : background  ? "too many background processes"
		                           : "too many concurrent execs");
		return;
	}
	int piped_stdin = session && (!background || (get32(session) & 2));

	int out[2] = {-1, -1}, err[2] = {-1, -1}, fail[2] = {-1, -1}, inp[2] = {-1, -1}, master = -1;
	unsigned char *input = NULL;
	static char tty[128];
	int terminal = session && (get32(session) & 1);
	if (pipe2(fail, O_CLOEXEC)) {
		snprintf(message, sizeof message, "pipe: %s", strerror(errno));
		goto failed;
	}
	if ((piped_stdin || terminal) && !(input = malloc(SESSION_INPUT))) {
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
	} else if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || (piped_stdin && pipe2(inp, O_CLOEXEC))) {
		snprintf(message, sizeof message, "pipe: %s", strerror(errno));
		goto failed;
	}
	child_pdeath = background ? getpid() : 0;
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
	if (background) {
		*q = (struct proc){.used = 1, .serial = next_serial++, .pid = pid, .fd = {out[0], err[0]},
		                   .terminal = terminal, .in_fd = inp[1], .input = input};
		unsigned char b[8];
		put32(b, q->serial);
		put32(b + 4, (uint32_t)pid);
		send_frame(id, 'Q', b, 8);
		return;
	}
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
		for (int i = 0; i < MAX_PROCS; i++) {
			struct proc *q = &procs[i];
			if (!q->used || q->exited || q->pid != pid) continue;
			q->exited = 1;
			q->exited_at = now_ms();
			q->code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
			send_int(q->serial, 'q', q->code);
		}
	}
}


/* ---- background processes ---- */

static struct proc *find_proc(uint32_t serial) {
	for (int i = 0; i < MAX_PROCS; i++)
		if (procs[i].used && procs[i].serial == serial) return &procs[i];
	return NULL;
}

static void put64(unsigned char *p, uint64_t v) {
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const unsigned char *p) {
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* The lowest offset a reader of `q` still needs: bytes before it may be dropped. */
static uint64_t hold_of(const struct proc *q) {
	uint64_t hold = q->end;
	for (int i = 0; i < MAX_READERS; i++)
		if (readers[i].used && readers[i].serial == q->serial && readers[i].offset < hold) hold = readers[i].offset;
	return hold;
}

/* Grows the ring toward RING_CAP, then drops whole records a reader no longer needs; the room left. */
static size_t make_room(struct proc *q, size_t need) {
	if (q->cap - q->len < need && q->cap < RING_CAP) {
		size_t cap = q->cap ? q->cap : RING_START;
		while (cap - q->len < need && cap < RING_CAP) cap *= 2;
		if (cap > RING_CAP) cap = RING_CAP;
		unsigned char *grown = realloc(q->buf, cap);
		if (grown) {
			q->buf = grown;
			q->cap = cap;
		}
	}
	if (q->cap - q->len >= need) return q->cap - q->len;
	uint64_t hold = hold_of(q), off = q->head;
	size_t drop = 0;
	while (q->cap - (q->len - drop) < need && drop < q->len) {
		uint32_t l = get32(q->buf + drop + 1);
		if (off + l > hold) break;
		drop += 5 + l;
		off += l;
	}
	if (drop > 0) {
		memmove(q->buf, q->buf + drop, q->len - drop);
		q->len -= drop;
		q->head = off;
		q->scan_pos = 0;
		q->scan_off = off;
	}
	return q->cap - q->len;
}

static void proc_forward(struct proc *q, int stream) {
	size_t room = make_room(q, 5 + 4096);
	if (room < 5 + 4096) return;
	size_t want = room - 5 < READ_CHUNK ? room - 5 : READ_CHUNK;
	ssize_t r = read(q->fd[stream], q->buf + q->len + 5, want);
	if (r > 0) {
		q->buf[q->len] = (unsigned char)(stream + 1);
		put32(q->buf + q->len + 1, (uint32_t)r);
		q->len += 5 + (size_t)r;
		q->end += (uint64_t)r;
	} else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
		close_fd(&q->fd[stream]);
	}
}

static void send_read_end(struct reader *r, int flags) {
	unsigned char b[9];
	put64(b, r->offset);
	b[8] = (unsigned char)flags;
	send_frame(r->id, 'h', b, 9);
	r->waiting = 0;
}

/* Sends what a waiting reader can have now; ends its read when it got some, or at the end. */
static void serve(struct reader *r) {
	struct proc *q = find_proc(r->serial);
	if (!q) {
		send_read_end(r, 2);
		return;
	}
	while (r->waiting && r->left > 0) {
		if (r->offset < q->head) r->offset = q->head;
		if (r->offset >= q->end) break;
		if (q->scan_off > r->offset || q->scan_pos >= q->len) {
			q->scan_pos = 0;
			q->scan_off = q->head;
		}
		for (;;) {
			uint32_t l = get32(q->buf + q->scan_pos + 1);
			if (r->offset < q->scan_off + l) break;
			q->scan_pos += 5 + l;
			q->scan_off += l;
		}
		uint32_t l = get32(q->buf + q->scan_pos + 1);
		size_t within = (size_t)(r->offset - q->scan_off), n = l - within;
		if (n > r->left) n = r->left;
		if (n > READ_CHUNK - 9) n = READ_CHUNK - 9;
		unsigned char head[9];
		put64(head, r->offset);
		head[8] = q->buf[q->scan_pos];
		memcpy(chunk, head, 9);
		memcpy(chunk + 9, q->buf + q->scan_pos + 5 + within, n);
		send_frame(r->id, 'g', chunk, 9 + n);
		r->offset += n;
		r->left -= (uint32_t)n;
		r->sent += (int)n;
	}
	if (!r->waiting) return;
	if (r->sent > 0 || r->left == 0) send_read_end(r, q->done && r->offset >= q->end ? 1 : 0);
	else if (q->done && r->offset >= q->end) send_read_end(r, 1);
}

static struct reader *find_reader(uint32_t id) {
	for (int i = 0; i < MAX_READERS; i++)
		if (readers[i].used && readers[i].id == id) return &readers[i];
	return NULL;
}

static void proc_release(struct proc *q) {
	if (!q->exited && kill(-q->pid, SIGKILL) != 0 && errno == ESRCH) kill(q->pid, SIGKILL);
	close_fd(&q->fd[0]);
	close_fd(&q->fd[1]);
	close_fd(&q->in_fd);
	free(q->input);
	free(q->buf);
	/* An exit still to come is reaped by reap() and matched to nothing. */
	*q = (struct proc){0};
	q->fd[0] = q->fd[1] = q->in_fd = -1;
}

static void proc_input_flush(struct proc *q) {
	size_t done = 0;
	while (q->in_fd >= 0 && done < q->input_len) {
		ssize_t w = write(q->in_fd, q->input + done, q->input_len - done);
		if (w > 0) done += (size_t)w;
		else if (w < 0 && errno == EINTR) continue;
		else if (w < 0 && errno == EAGAIN) break;
		else {
			close_fd(&q->in_fd);
			done = q->input_len;
		}
	}
	if (q->in_fd < 0) done = q->input_len;
	memmove(q->input, q->input + done, q->input_len - done);
	q->input_len -= done;
	if (q->input_len == 0 && q->input_eof && !q->terminal) close_fd(&q->in_fd);
}

static void reply(uint32_t id, int32_t value) {
	send_int(id, 'j', value);
}

static void proc_frame(uint32_t id, char type, const unsigned char *p, uint32_t len) {
	if (type == 'L') {
		int count = 0;
		for (int i = 0; i < MAX_PROCS; i++) {
			struct proc *q = &procs[i];
			if (!q->used) continue;
			unsigned char b[30];
			put32(b, q->serial);
			put32(b + 4, (uint32_t)q->pid);
			b[8] = (unsigned char)q->exited;
			put32(b + 9, (uint32_t)q->code);
			put64(b + 13, q->head);
			put64(b + 21, q->end);
			b[29] = (unsigned char)q->done;
			send_frame(id, 'l', b, 30);
			count++;
		}
		reply(id, count);
		return;
	}
	if (type == 'C') {
		struct reader *r = find_reader(id);
		if (r) r->used = 0;
		return;
	}
	if (len < 4) {
		reply(id, -1);
		return;
	}
	uint32_t serial = get32(p);
	struct proc *q = find_proc(serial);
	if (type == 'G') {
		if (len != 16) return;
		struct reader *r = find_reader(id);
		for (int i = 0; i < MAX_READERS && !r; i++)
			if (!readers[i].used) r = &readers[i];
		if (!r) {
			unsigned char b[9] = {0};
			b[8] = 2;
			send_frame(id, 'h', b, 9);
			return;
		}
		*r = (struct reader){.used = 1, .id = id, .serial = serial, .offset = get64(p + 4), .left = get32(p + 12),
		                     .waiting = 1};
		serve(r);
		if (!q) r->used = 0;
		return;
	}
	if (!q) {
		reply(id, -1);
		return;
	}
	if (type == 'N') {
		if (len != 8 || q->exited) {
			reply(id, -2);
			return;
		}
		int sig = (int)get32(p + 4);
		if (kill(-q->pid, sig) != 0 && kill(q->pid, sig) != 0) reply(id, -2);
		else reply(id, 0);
	} else if (type == 'J') {
		uint32_t n = len - 4;
		if (q->in_fd < 0 || q->input_eof || q->exited) reply(id, -2);
		else if (n > SESSION_INPUT - q->input_len) reply(id, 0);
		else {
			memcpy(q->input + q->input_len, p + 4, n);
			q->input_len += n;
			proc_input_flush(q);
			reply(id, (int32_t)n);
		}
	} else if (type == 'Y') {
		if (q->in_fd < 0 || q->terminal) reply(id, -2);
		else {
			q->input_eof = 1;
			proc_input_flush(q);
			reply(id, 0);
		}
	} else if (type == 'V') {
		if (len != 12 || !q->terminal || q->in_fd < 0) {
			reply(id, -2);
			return;
		}
		struct winsize size = {.ws_row = (unsigned short)get32(p + 4), .ws_col = (unsigned short)get32(p + 8)};
		ioctl(q->in_fd, TIOCSWINSZ, &size);
		reply(id, 0);
	} else if (type == 'U') {
		for (int i = 0; i < MAX_READERS; i++)
			if (readers[i].used && readers[i].serial == serial) readers[i].used = 0;
		proc_release(q);
		reply(id, 0);
	}
}

static int live_procs(void) {
	int n = 0;
	for (int i = 0; i < MAX_PROCS; i++) n += procs[i].used;
	return n;
}

/* The server's connection ended: execs and sessions lose their pipes (their commands run on). */
static void disconnect(void) {
	for (int i = 0; i < MAX_EXECS; i++) {
		close_fd(&execs[i].fd[0]);
		close_fd(&execs[i].fd[1]);
		close_fd(&execs[i].in_fd);
		free(execs[i].input);
		execs[i] = (struct exec){0};
		execs[i].fd[0] = execs[i].fd[1] = execs[i].in_fd = -1;
	}
	for (int i = 0; i < MAX_READERS; i++) readers[i].used = 0;
	connected = 0;
	broken = 0;
	in_len = 0;
	if (keeper < 0 || live_procs() == 0) _exit(0);
	if (devnull >= 0) {
		dup2(devnull, 0);
		dup2(devnull, 1);
	}
}

/* A connection handed over by the keeper (SCM_RIGHTS) becomes stdin and stdout. */
static void take_connection(void) {
	char data[1];
	char control[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {data, 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
	ssize_t r = recvmsg(keeper, &msg, MSG_CMSG_CLOEXEC);
	if (r <= 0) {
		if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
		close_fd(&keeper); /* the keeper is gone: no server can come back */
		if (!connected) _exit(0);
		return;
	}
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
		return;
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof fd);
	if (connected) {
		/* A second server: the first is taken to be gone. */
		for (int i = 0; i < MAX_READERS; i++) readers[i].used = 0;
		for (int i = 0; i < MAX_EXECS; i++) {
			close_fd(&execs[i].fd[0]);
			close_fd(&execs[i].fd[1]);
			close_fd(&execs[i].in_fd);
			free(execs[i].input);
			execs[i] = (struct exec){0};
			execs[i].fd[0] = execs[i].fd[1] = execs[i].in_fd = -1;
		}
		in_len = 0;
	}
	if (dup2(fd, 0) < 0 || dup2(fd, 1) < 0) die("dup2");
	close(fd);
	connected = 1;
	broken = 0;
	send_message(0, 'H', hello);
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
		if (type == 'R') run_request(id, in + at + HEADER, len, NULL, 0);
		else if (type == 'S' && len >= 12) run_request(id, in + at + HEADER + 12, len - 12, in + at + HEADER, 0);
		else if (type == 'S') send_message(id, 'F', "malformed session request");
		else if (type == 'K') kill_request(id);
		else if (type == 'I' || type == 'W' || type == 'A') session_frame(id, type, in + at + HEADER, len);
		else if (type == 'B' && len >= 12) run_request(id, in + at + HEADER + 12, len - 12, in + at + HEADER, 1);
		else if (type == 'B') send_message(id, 'F', "malformed process request");
		else if (strchr("GCNJYVUL", type) && type) proc_frame(id, type, in + at + HEADER, len);
		if (!connected) return;
		at += HEADER + len;
	}
	memmove(in, in + at, in_len - at);
	in_len -= at;
}

/* The keeper's listening socket: root only (0600, and SO_PEERCRED checked at accept). */
static int listen_at(const char *path) {
	struct sockaddr_un address = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof address.sun_path) {
		errno = ENAMETOOLONG;
		die("listen");
	}
	strcpy(address.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) die("socket");
	unlink(path);
	mode_t old = umask(077);
	if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0) die("bind");
	umask(old);
	if (chmod(path, 0600) != 0 || listen(fd, 8) != 0) die("listen");
	return fd;
}

/* Hands an accepted connection of root's to the agent over the pair (fd `pair`). */
static void hand_over(int listener, int pair) {
	int conn = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
	if (conn < 0) return;
	struct ucred cred;
	socklen_t size = sizeof cred;
	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0 || cred.uid != 0) {
		close(conn);
		return;
	}
	char data[1] = {'c'};
	char control[CMSG_SPACE(sizeof(int))];
	memset(control, 0, sizeof control);
	struct iovec iov = {data, 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &conn, sizeof conn);
	ssize_t ignored = sendmsg(pair, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	(void)ignored;
	close(conn);
}

static int reaper(char **command, const char *listen_path) {
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal");
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) die("prctl");
	int pair[2] = {-1, -1}, listener = -1, chld = -1;
	sigset_t mask, old;
	if (listen_path) {
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) die("socketpair");
		listener = listen_at(listen_path);
		if (sigemptyset(&mask) || sigaddset(&mask, SIGCHLD) || sigprocmask(SIG_BLOCK, &mask, &old)) die("sigprocmask");
		chld = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
		if (chld < 0) die("signalfd");
	}
	pid_t runc = fork();
	if (runc < 0) die("fork");
	if (runc == 0) {
		/* runc passes fd 3 on to the agent (--preserve-fds 1); dup2 clears its close-on-exec. */
		if (listen_path && sigprocmask(SIG_SETMASK, &old, NULL) != 0) die("sigprocmask");
		if (listen_path && (pair[0] == 3 ? fcntl(3, F_SETFD, 0) : dup2(pair[0], 3)) < 0) die("dup2");
		execv(command[0], command);
		die("execv");
	}
	if (pair[0] >= 0) close(pair[0]);
	/* The agent keeps the request/response socket; this process lets go of it. */
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0) die("dup2");
	int code = 0;
	for (;;) {
		if (listen_path) {
			struct pollfd p[2] = {{.fd = listener, .events = POLLIN}, {.fd = chld, .events = POLLIN}};
			if (poll(p, 2, -1) < 0 && errno != EINTR) die("poll");
			if (p[0].revents & POLLIN) hand_over(listener, pair[1]);
			struct signalfd_siginfo info;
			while (read(chld, &info, sizeof info) > 0) {
			}
		}
		int status;
		pid_t pid = waitpid(-1, &status, listen_path ? WNOHANG : 0);
		if (pid == 0) continue;
		if (pid < 0) {
			if (errno == EINTR) continue;
			if (errno == ECHILD) {
				if (listen_path) unlink(listen_path);
				return code;
			}
			die("waitpid");
		}
		if (pid == runc) {
			code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
			dprintf(2, "warren-exec-agent: runc exited %d\n", code);
		}
		/* Reap every child that is ready before polling again. */
		if (listen_path) {
			while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
				if (pid == runc) {
					code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
					dprintf(2, "warren-exec-agent: runc exited %d\n", code);
				}
			if (pid < 0 && errno == ECHILD) {
				unlink(listen_path);
				return code;
			}
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

/* A proc whose command exited: after the drain grace, what is left is read (bounded) and the pipes closed. */
static void proc_drain(struct proc *q, int64_t now) {
	if (!q->exited || q->done) return;
	if (q->fd[0] >= 0 || q->fd[1] >= 0) {
		if (now < q->exited_at + DRAIN_GRACE_MS) return;
		for (int s = 0; s < 2; s++)
			for (int k = 0; k < 16 && q->fd[s] >= 0; k++) {
				uint64_t before = q->end;
				proc_forward(q, s);
				if (q->end == before) break;
			}
		close_fd(&q->fd[0]);
		close_fd(&q->fd[1]);
	}
	close_fd(&q->in_fd);
	free(q->input);
	q->input = NULL;
	q->input_len = 0;
	q->done = 1;
}

int main(int argc, char **argv) {
	/* `--connect PATH [--listen PATH] --reap ...`: started without stdio (by the server's spawner process). */
	if (argc >= 5 && strcmp(argv[1], "--connect") == 0) {
		connect_stdio(argv[2]);
		argc -= 2;
		argv += 2;
	}
	const char *listen_path = NULL;
	if (argc >= 5 && strcmp(argv[1], "--listen") == 0) {
		listen_path = argv[2];
		argc -= 2;
		argv += 2;
	}
	if (argc >= 3 && strcmp(argv[1], "--reap") == 0) return reaper(argv + 2, listen_path);
	/*
	 * Not dumpable: /proc/<pid>/fd, /proc/<pid>/mem, ptrace, process_vm_* and pidfd_getfd of
	 * this process then need CAP_SYS_PTRACE, which the sandbox lacks, so code in the sandbox
	 * (running as the same user) cannot take or reach fd 1, the socket to the server.
	 * First, before anything is read or sent. Commands get their own, dumpable, mm at execve.
	 */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die("prctl");
	if (argc >= 2 && strcmp(argv[1], "--kept") == 0) {
		keeper = 3;
		if (fcntl(keeper, F_SETFD, FD_CLOEXEC) != 0) keeper = -1;
	}
	sigset_t mask;
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal");
	if (sigemptyset(&mask) || sigaddset(&mask, SIGCHLD) || sigprocmask(SIG_BLOCK, &mask, &old_mask)) die("sigprocmask");
	sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigfd < 0) die("signalfd");
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0) die("open /dev/null");
	for (int i = 0; i < MAX_PROCS; i++) procs[i].fd[0] = procs[i].fd[1] = procs[i].in_fd = -1;
	unsigned char boot[8] = {0};
	int rnd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (rnd >= 0) {
		ssize_t got = read(rnd, boot, sizeof boot);
		(void)got;
		close(rnd);
	}
	uint64_t mix = (uint64_t)now_ms() ^ ((uint64_t)getpid() << 32);
	for (int i = 0; i < 8; i++) boot[i] ^= (unsigned char)(mix >> (8 * i));
	int at = snprintf(hello, sizeof hello, "warren-exec-agent 3 ");
	for (int i = 0; i < 8; i++) at += snprintf(hello + at, sizeof hello - (size_t)at, "%02x", boot[i]);
	send_message(0, 'H', hello);

	enum { SLOTS = 3 + 3 * MAX_EXECS + 3 * MAX_PROCS };
	static struct pollfd fds[SLOTS];
	static struct exec *owner[SLOTS];
	static struct proc *proc_of[SLOTS];
	static int stream_of[SLOTS]; /* 0 stdout, 1 stderr, 2 stdin */
	for (;;) {
		if (broken) disconnect();
		int n = 0, timeout = -1;
		int64_t now = now_ms();
		fds[n++] = (struct pollfd){.fd = connected ? 0 : -1, .events = POLLIN};
		fds[n++] = (struct pollfd){.fd = sigfd, .events = POLLIN};
		fds[n++] = (struct pollfd){.fd = keeper, .events = POLLIN};
		for (int i = 0; i < MAX_EXECS; i++) {
			struct exec *e = &execs[i];
			if (!e->used) continue;
			if (e->in_fd >= 0 && e->input_len > 0) {
				owner[n] = e;
				proc_of[n] = NULL;
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
				proc_of[n] = NULL;
				stream_of[n] = s;
				fds[n++] = (struct pollfd){.fd = e->fd[s], .events = POLLIN};
			}
			if (e->exited) {
				int64_t left = e->exited_at + DRAIN_GRACE_MS - now;
				int wait = left < 0 ? 0 : (int)left;
				if (timeout < 0 || wait < timeout) timeout = wait;
			}
		}
		for (int i = 0; i < MAX_PROCS; i++) {
			struct proc *q = &procs[i];
			if (!q->used) continue;
			if (q->in_fd >= 0 && q->input_len > 0) {
				owner[n] = NULL;
				proc_of[n] = q;
				stream_of[n] = 2;
				fds[n++] = (struct pollfd){.fd = q->in_fd, .events = POLLOUT};
			}
			/* A ring full of bytes a reader still needs holds the process (its pipe fills). */
			int held = (q->fd[0] >= 0 || q->fd[1] >= 0) && make_room(q, 5 + 4096) < 5 + 4096;
			for (int s = 0; s < 2 && !held; s++) {
				if (q->fd[s] < 0) continue;
				owner[n] = NULL;
				proc_of[n] = q;
				stream_of[n] = s;
				fds[n++] = (struct pollfd){.fd = q->fd[s], .events = POLLIN};
			}
			if (q->exited && !q->done) {
				int64_t left = q->exited_at + DRAIN_GRACE_MS - now;
				int wait = left < 0 ? 0 : (int)left;
				if (held) wait = wait < 50 ? 50 : wait;
				if (timeout < 0 || wait < timeout) timeout = wait;
			}
		}
		if (poll(fds, (nfds_t)n, timeout) < 0) {
			if (errno == EINTR) continue;
			die("poll");
		}
		if (fds[1].revents) reap();
		for (int i = 3; i < n; i++) {
			if (!fds[i].revents) continue;
			struct proc *q = proc_of[i];
			if (q) {
				if (!q->used) continue;
				if (stream_of[i] == 2) {
					if (q->in_fd == fds[i].fd) proc_input_flush(q);
				} else if (q->fd[stream_of[i]] == fds[i].fd) {
					proc_forward(q, stream_of[i]);
				}
				continue;
			}
			if (!owner[i]->used) continue;
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
		for (int i = 0; i < MAX_PROCS; i++)
			if (procs[i].used) proc_drain(&procs[i], now);
		for (int i = 0; i < MAX_READERS; i++)
			if (readers[i].used && readers[i].waiting) serve(&readers[i]);
		if (fds[2].revents) take_connection();
		if (connected && !broken && fds[0].revents) {
			ssize_t r = read(0, in + in_len, sizeof in - in_len);
			if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
				disconnect();
				continue;
			}
			if (r > 0) {
				in_len += (size_t)r;
				handle_input();
			}
		}
	}
}
