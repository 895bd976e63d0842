/* librbjail-warm.so: a warm pool's zygote for interpreters other than Python.
 *
 * Preloaded (LD_PRELOAD) into an interpreter started inside a zygote's jail
 * with exactly the command line of the executions it serves. The interpreter
 * starts up as usual (its runtime, its standard library, its options) until it
 * first opens the program's file, named by RBJAIL_WARM_TRIGGER: there, inside
 * that open(), this library becomes the zygote. It does in C what the Python
 * zygote (sandbox_workers/pool/zygote_main.py) does before it serves: takes the
 * layer library (librbjail.so) from the fd the worker sends first on the
 * control socket (fd 0), keeps the OOM killer away, holds its own namespaces
 * open, says "ready" with its footprint, and calls rbjail_zygote_serve(). That
 * loop forks each execution's pid 1 and program; the program comes back here,
 * confined (rlimits, uid, seccomp, fresh /work, /tmp, /proc) with the
 * execution's stdio, and the interpreter's open() goes on to the program file
 * the worker wrote into the fresh /work. Everything the interpreter did before
 * that open is done once per zygote, not once per execution.
 *
 * It only works for an interpreter that is single-threaded when it opens its
 * program (fork keeps the calling thread alone) and whose start-up reads
 * nothing of an execution's: Ruby and PHP (see sandbox_workers/pool/__init__.py).
 * The trigger matches the file's base name, relative or under /work, once.
 * RBJAIL_WARM holds "FRESH_NET LOOPBACK" (0 or 1 each). The child removes the
 * three variables from its environment before the program runs. */

#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rbjail_layers.h"

#define WARM_FAULT 125

typedef int (*serve_fn)(const struct rbjail_zygote *, int *);
typedef size_t (*size_fn)(const char *);

static int fired;

/* In a program being set up: pid 1's status socket, where a failure is reported as the
 * jail's own ("error program setup: ..."), never as the program's exit status. */
static int setup_status_fd = -1;

static void die(const char *what) {
    char message[512];
    snprintf(message, sizeof message, "%s: %s", what, errno ? strerror(errno) : "failed");
    if (setup_status_fd >= 0) {
        char report[600];
        int len = snprintf(report, sizeof report, "error program setup: %s", message);
        (void)!send(setup_status_fd, report, (size_t)len, MSG_NOSIGNAL);
    }
    /* The zygote's stderr is the worker's pipe: it reports this tail when "ready" never comes. */
    dprintf(2, "rbjail-warm: %s\n", message);
    _exit(WARM_FAULT);
}

static int receive_library(int control) {
    char msg[64];
    char cmsg[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof msg};
    struct msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cmsg,
                         .msg_controllen = sizeof cmsg};
    ssize_t got = recvmsg(control, &hdr, MSG_CMSG_CLOEXEC);
    struct cmsghdr *c = CMSG_FIRSTHDR(&hdr);
    if (got != 7 || memcmp(msg, "library", 7) != 0 || c == NULL ||
        c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
        c->cmsg_len != CMSG_LEN(sizeof(int))) {
        errno = 0;
        die("expected the layer library first");
    }
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static long status_kb(const char *status, const char *key) {
    const char *at = strstr(status, key);
    return at ? strtol(at + strlen(key), NULL, 10) : 0;
}

static void send_ready(int control) {
    char status[4096] = {0};
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!read(fd, status, sizeof status - 1);
        close(fd);
    }
    char ready[128];
    int len = snprintf(ready, sizeof ready, "ready rss_kb=%ld anon_kb=%ld vsz_kb=%ld",
                       status_kb(status, "VmRSS:"), status_kb(status, "RssAnon:"),
                       status_kb(status, "VmSize:"));
    if (send(control, ready, (size_t)len, 0) != len) die("ready");
}

/* The fds (3 and up) the interpreter held when it became the zygote, and what
 * each was: the program gets a fresh one of the same kind at the same number. */
