/* rbjail: run one untrusted program in a fresh jail.
 *
 *   rbjail [options] -- PROGRAM [ARG...]      one jail, then exit
 *   rbjail --spawner [--cgroup-procs F]... [--share-net]
 *                                             resident: fork one jail per request
 *   rbjail --probe [--root DIR]               try each layer, print what works
 *   rbjail --session [options] -- PROGRAM     one jail, the program run once per request
 *
 * Two or three processes per jail, no helpers and no shell:
 *   supervisor  (a one-shot jail, or a spawner's jail without namespaces) stays in
 *               the host namespaces; on SIGTERM/SIGINT/SIGHUP/SIGUSR1 it SIGKILLs
 *               the jail's init, which takes the whole pid namespace down. A
 *               spawner forks a namespaced jail's init itself, which then exits
 *               on those signals when they come from outside the jail.
 *   init        pid 1 of new pid/mount/net/ipc/uts namespaces (net: see the
 *               spawner's --share-net): builds the root,
 *               hands the caller an fd of /work (SCM_RIGHTS on the status socket),
 *               optionally waits for "go", forks the program, enforces the CPU
 *               time limit (the whole jail's, read from the slot's cgroup counter
 *               with --cpu-counter) and the wall-clock backstop (moved back by
 *               the time the jail's tasks waited for a CPU, up to --wall-cap-ms),
 *               kills every leftover process and reports the result.
 *   program     (joins the cgroups,) resets its OOM score, applies rlimits, drops
 *               to the unprivileged uid, installs the seccomp filter, execs PROGRAM.
 *
 * Status socket (SOCK_SEQPACKET, --status-fd, default 3), one message each:
 *   init -> caller   "ready" (+ fd of /work)
 *   caller -> init   "go" (only with --wait-go)
 *   init -> caller   "result exit=E signal=S wall_us=W utime_us=U stime_us=Y maxrss_kb=M timed_out=T
 *                     limit=none|cpu|wall cpu_us=C cpu_source=cgroup|procfs|process
 *                     waited_us=D"  (D: time spent waiting for a CPU, see rbjail_supervise)
 *   any  -> caller   "error STAGE: REASON"  (an infrastructure fault, never the program's)
 * A warm pool's zygote runs as the program of such a jail with --keep-root
 * --no-seccomp (it builds namespaces and mounts for its children, which confine
 * themselves with the same layer code from librbjail.so before running anything).
 * Exit status: the program's, 128+signal if it was killed, 125 on a jail fault.
 * The spawner's protocol is described above run_spawner(), a session's above
 * run_session().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rbjail_layers.h"

#define JAIL_FAULT 125
#define MAX_MOUNTS 64
#define MAX_ENV 256
#define MAX_CGROUPS 8
#define MAX_RLIMITS 16

struct opts {
    int status_fd;
    int ns;      /* new namespaces */
    int mounts;  /* fresh root (needs ns) */
    int seccomp;
    int loopback;
    int wait_go;
    int drop_uid;
    int keep_root; /* the program stays root; the jail (passwd, /work) is still --uid's */
    int probe;
    int spawner;
    int share_net; /* spawner: its jails share a net namespace while they leave no trace */
    int shared_net; /* in the spawner's net namespace, lo up (set by the spawner) */
    int session;
    int template_root; /* set by the spawner: init enters a copy of a root built before */
    int cgroupns;
    int reset_oom;
    uid_t uid;
    gid_t gid;
    long long cpu_ms;  /* CPU time limit of the whole jail */
    long long wall_ms; /* wall-clock backstop (0: rbjail_default_wall_ms) */
    long long wall_cap_ms; /* the backstop moved by time spent waiting for a CPU, at most (0: 10 x) */
    const char *cpu_counter; /* the slot's cgroup CPU counter file, if any */
    int cpu_fd;
    pid_t parent_pid;
    const char *root_dir;
    const char *workdir; /* without mounts: host directory to run in */
    const char *hostname;
    unsigned long work_mb, tmp_mb, inodes;
    struct rbjail_mount mount_v[MAX_MOUNTS];
    size_t n_mounts;
    const char *cgroup_v[MAX_CGROUPS];
    size_t n_cgroups;
    int cgroup_fds[MAX_CGROUPS];
    struct rbjail_rlimit rlimit_v[MAX_RLIMITS];
    size_t n_rlimits;
    char *env_v[MAX_ENV + 1];
    size_t n_env;
    char **argv;
};

/* Set while the spawner parses a request: a bad one is answered, the spawner lives on. */
static jmp_buf *g_usage_return;
static char g_usage_msg[256];

static void usage_error(const char *what, const char *arg) {
    snprintf(g_usage_msg, sizeof g_usage_msg, "rbjail: %s%s%s", what, arg ? ": " : "", arg ? arg : "");
    if (g_usage_return != NULL) longjmp(*g_usage_return, 1);
    fprintf(stderr, "%s\n", g_usage_msg);
    exit(JAIL_FAULT);
}

static unsigned long long parse_num(const char *s, const char *what) {
    if (strcmp(s, "inf") == 0) return ~0ULL;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') usage_error(what, s);
    return v;
}

static const char *need(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) usage_error("missing value for", argv[*i]);
    return argv[++*i];
}

static void add_mount(struct opts *o, const char *host, const char *target, int kind) {
    if (o->n_mounts >= MAX_MOUNTS) usage_error("too many mounts", NULL);
    if (target[0] != '/') usage_error("mount target must be absolute", target);
    o->mount_v[o->n_mounts++] = (struct rbjail_mount){host, target, kind};
}

static void add_rlimit(struct opts *o, const char *name, const char *soft, const char *hard) {
    int res = rbjail_rlimit_resource(name);
    if (res < 0) usage_error("unknown rlimit", name);
    if (o->n_rlimits >= MAX_RLIMITS) usage_error("too many rlimits", NULL);
    o->rlimit_v[o->n_rlimits++] =
        (struct rbjail_rlimit){res, parse_num(soft, "rlimit"), parse_num(hard, "rlimit")};
}

