/* rbjail layers: each isolation layer as one function.
 *
 * The same functions serve two callers: the rbjail launcher (a fresh process
 * per execution) and, through ctypes on librbjail.so, a child forked from a
 * pre-started warm interpreter. Every function returns 0 on success or -1 with
 * errno set and a message available from rbjail_error().
 */
#ifndef RBJAIL_LAYERS_H
#define RBJAIL_LAYERS_H

#include <signal.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

enum rbjail_mount_kind {
    /* Host path copied at the same place: a symlink stays a symlink, anything
     * else is bind-mounted read-only; a missing host path is skipped. */
    RBJAIL_MIRROR = 0,
    RBJAIL_RO = 1,
    RBJAIL_RW = 2,
};

struct rbjail_mount {
    const char *host;
    const char *target; /* absolute path inside the jail */
    int kind;           /* enum rbjail_mount_kind */
};

struct rbjail_fs {
    const char *root_dir; /* empty host directory the new root tmpfs goes on */
    const struct rbjail_mount *mounts;
    size_t n_mounts;
    unsigned long work_mb;
    unsigned long tmp_mb;
    unsigned long inodes; /* per writable tmpfs */
    uid_t uid;            /* owner of /work */
    gid_t gid;
};

struct rbjail_rlimit {
    int resource;
    unsigned long long soft;
    unsigned long long hard;
};

/* Everything applied to the process that becomes the untrusted program,
 * in this order: cgroups, cgroup ns, oom score, new session, rlimits,
 * capabilities, uid/gid, no_new_privs, seccomp, default signals. */
struct rbjail_child {
    const int *cgroup_fds; /* open cgroup.procs files, written "0" */
    size_t n_cgroup_fds;
    const struct rbjail_rlimit *rlimits;
    size_t n_rlimits;
    int drop_uid; /* bool */
    uid_t uid;
    gid_t gid;
    int seccomp;     /* bool */
    int new_session; /* bool */
    int cgroupns;    /* bool: new cgroup namespace (also implied by cgroup_fds) */
    int reset_oom_score; /* bool: oom_score_adj back to 0 (the spawner runs at -1000) */
};

const char *rbjail_error(void);

/* Mount, ipc and uts namespaces; pid (for the caller's children) when new_pid
 * (else the caller is already pid 1 of a new one); net when new_net (else the caller's). */
int rbjail_unshare_namespaces(int new_pid, int new_net);
/* The jail's root on fs->root_dir (a new tmpfs, read-only once entered: only
 * /work, /tmp and /dev/shm are writable), pivoted into; then chdir /work. */
int rbjail_build_root(const struct rbjail_fs *fs);
/* The same root without the jail's own file systems (/work, /tmp, /dev/shm,
 * /proc), entered as the caller's root: called in a new mount namespace kept
 * as a template. A jail that enters a copy of it (setns, then unshare
 * CLONE_NEWNS) mounts its own file systems with rbjail_fresh_scratch. */
int rbjail_make_template(const struct rbjail_fs *fs);
int rbjail_set_hostname(const char *name);
int rbjail_loopback_up(void);
/* A hash of what the caller's net namespace shows of its use (packets, live
 * sockets): unchanged since it was new means a later user can share it. */
unsigned long long rbjail_net_traces(void);
/* The same, watched: the files kept open on the namespace the caller is in at
 * rbjail_net_watch (read again with pread: about half the cost of opening them
 * each time), with their hash then. Start from fd[] = -1. Never in a process
 * whose executions run without an exec (a zygote): the fds would be theirs. */
#define RBJAIL_NET_FILES 3
struct rbjail_net_watch {
    int fd[RBJAIL_NET_FILES];
    unsigned long long clean;
};
#define RBJAIL_NET_WATCH_INIT {.fd = {-1, -1, -1}}
void rbjail_net_watch(struct rbjail_net_watch *w);
int rbjail_net_used(const struct rbjail_net_watch *w);
/* Leave the caller's net namespace for a new one (the old one dies with its
 * last user), loopback up if asked; w (may be NULL) then watches the new one. */
int rbjail_net_renew(struct rbjail_net_watch *w, int loopback);