#define MAX_HELD 64
#define MAX_WATCHED 32
enum held_kind { HELD_OTHER, HELD_PIPE, HELD_EPOLL, HELD_EVENTFD };
struct watched {
    int fd;
    unsigned int events;
    unsigned long long data;
};
struct held_fd {
    int fd;
    enum held_kind kind;
    int status_flags; /* F_GETFL */
    int cloexec;
    unsigned long long id; /* a pipe's inode; an eventfd's count */
    size_t n_watched;      /* an epoll instance's registrations */
    struct watched watched[MAX_WATCHED];
    int fresh; /* in the program: the new object, moved out of the way */
};
static struct held_fd held[MAX_HELD];
static size_t n_held;

/* What /proc/self/fdinfo says of an epoll instance (its watches) or an eventfd (its count). */
static void note_fdinfo(struct held_fd *h) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", h->fd);
    FILE *info = fopen(path, "re");
    if (info == NULL) die(path);
    char line[256];
    while (fgets(line, sizeof line, info) != NULL) {
        struct watched w;
        if (h->kind == HELD_EVENTFD) {
            if (sscanf(line, "eventfd-count: %llx", &h->id) == 1) break;
            continue;
        }
        if (sscanf(line, "tfd: %d events: %x data: %llx", &w.fd, &w.events, &w.data) != 3)
            continue;
        if (h->n_watched == MAX_WATCHED) {
            errno = 0;
            die("an epoll instance of the interpreter watches too many fds");
        }
        h->watched[h->n_watched++] = w;
    }
    fclose(info);
}

static void note_held_fds(void) {
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL) die("/proc/self/fd");
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        int fd = atoi(entry->d_name);
        if (fd < 3 || fd == dirfd(dir)) continue;
        if (n_held == MAX_HELD) {
            errno = 0;
            die("the interpreter holds too many fds");
        }
        struct held_fd *h = &held[n_held++];
        memset(h, 0, sizeof *h);
        h->fd = fd;
        h->status_flags = fcntl(fd, F_GETFL);
        h->cloexec = (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
        struct stat st;
        char path[64], target[64] = {0};
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        (void)!readlink(path, target, sizeof target - 1);
        if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
            h->kind = HELD_PIPE;
            h->id = st.st_ino;
        } else if (strcmp(target, "anon_inode:[eventpoll]") == 0) {
            h->kind = HELD_EPOLL;
        } else if (strcmp(target, "anon_inode:[eventfd]") == 0) {
            h->kind = HELD_EVENTFD;
        }
    }
    closedir(dir);
    for (size_t i = 0; i < n_held; i++) {
        if (held[i].kind == HELD_EPOLL || held[i].kind == HELD_EVENTFD) note_fdinfo(&held[i]);
    }
}

/* Past every held fd: where fresh objects wait to be placed. */
static int out_of_the_way(int fd) {
    if (fd < 0) die("a fresh fd");
    int above = 3;
    for (size_t i = 0; i < n_held; i++)
        if (held[i].fd >= above) above = held[i].fd + 1;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, above);
    if (moved < 0) die("F_DUPFD");
    close(fd);
    return moved;
}

/* A forked child shares its parent's fds; the program has none of the zygote's
 * (they would be channels between executions). So each number the interpreter
 * held is, in the program, a fresh object of its kind with the same flags: a
 * pipe for each pipe (both ends where the interpreter held both, as for the
 * wake-up pipes of Ruby's and Racket's event loops), an epoll instance watching
 * the same fds, an eventfd with the same count, /dev/null for anything else.
 * A runtime that closes or replaces its own finds them open; one that goes on
 * using them finds what it made, empty, and reaching no one else. */