/* Flags with no value; 1 when `a` was one of them. */
static int parse_flag(struct opts *o, const char *a) {
    static const struct {
        const char *name;
        size_t off;
        int value;
    } flags[] = {
        {"--ns", offsetof(struct opts, ns), 1},
        {"--no-ns", offsetof(struct opts, ns), 0},
        {"--mounts", offsetof(struct opts, mounts), 1},
        {"--no-mounts", offsetof(struct opts, mounts), 0},
        {"--seccomp", offsetof(struct opts, seccomp), 1},
        {"--no-seccomp", offsetof(struct opts, seccomp), 0},
        {"--loopback", offsetof(struct opts, loopback), 1},
        {"--no-loopback", offsetof(struct opts, loopback), 0},
        {"--wait-go", offsetof(struct opts, wait_go), 1},
        {"--keep-uid", offsetof(struct opts, drop_uid), 0},
        {"--keep-root", offsetof(struct opts, keep_root), 1},
        {"--share-net", offsetof(struct opts, share_net), 1},
        {"--probe", offsetof(struct opts, probe), 1},
        {"--spawner", offsetof(struct opts, spawner), 1},
        {"--session", offsetof(struct opts, session), 1},
        {"--cgroupns", offsetof(struct opts, cgroupns), 1},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (strcmp(a, flags[i].name) == 0) {
            *(int *)((char *)o + flags[i].off) = flags[i].value;
            return 1;
        }
    }
    return 0;
}

static void parse_args(int argc, char **argv, struct opts *o) {
    *o = (struct opts){.status_fd = 3, .ns = 1, .mounts = 1, .seccomp = 1, .loopback = 1,
                       .drop_uid = 1, .uid = 65534, .gid = 65534, .cpu_ms = 5000, .cpu_fd = -1,
                       .root_dir = NULL, .hostname = "sandbox", .work_mb = 256, .tmp_mb = 64,
                       .inodes = 16384};
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) { i++; break; }
        if (parse_flag(o, a)) continue;
        if (strcmp(a, "--status-fd") == 0) o->status_fd = (int)parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--root") == 0) o->root_dir = need(argc, argv, &i);
        else if (strcmp(a, "--workdir") == 0) o->workdir = need(argc, argv, &i);
        else if (strcmp(a, "--hostname") == 0) o->hostname = need(argc, argv, &i);
        else if (strcmp(a, "--uid") == 0) o->uid = (uid_t)parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--gid") == 0) o->gid = (gid_t)parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--cpu-ms") == 0) o->cpu_ms = (long long)parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--wall-ms") == 0) o->wall_ms = (long long)parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--wall-cap-ms") == 0) o->wall_cap_ms = (long long)parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--cpu-counter") == 0) o->cpu_counter = need(argc, argv, &i);
        else if (strcmp(a, "--parent-pid") == 0) o->parent_pid = (pid_t)parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--work-mb") == 0) o->work_mb = parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--tmp-mb") == 0) o->tmp_mb = parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--inodes") == 0) o->inodes = parse_num(need(argc, argv, &i), a);
        else if (strcmp(a, "--mirror") == 0) {
            const char *p = need(argc, argv, &i);
            add_mount(o, p, p, RBJAIL_MIRROR);
        } else if (strcmp(a, "--ro") == 0 || strcmp(a, "--rw") == 0) {
            const char *host = need(argc, argv, &i);
            add_mount(o, host, need(argc, argv, &i), a[3] == 'o' ? RBJAIL_RO : RBJAIL_RW);
        } else if (strcmp(a, "--cgroup-procs") == 0) {
            if (o->n_cgroups >= MAX_CGROUPS) usage_error("too many cgroups", NULL);
            o->cgroup_v[o->n_cgroups++] = need(argc, argv, &i);
        } else if (strcmp(a, "--rlimit") == 0) {
            const char *name = need(argc, argv, &i);
            const char *soft = need(argc, argv, &i);
            add_rlimit(o, name, soft, need(argc, argv, &i));
        } else if (strcmp(a, "--env") == 0) {
            if (o->n_env >= MAX_ENV) usage_error("too many environment variables", NULL);
            o->env_v[o->n_env++] = (char *)need(argc, argv, &i);
        } else usage_error("unknown option", a);
    }
    o->env_v[o->n_env] = NULL;
    o->argv = argv + i;
    if (o->probe || o->spawner) return;
    if (o->argv[0] == NULL) usage_error("no program given", NULL);
    if (o->mounts && !o->ns) usage_error("--mounts needs --ns", NULL);
    if (o->mounts && o->root_dir == NULL) usage_error("--mounts needs --root", NULL);
    if (!o->mounts && o->workdir == NULL) usage_error("--no-mounts needs --workdir", NULL);
    if (o->session && !(o->ns && o->mounts)) usage_error("--session needs --ns and --mounts", NULL);
}

/* ------------------------------------------------------------------ program */

static void exec_program(const struct opts *o) {
    const char *prog = o->argv[0];
    if (strchr(prog, '/') != NULL) {
        execve(prog, o->argv, o->env_v);
    } else {
        /* PATH search uses the jail's PATH, never the launcher's. */
        const char *path = "/usr/local/bin:/usr/bin:/bin";
        for (size_t i = 0; i < o->n_env; i++)
            if (strncmp(o->env_v[i], "PATH=", 5) == 0) path = o->env_v[i] + 5;
        char buf[PATH_MAX];
        int saved = ENOENT;
        while (*path) {
            size_t len = strcspn(path, ":");
            if (len > 0 && len + strlen(prog) + 2 < sizeof buf) {
                snprintf(buf, sizeof buf, "%.*s/%s", (int)len, path, prog);
                execve(buf, o->argv, o->env_v);
                if (errno != ENOENT && errno != ENOTDIR) saved = errno;
            }
            path += len;
            if (*path == ':') path++;
        }
        errno = saved;
    }
    int err = errno;
    dprintf(2, "rbjail: cannot execute %s: %s\n", prog, strerror(err));
    _exit(err == ENOENT ? 127 : 126);
}