int rbjail_apply_cgroups(const int *fds, size_t n);
int rbjail_apply_cgroupns(void);
int rbjail_reset_oom_score(void);
int rbjail_apply_rlimits(const struct rbjail_rlimit *limits, size_t n);
int rbjail_drop_capabilities(void);
/* The capability bounding set alone (what the process holds stays). */
int rbjail_drop_bounding_set(void);
int rbjail_apply_uid(uid_t uid, gid_t gid);
int rbjail_apply_no_new_privs(void);
int rbjail_apply_seccomp(void);
/* For tests: the filter's instructions (8 bytes each) copied into out, their
 * count (0: it does not fit in max, or cannot be built). */
size_t rbjail_seccomp_filter(void *out, size_t max);
/* For tests: the i-th syscall the filter refuses outright, and its errno; -1 past the last. */
int rbjail_seccomp_denial(size_t i, int *nr, int *err);
int rbjail_reset_signals(void);
/* The signals that stop a jail: the worker sends one to its init (or supervisor). */
#define RBJAIL_N_STOPS 4
extern const int rbjail_stops[RBJAIL_N_STOPS];
void rbjail_stop_signals(sigset_t *set);
/* For pid 1 of a jail's pid namespace: a stop signal sent from outside the
 * namespace (the worker's) kills every process in it and exits; the same
 * signals from the jail's own processes are ignored. */
void rbjail_exit_on_stops(void);
/* For a process that forks many programs, each confined by rbjail_confine (a
 * session's init): work out once what each would work out again, the seccomp
 * filter and which signals are not at their default. Call it after the last
 * change of a signal's disposition: a program forked after a later change
 * would keep that disposition. */
int rbjail_prepare_children(void);
int rbjail_confine(const struct rbjail_child *child);

/* Name of an rlimit ("cpu", "as", ...) to its RLIMIT_* number, or -1. */
int rbjail_rlimit_resource(const char *name);

/* ------------------------------------------------------------------ status protocol, init
 *
 * The jail's init speaks to the worker over a SOCK_SEQPACKET status socket:
 * "ready" (+ fd of /work), "go" (from the worker), "result ...", "error ...". */

#define RBJAIL_FAULT 125 /* exit status of a jail fault, never the program's */

/* The time limits of one execution. The limit is CPU time (user + system of
 * every process and thread of the jail, exited ones included), so that a busy
 * host, which stretches the wall time of a program but not its CPU time, never
 * changes a verdict; the wall-clock backstop ends programs that sleep or block. */
struct rbjail_time_limits {
    long long cpu_ms;
    long long wall_ms;     /* the backstop, moved back by the time tasks waited for a CPU */
    long long wall_cap_ms; /* ... up to this much wall time in all */
    int cpu_fd; /* the slot's cgroup CPU counter (cpuacct.usage or cpu.stat), or -1 */
};

enum rbjail_timeout {
    RBJAIL_IN_TIME = 0,
    RBJAIL_CPU_LIMIT = 1,     /* the CPU time limit */
    RBJAIL_WALL_BACKSTOP = 2, /* the wall-clock backstop */
};

struct rbjail_outcome {
    int status;    /* the program's wait status */
    int timed_out; /* enum rbjail_timeout */
    long long wall_us;
    long long cpu_us;       /* the CPU time the limit was enforced on */
    const char *cpu_source; /* how it was measured: "cgroup", "procfs" or "process" */
    long long waited_us;    /* time the program's live tasks waited for a CPU, as it exited */
    long maxrss_kb;         /* the program's own peak RSS (its process, as reaped) */
};

void rbjail_send_msg(int fd, const char *msg, int pass_fd);
/* Receive one message of at most len bytes and up to max_fds (<= RBJAIL_MAX_RECV_FDS)
 * passed fds; extra fds are closed, EINTR retried. Returns recvmsg's result. */
#define RBJAIL_MAX_RECV_FDS 8
ssize_t rbjail_recv_with_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *n_fds);
/* "error STAGE: <rbjail_error()>" */
void rbjail_send_error(int fd, const char *stage);
/* 0 once "go" arrived; -1 if the caller went away or sent anything else. */
int rbjail_wait_for_go(int fd);
long long rbjail_now_us(void);
/* As init (SIGCHLD blocked): wait for prog within its limits, kill and reap everything. */
void rbjail_supervise(pid_t prog, long long start_us, const struct rbjail_time_limits *limits,
                      struct rbjail_outcome *out);
/* "result exit=E signal=S wall_us=W utime_us=U stime_us=Y maxrss_kb=M timed_out=T
 *  limit=L cpu_us=C cpu_source=S waited_us=D" (T: 0 or 1; L: none, cpu or wall).
 * U, Y and M are of every child reaped so far; with `since` (a session's run:
 * RUSAGE_CHILDREN as it was before the run), U and Y are what the run added and
 * M is the program's own. */