static void fresh_held_fds(void) {
    for (size_t i = 0; i < n_held; i++) {
        struct held_fd *h = &held[i];
        if (h->fresh) continue; /* the other end of a pipe already made */
        if (h->kind == HELD_PIPE) {
            int ends[2];
            if (pipe2(ends, O_CLOEXEC) < 0) die("pipe2");
            ends[0] = out_of_the_way(ends[0]);
            ends[1] = out_of_the_way(ends[1]);
            int used[2] = {0, 0};
            for (size_t j = i; j < n_held; j++) {
                struct held_fd *end = &held[j];
                if (end->kind != HELD_PIPE || end->id != h->id || end->fresh) continue;
                int side = (end->status_flags & O_ACCMODE) == O_WRONLY;
                end->fresh = used[side] ? out_of_the_way(dup(ends[side])) : ends[side];
                used[side] = 1;
            }
            for (int side = 0; side < 2; side++)
                if (!used[side]) close(ends[side]);
        } else if (h->kind == HELD_EPOLL) {
            h->fresh = out_of_the_way(epoll_create1(EPOLL_CLOEXEC));
        } else if (h->kind == HELD_EVENTFD) {
            h->fresh = out_of_the_way(eventfd((unsigned int)h->id, EFD_CLOEXEC));
        } else {
            h->fresh = out_of_the_way(open("/dev/null", O_RDONLY | O_CLOEXEC));
        }
    }
    for (size_t i = 0; i < n_held; i++) {
        struct held_fd *h = &held[i];
        if (dup3(h->fresh, h->fd, h->cloexec ? O_CLOEXEC : 0) < 0) die("dup3");
        close(h->fresh);
        if (h->kind != HELD_OTHER && fcntl(h->fd, F_SETFL, h->status_flags) < 0) die("F_SETFL");
    }
    for (size_t i = 0; i < n_held; i++) {
        struct held_fd *h = &held[i];
        for (size_t k = 0; k < h->n_watched; k++) {
            struct epoll_event event = {.events = h->watched[k].events};
            event.data.u64 = h->watched[k].data;
            /* A watched fd the program does not have (or cannot watch) stays unwatched. */
            (void)epoll_ctl(h->fd, EPOLL_CTL_ADD, h->watched[k].fd, &event);
        }
    }
}

/* Become the zygote; returns only in an execution's program, confined. */
static void become_zygote(void) {
    int control = 0;
    const char *settings = getenv("RBJAIL_WARM");
    int fresh_net = 0, loopback = 0;
    if (settings == NULL || sscanf(settings, "%d %d", &fresh_net, &loopback) != 2) {
        errno = 0;
        die("RBJAIL_WARM is not \"FRESH_NET LOOPBACK\"");
    }
    int libfd = receive_library(control);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", libfd);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        dprintf(2, "rbjail-warm: %s\n", dlerror());
        _exit(WARM_FAULT);
    }
    close(libfd);
    note_held_fds();
    serve_fn serve = (serve_fn)dlsym(lib, "rbjail_zygote_serve");
    size_fn struct_size = (size_fn)dlsym(lib, "rbjail_struct_size");
    if (serve == NULL || struct_size == NULL ||
        struct_size("zygote") != sizeof(struct rbjail_zygote)) {
        errno = 0;
        die("librbjail.so does not match this library");
    }
    /* Never the OOM killer's victim (its programs reset their own score);
     * best effort, as in the Python zygote. */
    int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (oom >= 0) {
        (void)!write(oom, "-1000", 5);
        close(oom);
    }
    static const char *const names[] = {"mnt", "pid", "ipc", "net"};
    int ns[4];
    size_t n = fresh_net ? 4 : 3;
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/proc/self/ns/%s", names[i]);
        ns[i] = open(path, O_RDONLY | O_CLOEXEC);
        if (ns[i] < 0) die(path);
    }
    /* Children inherit the interpreter's C streams: nothing may be buffered in them. */
    fflush(NULL);
    unsetenv("LD_PRELOAD");
    unsetenv("RBJAIL_WARM_TRIGGER");
    unsetenv("RBJAIL_WARM");
    unsetenv("RBJAIL_WARM_ON_READ");
    unsetenv("RBJAIL_WARM_SHIM");
    send_ready(control);
    struct rbjail_zygote z = {
        .control_fd = control, .ns_fds = ns, .n_ns_fds = n,
        .fresh_net = fresh_net, .loopback = loopback,
    };
    int status_fd = -1;
    int memfd = serve(&z, &status_fd);
    if (memfd < 0) _exit(0); /* the worker closed this pool member */
    /* In the program: the request's interpreter part is for Python's zygote. */
    close(memfd);
    setup_status_fd = status_fd;
    fresh_held_fds();
    /* R made its session's temporary directory at start-up, in the zygote's /tmp:
     * the program's /tmp is a fresh one, where it makes it again (as its own uid). */
    const char *r_tmp = getenv("R_SESSION_TMPDIR");
    if (r_tmp != NULL && mkdir(r_tmp, 0700) < 0 && errno != EEXIST) die("R_SESSION_TMPDIR");
    setup_status_fd = -1;
    close(status_fd);
}