static void run_program(const struct opts *o) {
    struct rbjail_child c = {
        .cgroup_fds = o->cgroup_fds, .n_cgroup_fds = o->n_cgroups,
        .rlimits = o->rlimit_v, .n_rlimits = o->n_rlimits,
        .drop_uid = o->drop_uid && !o->keep_root, .uid = o->uid, .gid = o->gid,
        .seccomp = o->seccomp, .new_session = o->ns, .cgroupns = o->cgroupns,
        .reset_oom_score = 1,
    };
    if (!o->ns) {
        /* No pid namespace to take it down: die with init, lead our own group. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setpgid(0, 0);
    }
    if (rbjail_confine(&c) < 0) {
        rbjail_send_error(o->status_fd, "confine");
        _exit(JAIL_FAULT);
    }
    exec_program(o);
}

/* ------------------------------------------------------------------ init */

static struct rbjail_fs jail_fs(const struct opts *o) {
    return (struct rbjail_fs){
        .root_dir = o->root_dir, .mounts = o->mount_v, .n_mounts = o->n_mounts,
        .work_mb = o->work_mb, .tmp_mb = o->tmp_mb, .inodes = o->inodes,
        .uid = o->drop_uid ? o->uid : 0, .gid = o->drop_uid ? o->gid : 0,
    };
}

static int prepare_jail(const struct opts *o) {
    if (o->mounts) {
        struct rbjail_fs fs = jail_fs(o);
        int rc = o->template_root ? rbjail_fresh_scratch(&fs) : rbjail_build_root(&fs);
        if (rc < 0) return -1;
    } else if (chdir(o->workdir) < 0) {
        return -1;
    }
    if (o->ns && rbjail_set_hostname(o->hostname) < 0) return -1;
    if (o->ns && o->loopback && !o->shared_net && rbjail_loopback_up() < 0) return -1;
    return 0;
}

static int run_session(const struct opts *o);

static int run_init(const struct opts *o) {
    umask(022);
    if (prepare_jail(o) < 0) {
        rbjail_send_error(o->status_fd, "setup");
        return JAIL_FAULT;
    }
    int workfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (workfd < 0) {
        rbjail_send_error(o->status_fd, "open /work");
        return JAIL_FAULT;
    }
    rbjail_send_msg(o->status_fd, "ready", workfd);
    close(workfd);
    if (o->wait_go && rbjail_wait_for_go(o->status_fd) < 0) return JAIL_FAULT;

    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    if (o->session) return run_session(o);
    long long start = rbjail_now_us();
    pid_t prog = fork();
    if (prog < 0) {
        rbjail_send_error(o->status_fd, "fork");
        return JAIL_FAULT;
    }
    if (prog == 0) run_program(o);
    if (!o->ns) setpgid(prog, prog); /* as the child does: whoever runs first wins the race */
    struct rbjail_outcome out = {0};
    long long wall_ms = o->wall_ms > 0 ? o->wall_ms : rbjail_default_wall_ms(o->cpu_ms);
    struct rbjail_time_limits limits = {
        .cpu_ms = o->cpu_ms,
        .wall_ms = wall_ms,
        .wall_cap_ms = o->wall_cap_ms > 0 ? o->wall_cap_ms : 10 * wall_ms,
        .cpu_fd = o->cpu_fd,
    };
    rbjail_supervise(prog, start, &limits, &out);
    rbjail_report(o->status_fd, &out, NULL);
    return 0;
}

/* ------------------------------------------------------------------ session
 *
 * rbjail --session: one jail, the program run once per request, for a suite of
 * stdin/stdout tests of one program: the namespaces, the root and the seccomp
 * filter are built once, and each run is a fork + exec.
 *
 * After "go", each request on the status socket is "run CPU_MS WALL_MS WALL_CAP_MS"
 * with SCM_RIGHTS [stdin, stdout, stderr]; init answers "result ..." of that run
 * alone (see rbjail_report's `since`). EOF or "end" ends the jail.
 *
 * Each run starts as a new jail's program would: /work holds exactly the files
 * the caller wrote before the first run (an overlay over them whose upper layer
 * is a tmpfs, so what a run writes or changes there is gone for the next);
 * /tmp and /dev/shm are empty tmpfs; a file system that a run changed is
 * replaced by a new one before the next (session_reset: one left untouched is
 * kept, which is most runs' case); the program has an IPC namespace of its own;
 * every process of the previous run is dead (init is pid 1 of the jail's pid
 * namespace: rbjail_supervise ends with kill(-1)); a run that left a trace in
 * the network namespace (a packet sent, so TIME_WAIT ports and counters any
 * program can read; a socket still alive, whose abstract name /proc/net/unix
 * lists) makes init move to a new one, loopback up. What is shared is what no
 * program can change: the read-only root, an unused network namespace
 * (loopback only, no capabilities to configure it), the hostname. */

static int session_fail(const struct opts *o, const char *what, const char *path) {
    char msg[512];
    snprintf(msg, sizeof msg, "error session: %s %s: %s", what, path, strerror(errno));
    rbjail_send_msg(o->status_fd, msg, -1);
    return -1;
}

/* A writable directory as a run found it, to tell whether the run changed it. */
struct dir_state {
    struct stat st;
    ssize_t xattrs; /* flistxattr's size */
};

static int dir_state(int fd, struct dir_state *d) {
    if (fstat(fd, &d->st) < 0) return -1;
    d->xattrs = flistxattr(fd, NULL, 0);
    return 0;
}

static int same_time(struct timespec a, struct timespec b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* 1 when the directory at dirfd/path is still empty and as it was: no entry,
 * and the same mode, owner, times and extended attributes. Anything a run can
 * do to a file system it can write (create, change or remove a file, a
 * directory or a link, chmod or touch the directory itself) fails this. */
static int untouched(int dirfd, const char *path, const struct dir_state *was) {
    int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct dir_state now;
    int same = dir_state(fd, &now) == 0 && now.st.st_mode == was->st.st_mode &&
               now.st.st_uid == was->st.st_uid && now.st.st_gid == was->st.st_gid &&
               same_time(now.st.st_mtim, was->st.st_mtim) &&
               same_time(now.st.st_atim, was->st.st_atim) && now.xattrs == was->xattrs;
    char buf[4096] __attribute__((aligned(8)));
    long n;
    while (same && (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long at = 0; at < n && same;) {
            const char *name = buf + at + 19; /* d_ino 8, d_off 8, d_reclen 2, d_type 1 */
            unsigned short reclen;
            memcpy(&reclen, buf + at + 16, sizeof reclen);
            at += reclen;
            same = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
        }
    }
    close(fd);
    return same;
}

/* A session's file systems: the caller's files, the current run's /work
 * overlay (upper_fd: its upper layer, -1 when none is mounted), /tmp and /dev/shm. */
struct session {
    int lower_fd;
    int upper_fd;
    struct dir_state upper, scratch[2];
    struct rbjail_net_watch net; /* the namespace the next run gets */
};

static const char *const session_scratch[2] = {"/tmp", "/dev/shm"};

/* Mounted noatime: reading a directory must not look like a change to it. */
#define SESSION_MOUNT_FLAGS (MS_NOSUID | MS_NODEV | MS_NOATIME)

static int session_tmpfs(const struct opts *o, const char *path, unsigned long mb, const char *mode) {
    char opts[192];
    snprintf(opts, sizeof opts, "size=%lum,nr_inodes=%lu,mode=%s", mb, o->inodes, mode);
    if (mount("rbjail", path, "tmpfs", SESSION_MOUNT_FLAGS, opts) < 0)
        return session_fail(o, "mount tmpfs", path);
    return 0;
}

/* A run's /work: an overlay over the caller's files, its upper layer on a new
 * tmpfs stacked at /work under it. */
static int session_work(const struct opts *o, struct session *s) {
    if (session_tmpfs(o, "/work", o->work_mb, "0755") < 0) return -1;
    int scratch = open("/work", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (scratch < 0) return session_fail(o, "open", "/work");
    uid_t uid = o->drop_uid ? o->uid : 0;
    gid_t gid = o->drop_uid ? o->gid : 0;
    int rc = 0;
    if (mkdirat(scratch, "upper", 0755) < 0 || mkdirat(scratch, "work", 0700) < 0 ||
        fchownat(scratch, "upper", uid, gid, 0) < 0)
        rc = session_fail(o, "prepare", "/work");
    char opts[192];
    snprintf(opts, sizeof opts,
             "lowerdir=/proc/self/fd/%d,upperdir=/proc/self/fd/%d/upper,workdir=/proc/self/fd/%d/work",
             s->lower_fd, scratch, scratch);
    if (rc == 0 && mount("overlay", "/work", "overlay", SESSION_MOUNT_FLAGS, opts) < 0) {
        rc = session_fail(o, "mount overlay", "/work");
        umount2("/work", MNT_DETACH); /* the scratch tmpfs, never the caller's files */
    }
    if (rc == 0) {
        s->upper_fd = openat(scratch, "upper", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->upper_fd < 0 || dir_state(s->upper_fd, &s->upper) < 0)
            rc = session_fail(o, "open", "/work's upper layer");
    }
    close(scratch);
    return rc;
}

static int session_scratch_fs(const struct opts *o, struct session *s, size_t i) {
    if (session_tmpfs(o, session_scratch[i], o->tmp_mb, "1777") < 0) return -1;
    int fd = open(session_scratch[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 || dir_state(fd, &s->scratch[i]) < 0 ? session_fail(o, "open", session_scratch[i]) : 0;
    if (fd >= 0) close(fd);
    return rc;
}

/* Before the first run: /tmp and /dev/shm are replaced too, so that their state is known. */
static int session_start(const struct opts *o, struct session *s) {
    for (size_t i = 0; i < 2; i++) {
        if (umount2(session_scratch[i], MNT_DETACH) < 0) return session_fail(o, "umount", session_scratch[i]);
        if (session_scratch_fs(o, s, i) < 0) return -1;
    }
    rbjail_net_watch(&s->net);
    return session_work(o, s);
}

/* After a run (every process of it dead): each file system it changed is
 * replaced (a lazy unmount: nothing holds it any more, so its pages are freed
 * now); one it left as it was is kept, as an unmount costs ~0.1 ms. */
static int session_reset(const struct opts *o, struct session *s) {
    if (!untouched(s->upper_fd, ".", &s->upper)) {
        close(s->upper_fd);
        s->upper_fd = -1;
        if (umount2("/work", MNT_DETACH) < 0 || umount2("/work", MNT_DETACH) < 0)
            return session_fail(o, "umount", "/work");
        if (session_work(o, s) < 0) return -1;
    }
    for (size_t i = 0; i < 2; i++) {
        if (untouched(AT_FDCWD, session_scratch[i], &s->scratch[i])) continue;
        if (umount2(session_scratch[i], MNT_DETACH) < 0) return session_fail(o, "umount", session_scratch[i]);
        if (session_scratch_fs(o, s, i) < 0) return -1;
    }
    /* Init holds its capabilities: it can leave a used net namespace for a new one. */
    if (rbjail_net_used(&s->net) && rbjail_net_renew(&s->net, o->loopback) < 0)
        return session_fail(o, "unshare", "net");
    return 0;
}

/* One run's program: the request's stdio, a fresh IPC namespace, the overlay's /work. */
static void session_program(const struct opts *o, const int fds[3]) {
    for (int i = 0; i < 3; i++)
        if (dup2(fds[i], i) < 0) _exit(JAIL_FAULT);
    for (int i = 0; i < 3; i++)
        if (fds[i] > 2) close(fds[i]);
    if (unshare(CLONE_NEWIPC) < 0 || chdir("/work") < 0) {
        dprintf(2, "rbjail: session run: %s\n", strerror(errno));
        _exit(JAIL_FAULT);
    }
    run_program(o);
}

static void close_three(const int fds[3]) {
    for (int i = 0; i < 3; i++) close(fds[i]);
}

/* One run in the file systems session_reset left ready; the request's fds are
 * closed on every path (in init: the pipes' ends must be the program's alone,
 * or the caller would never see EOF). */
static int session_run(const struct opts *o, struct session *s, const char *request, const int fds[3]) {
    long long cpu_ms, wall_ms, wall_cap_ms;
    if (sscanf(request, "run %lld %lld %lld", &cpu_ms, &wall_ms, &wall_cap_ms) != 3 || cpu_ms <= 0 ||
        wall_ms <= 0) {
        close_three(fds);
        rbjail_send_msg(o->status_fd, "error session: malformed run request", -1);
        return 0; /* the caller's mistake: the jail is still good */
    }
    struct rusage before;
    getrusage(RUSAGE_CHILDREN, &before);
    long long start = rbjail_now_us();
    pid_t prog = fork();
    if (prog == 0) session_program(o, fds);
    close_three(fds);
    if (prog < 0) return session_fail(o, "fork", "program");
    struct rbjail_outcome out = {0};
    struct rbjail_time_limits limits = {
        .cpu_ms = cpu_ms,
        .wall_ms = wall_ms,
        .wall_cap_ms = wall_cap_ms > wall_ms ? wall_cap_ms : wall_ms,
        .cpu_fd = o->cpu_fd,
    };
    rbjail_supervise(prog, start, &limits, &out);
    rbjail_report(o->status_fd, &out, &before);
    /* The next run's file systems are made now, while the caller reads this result. */
    return session_reset(o, s);
}

static int run_session(const struct opts *o) {
    /* The caller's files, as they were when the first run was asked for. */
    struct session s = {.lower_fd = open("/work", O_RDONLY | O_DIRECTORY | O_CLOEXEC), .upper_fd = -1,
                         .net = RBJAIL_NET_WATCH_INIT};
    if (s.lower_fd < 0 || chdir("/") < 0) {
        session_fail(o, "open", "/work");
        return JAIL_FAULT;
    }
    if (session_start(o, &s) < 0) return JAIL_FAULT;
    /* Init never execs and keeps what it holds (it mounts); each run's program
     * then inherits an empty bounding set instead of emptying it again (0.05 ->
     * 0.02 ms a test). Only where the programs drop their capabilities anyway. */
    if (o->drop_uid && !o->keep_root && rbjail_drop_bounding_set() < 0) {
        session_fail(o, "drop", "capability bounding set");
        return JAIL_FAULT;
    }
    /* Init changes no signal's disposition after this (SIGCHLD is blocked, not handled). */
    if (rbjail_prepare_children() < 0) {
        session_fail(o, "prepare", "programs' filter");
        return JAIL_FAULT;
    }
    for (;;) {
        static char request[128];
        int fds[3], n_fds;
        ssize_t n = rbjail_recv_with_fds(o->status_fd, request, sizeof request - 1, fds, 3, &n_fds);
        if (n <= 0) return 0; /* the caller is done (or gone) */
        request[n] = '\0';
        if (strcmp(request, "end") == 0) {
            for (int i = 0; i < n_fds; i++) close(fds[i]);
            return 0;
        }
        if (n_fds != 3) {
            for (int i = 0; i < n_fds; i++) close(fds[i]);
            rbjail_send_msg(o->status_fd, "error session: a run needs its 3 fds", -1);
        } else if (session_run(o, &s, request, fds) < 0) {
            return JAIL_FAULT;
        }
    }
}

/* ------------------------------------------------------------------ supervisor */

static volatile sig_atomic_t g_init_pid;
static volatile sig_atomic_t g_kill_requested;

static void on_stop(int sig) {
    (void)sig;
    g_kill_requested = 1;
    if (g_init_pid > 0) {
        kill(-g_init_pid, SIGKILL);
        kill(g_init_pid, SIGKILL);
    }
}

static void close_fds_from(int first) {
    if (syscall(SYS_close_range, first, ~0U, 0) < 0) {
        for (int fd = first; fd < 1024; fd++) close(fd);
    }
}

static void close_inherited_fds(int keep) {
    /* Only 0-2 and the status socket may cross into the jail. */
    for (int fd = 3; fd < keep; fd++) close(fd);
    close_fds_from(keep + 1);
    fcntl(keep, F_SETFD, FD_CLOEXEC);
}

static int open_cgroups(struct opts *o) {
    if (o->cpu_counter != NULL) {
        /* Opened here, in the host's mount namespace; init inherits it, the
         * program's execve closes it. Unreadable: init falls back (procfs). */
        o->cpu_fd = open(o->cpu_counter, O_RDONLY | O_CLOEXEC);
    }
    for (size_t i = 0; i < o->n_cgroups; i++) {
        o->cgroup_fds[i] = open(o->cgroup_v[i], O_WRONLY | O_CLOEXEC);
        if (o->cgroup_fds[i] < 0) {
            char msg[600];
            snprintf(msg, sizeof msg, "error cgroup: open %s: %s", o->cgroup_v[i], strerror(errno));
            rbjail_send_msg(o->status_fd, msg, -1);
            return -1;
        }
    }
    return 0;
}

static int wait_init(pid_t init) {
    int st;
    while (waitpid(init, &st, 0) < 0) {
        if (errno != EINTR) return JAIL_FAULT;
    }
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

int rbjail_probe(const char *root_dir); /* rbjail_probe.c */

static void set_oom_score_adj(const char *value) {
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!write(fd, value, strlen(value));
        close(fd);
    }
}

/* The supervisor: new namespaces, fork the jail's init, wait for it. */
static int run_supervisor(struct opts *o, pid_t expected_parent) {
    /* If our parent (the worker or the spawner) dies, so does every jail it started. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (expected_parent > 0 && getppid() != expected_parent) return JAIL_FAULT;
    if (open_cgroups(o) < 0) return JAIL_FAULT;
    struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < RBJAIL_N_STOPS; i++) sigaction(rbjail_stops[i], &sa, NULL);
    sigset_t stops;
    rbjail_stop_signals(&stops);
    sigprocmask(SIG_UNBLOCK, &stops, NULL); /* the spawner forks with them blocked */
    if (o->ns && rbjail_unshare_namespaces(1, !o->shared_net) < 0) {
        rbjail_send_error(o->status_fd, "namespaces");
        return JAIL_FAULT;
    }
    pid_t init = fork();
    if (init < 0) {
        rbjail_send_msg(o->status_fd, "error fork: cannot start init", -1);
        return JAIL_FAULT;
    }
    if (init == 0) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        for (int i = 0; i < RBJAIL_N_STOPS; i++) sigaction(rbjail_stops[i], &dfl, NULL);
        if (o->ns) prctl(PR_SET_PDEATHSIG, SIGKILL); /* the spawner's init sets its own */
        _exit(run_init(o));
    }
    g_init_pid = init;
    if (g_kill_requested) on_stop(SIGTERM);
    return wait_init(init);
}

/* ------------------------------------------------------------------ spawner
 *
 * rbjail --spawner: a long-lived process that joins a cgroup slot once and then
 * forks one jail per request. Its children are born in the slot: moving a
 * process into a cgroup takes cgroup_threadgroup_rwsem for writing, which after
 * a few idle milliseconds waits a full RCU grace period (measured ~10 ms on
 * cgroup v1). Forking also skips the launcher's execve.
 *
 * A jail with namespaces has no supervisor: the spawner forks its init straight
 * into a new pid namespace (unshare(CLONE_NEWPID), fork, then setns back to its
 * own for the next fork), one process fewer per jail (~0.15 ms of CPU here).
 * What the supervisor did, init does: the spawner's death kills it
 * (PR_SET_PDEATHSIG, checked against a pidfd of the spawner for the race),
 * and a stop signal from outside its pid namespace (SIGTERM, SIGINT, SIGHUP,
 * SIGUSR1 from the worker, whose si_pid reads 0 there) makes it exit, which
 * takes the whole pid namespace down. The same signals from inside are ignored,
 * as pid 1 ignores every signal it has no handler for. A jail without
 * namespaces keeps its supervisor (nothing else would kill its processes).
 *
 * Request (SOCK_SEQPACKET, on --status-fd): the jail's options as
 * NUL-separated strings, with SCM_RIGHTS [stdin, stdout, stderr, status socket].
 * Reply: "spawned PID" with SCM_RIGHTS [pidfd] (of init, or of the
 * supervisor), or "error REASON" (a malformed request among them).
 *
 * --share-net: a new net namespace costs more CPU than any other layer (here
 * ~1 ms to make, setup_net, and as much again in the kernel's workqueue to take
 * down, cleanup_net). So the spawner keeps one, loopback up, and the slot's
 * consecutive jails share it only while they leave no trace in it: after each
 * jail (its init has exited, so every process of it is dead) the spawner
 * compares the namespace's traces (rbjail_net_used: any packet, any socket
 * still alive) with their value when it was new, and moves to a new namespace
 * if they differ. A request that comes while the last jail still runs gets a
 * new one too. A jail whose program keeps root (it could configure the
 * namespace without a trace) or wants no loopback gets one of its own, as every
 * jail does without --share-net. The warm pool's zygotes do the same for their
 * executions (rbjail_zygote_serve).
 */

#define SPAWN_FDS 4
#define MAX_ARGS 2048

static char g_request[1 << 18];

static struct {
    int on;         /* jails may share the spawner's net namespace */
    int host_fd;    /* the namespace the spawner started in (jails without namespaces) */
    int last_pidfd; /* the last jail (its init), until the namespace is checked after it */
    struct rbjail_net_watch watch; /* the namespace the next jail may share */
} g_net = {.host_fd = -1, .last_pidfd = -1, .watch = RBJAIL_NET_WATCH_INIT};

static void net_renew(void) {
    if (rbjail_net_renew(&g_net.watch, 1) < 0) g_net.on = 0; /* each jail makes its own, which reports what fails */
}

/* The last jail is over (its init exited) or, when !over, still running. */
static void net_after_jail(int over) {
    close(g_net.last_pidfd);
    g_net.last_pidfd = -1;
    if (g_net.on && (!over || rbjail_net_used(&g_net.watch))) net_renew();
}

static int g_pid_ns_fd = -1;   /* the spawner's pid namespace: its children's again after each init */
static int g_self_pidfd = -1;  /* the spawner: a spawned init checks it is still there */

static ssize_t recv_request(int fd, int fds[SPAWN_FDS], int *n_fds) {
    ssize_t n = rbjail_recv_with_fds(fd, g_request, sizeof g_request - 1, fds, SPAWN_FDS, n_fds);
    if (n >= 0) g_request[n] = '\0';
    return n;
}

/* The request's strings as options; 0, or -1 with g_usage_msg. */
static int parse_request(size_t len, struct opts *o) {
    static char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "rbjail";
    for (size_t at = 0; at < len && argc <= MAX_ARGS; at += strlen(g_request + at) + 1)
        argv[argc++] = g_request + at;
    argv[argc] = NULL;
    jmp_buf bad;
    g_usage_return = &bad;
    if (setjmp(bad) != 0) {
        g_usage_return = NULL;
        return -1;
    }
    parse_args(argc, argv, o);
    g_usage_return = NULL;
    /* Only a program without privileges may share: it cannot change the namespace unseen. */
    o->shared_net = g_net.on && o->ns && o->loopback && o->drop_uid && !o->keep_root;
    return 0;
}

/* In the forked child: the request's fds become 0-3 and `extra` (when >= 0)
 * 4, close-on-exec; no other fd stays. Whether `extra` is there. */
static int take_request_fds(const int fds[SPAWN_FDS], int extra) {
    signal(SIGCHLD, SIG_DFL); /* the child waits for its own */
    for (int i = 0; i < SPAWN_FDS; i++) dup2(fds[i], i);
    int kept = extra == SPAWN_FDS ? fcntl(extra, F_SETFD, FD_CLOEXEC) == 0
                                  : extra > SPAWN_FDS && dup3(extra, SPAWN_FDS, O_CLOEXEC) == SPAWN_FDS;
    close_fds_from(kept ? SPAWN_FDS + 1 : SPAWN_FDS);
    fcntl(3, F_SETFD, FD_CLOEXEC);
    return kept;
}

/* ------------------------------------------------------------------ root templates
 *
 * Building a jail's root (rbjail_build_root: a tmpfs, a read-only bind and its
 * remount per system path, /etc, /dev: 29 mount calls here) took ~0.6 ms of
 * the ~2 ms of CPU a cold jail costs, and it comes out the same for every
 * jail of a slot with the same mounts. So the spawner keeps up to TEMPLATES roots built:
 * each is a mount namespace whose root is a jail's root without the jail's
 * own file systems (rbjail_make_template, in a short-lived child). A jail's
 * init enters one (setns), copies it (unshare CLONE_NEWNS, as it copied the
 * host's before) and mounts only its own /work, /tmp, /dev/shm and /proc
 * (rbjail_fresh_scratch, as a zygote's executions do). The copies share the
 * template's root tmpfs, read-only to all of them, and bind the same host
 * paths a root of their own would.
 *
 * A template is found by what its root is made of: the mounts in order, the
 * uid and gid written in /etc/passwd and /etc/group, the root directory. A
 * bind holds the file or directory its host path named when it was made, so
 * before each use the spawner compares each host path's identity (device,
 * inode, type, or the error) with the template's, and builds it again if any
 * differs: a file replaced (ldconfig renames a new /etc/ld.so.cache in), a
 * path that appeared or went away. Where a template cannot be built (a fork
 * refused by pids.max, a mount that fails), the jail builds its own root,
 * which reports what fails.
 */

#define TEMPLATES 8
#define TEMPLATE_FAILED -2 /* ns_fd: could not be built from these host paths */
/* A template gives way to another set of mounts only when unused for this many
 * requests: a slot that takes more sets in turn than it keeps templates would
 * otherwise build one for every jail (a fork on top of what a jail of its own
 * costs); past TEMPLATES, the other sets' jails build their own root. */
#define TEMPLATE_IDLE 64

struct path_id {
    dev_t dev;
    ino_t ino;
    int type_or_errno;
};

struct template {
    int ns_fd; /* -1: free */
    char *key;
    size_t key_len;
    struct path_id source[MAX_MOUNTS];
    unsigned long long used; /* the request that last used it: the least recent goes first */
};

static struct template g_templates[TEMPLATES];
static unsigned long long g_template_clock;
static char g_template_key[sizeof g_request + 64];

static int key_add(size_t *len, const char *s) {
    size_t n = strlen(s) + 1;
    if (*len + n > sizeof g_template_key) return -1;
    memcpy(g_template_key + *len, s, n);
    *len += n;
    return 0;
}

/* What a jail's root is made of, as NUL-separated strings; its length, or 0. */
static size_t template_key(const struct rbjail_fs *fs) {
    size_t len = 0;
    char ids[64];
    snprintf(ids, sizeof ids, "%u %u", (unsigned)fs->uid, (unsigned)fs->gid);
    if (key_add(&len, ids) < 0 || key_add(&len, fs->root_dir) < 0) return 0;
    for (size_t i = 0; i < fs->n_mounts; i++) {
        const struct rbjail_mount *m = &fs->mounts[i];
        const char kind[2] = {(char)('0' + m->kind), '\0'};
        if (key_add(&len, kind) < 0 || key_add(&len, m->host) < 0 || key_add(&len, m->target) < 0)
            return 0;
    }
    return len;
}

/* The identity of each host path as the root's build would find it. */
static void identify_sources(const struct rbjail_fs *fs, struct path_id id[MAX_MOUNTS]) {
    memset(id, 0, sizeof(struct path_id) * MAX_MOUNTS);
    for (size_t i = 0; i < fs->n_mounts; i++) {
        const struct rbjail_mount *m = &fs->mounts[i];
        struct stat st;
        int rc = m->kind == RBJAIL_MIRROR ? lstat(m->host, &st) : stat(m->host, &st);
        if (rc < 0) {
            id[i].type_or_errno = -errno;
        } else {
            id[i] = (struct path_id){.dev = st.st_dev, .ino = st.st_ino,
                                     .type_or_errno = (int)(st.st_mode & S_IFMT)};
        }
    }
}

/* A new template's mount namespace (fd), or -1. */
static int build_template(const struct rbjail_fs *fs) {
    int done[2];
    if (pipe2(done, O_CLOEXEC) < 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(done[0]);
        char ok = unshare(CLONE_NEWNS) == 0 && rbjail_make_template(fs) == 0;
        if (write(done[1], &ok, 1) == 1) pause(); /* holds the namespace until it is opened */
        _exit(0);
    }
    close(done[1]);
    char ok = 0;
    int fd = -1;
    if (pid > 0 && read(done[0], &ok, 1) == 1 && ok) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    close(done[0]);
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    return fd;
}

static void drop_template(struct template *t) {
    if (t->ns_fd >= 0) close(t->ns_fd);
    free(t->key);
    *t = (struct template){.ns_fd = -1};
}

/* The template for this jail's root (a mount namespace fd), built if need be; or -1. */
static int template_for(const struct opts *o) {
    struct rbjail_fs fs = jail_fs(o);
    size_t len = template_key(&fs);
    if (len == 0) return -1;
    unsigned long long now_request = ++g_template_clock;
    struct path_id now[MAX_MOUNTS];
    identify_sources(&fs, now);
    struct template *t = NULL, *oldest = &g_templates[0];
    for (int i = 0; i < TEMPLATES; i++) {
        struct template *c = &g_templates[i];
        if (c->key != NULL && c->key_len == len && memcmp(c->key, g_template_key, len) == 0) t = c;
        if (c->used < oldest->used) oldest = c;
    }
    if (t != NULL && memcmp(t->source, now, sizeof now) != 0) drop_template(t); /* host paths changed */
    if (t == NULL || t->key == NULL) {
        if (t == NULL && oldest->key != NULL && now_request - oldest->used < TEMPLATE_IDLE)
            return -1; /* every template in use: this jail builds its own root */
        if (t == NULL) t = oldest;
        drop_template(t);
        t->key = malloc(len);
        if (t->key == NULL) return -1;
        memcpy(t->key, g_template_key, len);
        t->key_len = len;
        memcpy(t->source, now, sizeof now);
        t->ns_fd = build_template(&fs);
        if (t->ns_fd < 0) t->ns_fd = TEMPLATE_FAILED;
    }
    t->used = now_request;
    return t->ns_fd >= 0 ? t->ns_fd : -1;
}

/* A jail without namespaces: its supervisor. */
static void spawned_supervisor(struct opts *o, const int fds[SPAWN_FDS], pid_t spawner) {
    if (g_net.on && !o->ns && setns(g_net.host_fd, CLONE_NEWNET) < 0) {
        dup2(fds[3], 3);
        rbjail_send_error(3, "namespaces");
        _exit(JAIL_FAULT);
    }
    take_request_fds(fds, -1);
    _exit(run_supervisor(o, spawner));
}

/* A namespaced jail's init, pid 1 of the pid namespace the spawner made; its
 * root a copy of the template root_ns (a mount namespace) when that is >= 0. */
static void spawned_init(struct opts *o, const int fds[SPAWN_FDS], int root_ns) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct pollfd spawner = {.fd = g_self_pidfd, .events = POLLIN};
    if (poll(&spawner, 1, 0) != 0) _exit(JAIL_FAULT); /* it died before PR_SET_PDEATHSIG */
    int template = take_request_fds(fds, root_ns);
    rbjail_exit_on_stops();
    sigset_t stops;
    rbjail_stop_signals(&stops);
    sigprocmask(SIG_UNBLOCK, &stops, NULL); /* one sent since the fork is handled now */
    if (open_cgroups(o) < 0) _exit(JAIL_FAULT); /* still in the host's mount namespace */
    /* The template's namespace, copied by the unshare below; or the host's, to build a root in. */
    o->template_root = template && setns(SPAWN_FDS, CLONE_NEWNS) == 0;
    if (template) close(SPAWN_FDS);
    if (rbjail_unshare_namespaces(0, !o->shared_net) < 0) {
        rbjail_send_error(o->status_fd, "namespaces");
        _exit(JAIL_FAULT);
    }
    _exit(run_init(o));
}

static void reply_error(int control, const char *what, const char *why) {
    char msg[400];
    snprintf(msg, sizeof msg, "error %s: %s", what, why);
    rbjail_send_msg(control, msg, -1);
}

/* One request; -1 when the spawner cannot go on (its children's pid namespace is lost). */
static int spawn_one(int control, size_t len, const int fds[SPAWN_FDS]) {
    static struct opts o;
    int rc = 0;
    if (parse_request(len, &o) < 0) {
        for (int i = 0; i < SPAWN_FDS; i++) close(fds[i]);
        reply_error(control, "request", g_usage_msg);
        return 0;
    }
    int direct = o.ns && g_pid_ns_fd >= 0 && g_self_pidfd >= 0;
    int root_ns = direct && o.mounts ? template_for(&o) : -1; /* before the new pid namespace */
    if (direct && unshare(CLONE_NEWPID) < 0) {
        for (int i = 0; i < SPAWN_FDS; i++) close(fds[i]);
        reply_error(control, "unshare pid namespace", strerror(errno));
        return 0;
    }
    /* Blocked until the child handles them: a stop sent at once is not lost. */
    sigset_t stops, was;
    rbjail_stop_signals(&stops);
    sigprocmask(SIG_BLOCK, &stops, &was);
    pid_t me = getpid();
    pid_t pid = fork();
    int fork_errno = errno;
    if (pid == 0) {
        if (direct) spawned_init(&o, fds, root_ns);
        spawned_supervisor(&o, fds, me);
    }
    sigprocmask(SIG_SETMASK, &was, NULL);
    if (direct && setns(g_pid_ns_fd, CLONE_NEWPID) < 0) rc = -1;
    for (int i = 0; i < SPAWN_FDS; i++) close(fds[i]);
    if (pid < 0) {
        reply_error(control, "fork", strerror(fork_errno));
        return rc;
    }
    /* A pidfd lets the worker watch and signal a process that is not its child. */
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    char msg[64];
    snprintf(msg, sizeof msg, "spawned %d", (int)pid);
    rbjail_send_msg(control, msg, pidfd);
    if (g_net.on && pidfd >= 0) {
        g_net.last_pidfd = pidfd; /* watched: the namespace is checked once it exits */
    } else if (pidfd >= 0) {
        close(pidfd);
    } else if (g_net.on) {
        net_renew(); /* cannot tell when it ends: the next jail gets a new namespace */
    }
    return rc;
}

static int run_spawner(struct opts *o) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (o->parent_pid > 0 && getppid() != o->parent_pid) return JAIL_FAULT;
    /* Never the OOM killer's victim: the program is. Its child resets this. */
    set_oom_score_adj("-1000");
    if (open_cgroups(o) < 0 || rbjail_apply_cgroups(o->cgroup_fds, o->n_cgroups) < 0) {
        rbjail_send_error(o->status_fd, "spawner cgroups");
        return JAIL_FAULT;
    }
    for (size_t i = 0; i < o->n_cgroups; i++) close(o->cgroup_fds[i]);
    o->n_cgroups = 0;
    signal(SIGCHLD, SIG_IGN); /* jails are reaped by the kernel */
    for (int i = 0; i < TEMPLATES; i++) g_templates[i].ns_fd = -1;
    g_pid_ns_fd = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    g_self_pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (o->share_net) {
        g_net.host_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        g_net.on = g_net.host_fd >= 0;
        if (g_net.on) net_renew();
    }
    for (;;) {
        /* The namespace is checked (and renewed if used) as soon as the last
         * jail is over, while the worker reads its result. */
        struct pollfd ready[2] = {{.fd = o->status_fd, .events = POLLIN},
                                  {.fd = g_net.last_pidfd, .events = POLLIN}};
        if (poll(ready, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return JAIL_FAULT;
        }
        if (ready[1].revents) net_after_jail(1);
        if (!ready[0].revents) continue;
        if (g_net.last_pidfd >= 0) net_after_jail(0); /* never shared with a running jail */
        int fds[SPAWN_FDS], n_fds;
        ssize_t n = recv_request(o->status_fd, fds, &n_fds);
        if (n <= 0) return 0; /* the worker closed the slot (or died) */
        if (n_fds != SPAWN_FDS) {
            for (int i = 0; i < n_fds; i++) close(fds[i]);
            rbjail_send_msg(o->status_fd, "error spawn request without its 4 fds", -1);
            continue;
        }
        if (spawn_one(o->status_fd, (size_t)n, fds) < 0) return JAIL_FAULT;
    }
}

int main(int argc, char **argv) {
    struct opts o;
    parse_args(argc, argv, &o);
    if (o.probe) return rbjail_probe(o.root_dir);
    close_inherited_fds(o.status_fd);
    if (o.spawner) return run_spawner(&o);
    return run_supervisor(&o, o.parent_pid);
}