void rbjail_report(int fd, const struct rbjail_outcome *out, const struct rusage *since);
/* The default wall-clock backstop for a CPU limit: max(3 x cpu, cpu + 2 s)
 * (its default cap: 4 x that). */
long long rbjail_default_wall_ms(long long cpu_ms);

/* ------------------------------------------------------------------ warm pools
 *
 * A zygote (a pre-started interpreter, root inside an already built jail) forks
 * one execution at a time: it unshares the per-execution namespaces, forks the
 * execution's pid 1, and re-enters its own namespaces. That pid 1 lays fresh
 * scratch mounts over the jail's root and forks the program, which is confined
 * with rbjail_confine() like a launcher's program, then shows its own argv. */

/* New mount and ipc namespaces now, a new pid namespace for the next child
 * (the execution's pid 1); a new net namespace too when new_net. */
int rbjail_unshare_execution(int new_net);
/* Re-enter the namespaces held open as fds (opened from /proc/self/ns/). */
int rbjail_setns_all(const int *fds, size_t n);
/* Over an existing jail root (a zygote's, a template's copy): fresh size-capped tmpfs /work (owned by uid/gid),
 * /tmp and /dev/shm, and a /proc of the caller's pid namespace (hidepid); then
 * chdir /work. Only work_mb, tmp_mb, inodes, uid and gid of fs are used. */
int rbjail_fresh_scratch(const struct rbjail_fs *fs);
/* Make /proc/self/cmdline show `args` (NUL-separated, NUL-terminated, len
 * bytes, copied). Needs CAP_SYS_RESOURCE: call before rbjail_confine(). */
int rbjail_set_cmdline(const char *args, size_t len);
/* Close every fd from lowfd up (close_range(2), a loop where it is missing). */
int rbjail_close_from(int lowfd);
/* A zygote's serving loop (the interpreter calls it once it is warm). Per
 * request ("spawn" + [stdin, stdout, stderr, status socket, request memfd,
 * optionally the slot's cgroup CPU counter]) it
 * forks the execution's pid 1 into new namespaces and answers "spawned PID" +
 * [pidfd]; that pid 1 mounts fresh scratch, speaks the status protocol, forks
 * the program and supervises it. Returns -1 in the zygote once the worker has
 * closed control_fd. Returns in the program (pid 2), confined, with stdio in
 * place, the signal dispositions the interpreter had when it called this, and
 * every other fd closed: the request memfd (positioned at the interpreter's
 * part), with *status_fd still open for setup errors.
 * Without fresh_net, executions share the zygote's net namespace only while
 * they leave no trace in it: before each fork the zygote compares the
 * namespace's traces (rbjail_net_traces) with their value when it was new,
 * and moves to a fresh namespace if any packet was sent (sockets in TIME_WAIT,
 * counters) or a socket is still alive. */
struct rbjail_zygote {
    int control_fd;
    const int *ns_fds; /* the zygote's own namespaces, re-entered after each fork */
    size_t n_ns_fds;
    int fresh_net; /* a new net namespace for every execution (else: when used, above) */
    int loopback;  /* bring "lo" up in new net namespaces */
};

#define RBJAIL_POOL_MAX_RLIMITS 16

/* The head of a request memfd; cmdline_len bytes of NUL-separated argv follow,
 * then the interpreter's part, up to the end of the file. */
struct rbjail_pool_request {
    unsigned int size; /* sizeof(struct rbjail_pool_request): layout check */
    unsigned int cmdline_len;
    int drop_uid, seccomp, loopback;
    unsigned int uid, gid;
    long long cpu_ms; /* struct rbjail_time_limits */
    long long wall_ms;
    long long wall_cap_ms;
    unsigned long work_mb, tmp_mb, inodes;
    unsigned int n_rlimits;
    struct rbjail_rlimit rlimits[RBJAIL_POOL_MAX_RLIMITS];
};

int rbjail_zygote_serve(const struct rbjail_zygote *z, int *status_fd);

/* sizeof(struct rbjail_<name>) ("fs", "child", "rlimit", "mount", "zygote",
 * "pool_request"), 0 if unknown:
 * lets ctypes mirrors of these structs check themselves. */
size_t rbjail_struct_size(const char *name);

#endif