/* Ruby forks (Process.fork) after stopping its timer thread, which owns the
 * process's POSIX timer and signal pipes, and restarts it in the child, where it
 * makes its own; the child then forgets the parent's threads and reseeds the
 * default random generator (rb_thread_atfork). Only rb_thread_atfork is
 * exported, but exec does the same stop and restart around execve (before_exec,
 * after_exec, for an exec that fails): so Ruby is asked to exec FORK_POINT, and
 * that execve is where this process becomes the zygote. In the program it fails
 * (ENOENT), Ruby restarts its timer thread as the program's own, and the exec's
 * error is rescued. The zygote's pid differs from the program's (see
 * interpreter_in_a_child), so Ruby does not take the zygote's pipes for its own. */
#define FORK_POINT "/.rbjail/fork-point"
static int at_fork_point; /* Ruby is exec'ing FORK_POINT */
static int in_program;

static int ruby_becomes_zygote(void) {
    typedef unsigned long (*eval_fn)(const char *, int *);
    eval_fn eval = (eval_fn)dlsym(RTLD_DEFAULT, "rb_eval_string_protect");
    void (*atfork)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "rb_thread_atfork");
    if (eval == NULL || atfork == NULL) return 0; /* not Ruby */
    int state = 0;
    at_fork_point = 1;
    eval("begin; exec('" FORK_POINT "'); rescue SystemCallError; end", &state);
    if (!in_program || state != 0) {
        errno = 0;
        die("ruby: its exec did not reach the fork point");
    }
    atfork();
    return 1;
}

static int fork_point(const char *path) {
    if (!at_fork_point || strcmp(path, FORK_POINT) != 0) return 0;
    at_fork_point = 0;
    become_zygote();
    in_program = 1;
    return 1;
}

/* Before the interpreter's main(): the interpreter goes on in a child, and this
 * process only waits for it and ends as it ended. A runtime that remembers which
 * pid made its process-wide resources (Ruby's timer and signal pipe: "owner ==
 * getpid()") would otherwise take the zygote's for its own in every program,
 * which is pid 2 of its pid namespace as the zygote's interpreter would be in
 * its jail; it then tears down, at exit, what the program never had (Ruby
 * crashes). As pid 3, the zygote is nobody's program. */
__attribute__((constructor)) static void interpreter_in_a_child(void) {
    /* Once: a launcher that execs the interpreter (Rscript runs R) loads this again. */
    if (getenv("RBJAIL_WARM_TRIGGER") == NULL || getenv("RBJAIL_WARM_SHIM") != NULL) return;
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        setenv("RBJAIL_WARM_SHIM", "1", 1);
        return;
    }
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) die("waitpid");
    if (WIFSIGNALED(status)) {
        signal(WTERMSIG(status), SIG_DFL);
        raise(WTERMSIG(status));
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : WARM_FAULT);
}

/* Whether `path` is the trigger (its base name, relative or under /work), the first time. */
static int is_trigger(const char *path) {
    if (fired || path == NULL) return 0;
    const char *trigger = getenv("RBJAIL_WARM_TRIGGER");
    if (trigger == NULL) return 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strcmp(base, trigger) != 0) return 0;
    return path[0] != '/' || strncmp(path, "/work/", 6) == 0;
}

static void maybe_fire(const char *path) {
    if (!is_trigger(path)) return;
    fired = 1;
    int saved = errno;
    if (!ruby_becomes_zygote()) become_zygote();
    errno = saved;
}

static mode_t mode_arg(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef FILE *(*fopen_fn)(const char *, const char *);

/* The next definition of `name` (libc's), looked up once. */
#define NEXT(type, name) \
    static type real; \
    if (real == NULL) real = (type)dlsym(RTLD_NEXT, name)

/* open() and openat() and their 64-bit names: the trigger is looked at, then libc's
 * own runs (its mode argument only when the flags say it has one). */
#define OPEN_LIKE(name, type, ...)                                      \
    {                                                                    \
        va_list ap;                                                      \
        va_start(ap, flags);                                             \
        mode_t mode = mode_arg(flags, ap);                               \
        va_end(ap);                                                      \
        NEXT(type, name);                                                \
        maybe_fire(path);                                                \
        return real(__VA_ARGS__, mode);                                  \
    }

int open(const char *path, int flags, ...) OPEN_LIKE("open", open_fn, path, flags)
int open64(const char *path, int flags, ...) OPEN_LIKE("open64", open_fn, path, flags)
int openat(int dirfd, const char *path, int flags, ...)
    OPEN_LIKE("openat", openat_fn, dirfd, path, flags)
int openat64(int dirfd, const char *path, int flags, ...)
    OPEN_LIKE("openat64", openat_fn, dirfd, path, flags)

/* RBJAIL_WARM_ON_READ: the interpreter opens its program before it has started up
 * (R opens --file= before it loads its packages) and reads it after. Its fopen of the
 * trigger gets a stream whose first read is where this process becomes the zygote;
 * the program then reads the file the worker wrote into its /work. */
struct deferred {
    char path[4096];
    int fd;
};

static ssize_t deferred_read(void *cookie, char *buf, size_t size) {
    struct deferred *d = cookie;
    if (d->fd < 0) {
        if (!in_program) {
            become_zygote();
            in_program = 1;
        }
        NEXT(open_fn, "open");
        d->fd = real(d->path, O_RDONLY | O_CLOEXEC);
        if (d->fd < 0) return -1;
    }
    return read(d->fd, buf, size);
}

static int deferred_seek(void *cookie, off64_t *offset, int whence) {
    struct deferred *d = cookie;
    if (d->fd < 0) {
        errno = ESPIPE;
        return -1;
    }
    off64_t at = lseek64(d->fd, *offset, whence);
    if (at < 0) return -1;
    *offset = at;
    return 0;
}

static int deferred_close(void *cookie) {
    struct deferred *d = cookie;
    int rc = d->fd >= 0 ? close(d->fd) : 0;
    free(d);
    return rc;
}

static FILE *open_stream(fopen_fn real, const char *path, const char *mode) {
    if (getenv("RBJAIL_WARM_ON_READ") == NULL || strcmp(mode, "r") != 0 || !is_trigger(path)) {
        maybe_fire(path);
        return real(path, mode);
    }
    fired = 1;
    struct deferred *d = calloc(1, sizeof *d);
    if (d == NULL || strlen(path) >= sizeof d->path) {
        errno = 0;
        die("the deferred program file");
    }
    strcpy(d->path, path);
    d->fd = -1;
    cookie_io_functions_t io = {.read = deferred_read, .seek = deferred_seek, .close = deferred_close};
    return fopencookie(d, "r", io);
}

FILE *fopen(const char *path, const char *mode) {
    NEXT(fopen_fn, "fopen");
    return open_stream(real, path, mode);
}

FILE *fopen64(const char *path, const char *mode) {
    NEXT(fopen_fn, "fopen64");
    return open_stream(real, path, mode);
}

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);

/* Ruby's exec of FORK_POINT (see ruby_becomes_zygote) never reaches the kernel. */
#define EXEC_LIKE(name, type, ...)        \
    {                                      \
        NEXT(type, name);                  \
        if (fork_point(path)) {            \
            errno = ENOENT;                \
            return -1;                     \
        }                                  \
        return real(__VA_ARGS__);          \
    }

int execve(const char *path, char *const argv[], char *const envp[])
    EXEC_LIKE("execve", execve_fn, path, argv, envp)
int execv(const char *path, char *const argv[]) EXEC_LIKE("execv", execv_fn, path, argv)
