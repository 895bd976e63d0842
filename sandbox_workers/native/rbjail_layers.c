/* rbjail layers: the isolation of one untrusted execution, one function per layer.
 *
 * Compiled into the rbjail launcher and into librbjail.so (for a warm
 * interpreter's forked children). Only syscalls: no helper processes, no shell.
 */
#define _GNU_SOURCE
#include "rbjail_layers.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>

#ifndef MS_NOSYMFOLLOW
#define MS_NOSYMFOLLOW 256
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS 0x80000000U
#endif
#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static __thread char errbuf[512];

const char *rbjail_error(void) { return errbuf; }

/* Record "what: strerror" and return -1 with errno preserved. */
static int fail(const char *what, const char *arg) {
    int saved = errno;
    snprintf(errbuf, sizeof errbuf, "%s%s%s: %s", what, arg ? " " : "", arg ? arg : "",
             strerror(saved));
    errno = saved;
    return -1;
}

static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ------------------------------------------------------------------ namespaces */

int rbjail_unshare_namespaces(int new_pid, int new_net) {
    /* The pid namespace applies to children: the caller forks the jail's init next. */
    int flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
    if (new_pid) flags |= CLONE_NEWPID;
    if (new_net) flags |= CLONE_NEWNET;
    if (unshare(flags) < 0) return fail("unshare", NULL);
    return 0;
}

/* FNV-1a of what a net namespace shows of its use: its SNMP counters (every
 * TCP/UDP/ICMP packet sent or received in it goes through IP) and how many
 * sockets of any family are alive in it (sockstat's first line). A socket the
 * last execution left alive without sending a packet counts: one kept in
 * flight in a unix socket of its own outlives its processes until the kernel's
 * garbage collector runs, holding its abstract name or its port. */
static const char *const net_files[RBJAIL_NET_FILES] = {
    "/proc/self/net/snmp", "/proc/self/net/snmp6", "/proc/self/net/sockstat"};

/* Hashes the files open in fd (-1: absent, no IPv6). */
static unsigned long long net_traces_of(const int fd[RBJAIL_NET_FILES]) {
    unsigned long long h = 1469598103934665603ULL;
    char buf[8192];
    for (size_t i = 0; i < RBJAIL_NET_FILES; i++) {
        if (fd[i] < 0) continue;
        /* sockstat: "sockets: used N" only, the rest holds host-wide memory counts. */
        int first_line = i == RBJAIL_NET_FILES - 1;
        ssize_t n;
        for (off_t at = 0; (n = pread(fd[i], buf, sizeof buf, at)) > 0; at += n) {
            ssize_t k = 0;
            for (; k < n && !(first_line && buf[k] == '\n'); k++)
                h = (h ^ (unsigned char)buf[k]) * 1099511628211ULL;
            if (k < n) break;
        }
    }
    return h;
}

static void net_files_open(int fd[RBJAIL_NET_FILES]) {
    for (size_t i = 0; i < RBJAIL_NET_FILES; i++) fd[i] = open(net_files[i], O_RDONLY | O_CLOEXEC);
}

static void net_files_close(int fd[RBJAIL_NET_FILES]) {
    for (size_t i = 0; i < RBJAIL_NET_FILES; i++) {
        if (fd[i] >= 0) close(fd[i]);
        fd[i] = -1;
    }
}

unsigned long long rbjail_net_traces(void) {
    int fd[RBJAIL_NET_FILES];
    net_files_open(fd);
    unsigned long long h = net_traces_of(fd);
    net_files_close(fd);
    return h;
}

void rbjail_net_watch(struct rbjail_net_watch *w) {
    net_files_close(w->fd);
    net_files_open(w->fd);
    w->clean = net_traces_of(w->fd);
}

int rbjail_net_used(const struct rbjail_net_watch *w) {
    return net_traces_of(w->fd) != w->clean;
}

int rbjail_net_renew(struct rbjail_net_watch *w, int loopback) {
    if (unshare(CLONE_NEWNET) < 0) return fail("unshare", "net");
    if (loopback && rbjail_loopback_up() < 0) return -1;
    if (w != NULL) rbjail_net_watch(w);
    return 0;
}

int rbjail_set_hostname(const char *name) {
    if (sethostname(name, strlen(name)) < 0) return fail("sethostname", name);
    return 0;
}

int rbjail_loopback_up(void) {
    /* A fresh net namespace has only "lo", down. Up, it lets programs talk to
     * themselves over 127.0.0.1; nothing else is reachable either way. */
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail("socket", "lo");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    if (rc < 0) {
        fail("ioctl", "lo up");
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* ------------------------------------------------------------------ file system */

/* Walk `rel` (relative, '/'-separated) below dirfd, creating missing directories
 * with mode 0755 (so the unprivileged uid can traverse) and refusing to follow
 * any symlink: a bind target must never resolve outside the new root. Returns
 * an fd of the directory holding the last component (or of `rel` itself when
 * include_last), or -1. */
static int walk_dirs(int dirfd, const char *rel, int include_last, const char **last) {
    char buf[4096];
    if (strlen(rel) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return fail("path", rel);
    }
    strcpy(buf, rel);
    int fd = dup(dirfd);
    if (fd < 0) return fail("dup", NULL);
    char *save = NULL;
    char *comp = strtok_r(buf, "/", &save);
    while (comp != NULL) {
        char *next = strtok_r(NULL, "/", &save);
        if (next == NULL && !include_last) {
            if (last) *last = rel + (comp - buf);
            return fd;
        }
        if (strcmp(comp, "..") == 0 || strcmp(comp, ".") == 0) {
            close(fd);
            errno = EINVAL;
            return fail("path component", rel);
        }
        if (mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
            close(fd);
            return fail("mkdir", rel);
        }
        int sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        if (sub < 0) return fail("open (symlink in target path?)", rel);
        fd = sub;
        comp = next;
    }
    if (last) *last = NULL;
    return fd;
}

static int mkdirs(int rootfd, const char *rel) {
    int fd = walk_dirs(rootfd, rel, 1, NULL);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

/* Create an empty file (mount point for a file bind) unless one is there. */
static int touch(int rootfd, const char *rel) {
    const char *name = NULL;
    int dfd = walk_dirs(rootfd, rel, 0, &name);
    if (dfd < 0) return -1;
    struct stat st;
    int rc = 0;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!S_ISREG(st.st_mode)) {
            errno = EEXIST;
            rc = fail("mount point is not a file", rel);
        }
    } else {
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) rc = fail("create", rel);
        else close(fd);
    }
    close(dfd);
    return rc;
}

static const char *strip_slash(const char *p) {
    while (*p == '/') p++;
    return p;
}

static int bind_path(int rootfd, const char *host, const char *target, int writable) {
    struct stat st;
    if (stat(host, &st) < 0) return fail("stat", host);
    const char *rel = strip_slash(target);
    if (*rel == '\0') {
        errno = EINVAL;
        return fail("bind target", target);
    }
    int rc = S_ISDIR(st.st_mode) ? mkdirs(rootfd, rel) : touch(rootfd, rel);
    if (rc < 0) return -1;
    /* Not MS_REC: sub-mounts of the source stay hidden instead of staying writable. */
    if (mount(host, rel, NULL, MS_BIND, NULL) < 0) return fail("bind", host);
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV;
    if (!writable) flags |= MS_RDONLY;
    if (mount(NULL, rel, NULL, flags, NULL) < 0) return fail("remount", target);
    return 0;
}

static int mirror(int rootfd, const char *host, const char *target) {
    struct stat st;
    if (lstat(host, &st) < 0) {
        if (errno == ENOENT) return 0;
        return fail("lstat", host);
    }
    if (!S_ISLNK(st.st_mode)) return bind_path(rootfd, host, target, 0);
    char link[4096];
    ssize_t n = readlink(host, link, sizeof link - 1);
    if (n < 0) return fail("readlink", host);
    link[n] = '\0';
    const char *name = NULL;
    int dfd = walk_dirs(rootfd, strip_slash(target), 0, &name);
    if (dfd < 0) return -1;
    int rc = symlinkat(link, dfd, name);
    close(dfd);
    if (rc < 0 && errno != EEXIST) return fail("symlink", target);
    return 0;
}

static int write_file(int rootfd, const char *rel, const char *content) {
    const char *name = NULL;
    int dfd = walk_dirs(rootfd, rel, 0, &name);
    if (dfd < 0) return -1;
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    close(dfd);
    if (fd < 0) return fail("create", rel);
    int rc = write_all(fd, content, strlen(content));
    close(fd);
    return rc < 0 ? fail("write", rel) : 0;
}

static int synthetic_etc(int rootfd, uid_t uid, gid_t gid) {
    /* Never the host's passwd/shadow: only the two identities that exist in here. */
    char passwd[512], group[256];
    snprintf(passwd, sizeof passwd,
             "root:x:0:0:root:/root:/usr/sbin/nologin\n"
             "%s:x:%u:%u:sandbox:/work:/usr/sbin/nologin\n",
             uid == 65534 ? "nobody" : "sandbox", (unsigned)uid, (unsigned)gid);
    snprintf(group, sizeof group, "root:x:0:\n%s:x:%u:\n", gid == 65534 ? "nogroup" : "sandbox",
             (unsigned)gid);
    if (write_file(rootfd, "etc/passwd", passwd) < 0) return -1;
    if (write_file(rootfd, "etc/group", group) < 0) return -1;
    return write_file(rootfd, "etc/hosts", "127.0.0.1 localhost sandbox\n::1 localhost\n");
}

static int mount_tmpfs(const char *rel, unsigned long flags, const char *opts) {
    if (mount("rbjail", rel, "tmpfs", flags, opts) < 0) return fail("mount tmpfs", rel);
    return 0;
}

struct devnode {
    const char *name;
    unsigned major, minor;
};

static int populate_dev(int rootfd) {
    static const struct devnode nodes[] = {
        {"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9},
    };
    static const char *const links[][2] = {
        {"fd", "/proc/self/fd"},
        {"stdin", "/proc/self/fd/0"},
        {"stdout", "/proc/self/fd/1"},
        {"stderr", "/proc/self/fd/2"},
    };
    if (mkdirs(rootfd, "dev") < 0) return -1;
    if (mount_tmpfs("dev", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755") < 0)
        return -1;
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "dev/%s", nodes[i].name);
        if (mknodat(rootfd, rel, S_IFCHR | 0666, makedev(nodes[i].major, nodes[i].minor)) < 0)
            return fail("mknod", rel);
        if (fchmodat(rootfd, rel, 0666, 0) < 0) return fail("chmod", rel);
    }
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "dev/%s", links[i][0]);
        if (symlinkat(links[i][1], rootfd, rel) < 0) return fail("symlink", rel);
    }
    /* The mount point of a private /dev/shm (own_mounts). */
    if (mkdirs(rootfd, "dev/shm") < 0) return -1;
    if (mount(NULL, "dev", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) < 0)
        return fail("remount", "/dev");
    return 0;
}

static int mount_proc(int rootfd) {
    if (mkdirs(rootfd, "proc") < 0) return -1;
    unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    /* hidepid: the jail's root-owned init (pid 1) stays invisible to the program. */
    if (mount("proc", "proc", "proc", flags, "hidepid=invisible") == 0) return 0;
    if (mount("proc", "proc", "proc", flags, "hidepid=2") == 0) return 0;
    return fail("mount", "/proc");
}

/* A jail's own file systems, on the mount points its root holds (the cwd):
 * /work, /tmp, a private /dev/shm (POSIX semaphores, so multiprocessing, need
 * one; the host's must not leak) and a /proc of the caller's pid namespace. */
static int own_mounts(int rootfd, const struct rbjail_fs *fs) {
    char opts[160];
    snprintf(opts, sizeof opts, "size=%lum,nr_inodes=%lu,mode=0755,uid=%u,gid=%u", fs->work_mb,
             fs->inodes, (unsigned)fs->uid, (unsigned)fs->gid);
    if (mount_tmpfs("work", MS_NOSUID | MS_NODEV, opts) < 0) return -1;
    snprintf(opts, sizeof opts, "size=%lum,nr_inodes=%lu,mode=1777", fs->tmp_mb, fs->inodes);
    if (mount_tmpfs("tmp", MS_NOSUID | MS_NODEV, opts) < 0) return -1;
    if (mount_tmpfs("dev/shm", MS_NOSUID | MS_NODEV, opts) < 0) return -1;
    return mount_proc(rootfd);
}

static int system_mounts(int rootfd, const struct rbjail_fs *fs) {
    for (size_t i = 0; i < fs->n_mounts; i++) {
        const struct rbjail_mount *m = &fs->mounts[i];
        int rc = m->kind == RBJAIL_MIRROR ? mirror(rootfd, m->host, m->target)
                                          : bind_path(rootfd, m->host, m->target, m->kind == RBJAIL_RW);
        if (rc < 0) return -1;
    }
    return 0;
}

/* A new root tmpfs on fs->root_dir, made the cwd, with everything but the
 * jail's own file systems: the system mounts, /etc, /dev and the mount points
 * of /work, /tmp, /dev/shm and /proc. Its fd, or -1. */
static int shared_root(const struct rbjail_fs *fs) {
    /* Nothing done below may propagate back to the host's mount table. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) return fail("make-rprivate", "/");
    if (mount_tmpfs(fs->root_dir, MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096,mode=0755") < 0)
        return -1;
    if (chdir(fs->root_dir) < 0) return fail("chdir", fs->root_dir);
    int rootfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) return fail("open", fs->root_dir);
    int rc = system_mounts(rootfd, fs);
    if (rc == 0) rc = synthetic_etc(rootfd, fs->uid, fs->gid);
    if (rc == 0 && (mkdirs(rootfd, "work") < 0 || mkdirs(rootfd, "tmp") < 0)) rc = -1;
    if (rc == 0) rc = populate_dev(rootfd);
    if (rc == 0 && mkdirs(rootfd, "proc") < 0) rc = -1;
    if (rc < 0) {
        close(rootfd);
        return -1;
    }
    return rootfd;
}

static int enter_cwd_as_root(void) {
    /* pivot_root(".", ".") stacks the old root on the new one; detaching it
     * leaves no path back to the host file system. */
    if (syscall(SYS_pivot_root, ".", ".") < 0) return fail("pivot_root", NULL);
    if (umount2(".", MNT_DETACH) < 0) return fail("umount", "old root");
    if (chdir("/") < 0) return fail("chdir", "/");
    /* Only /work, /tmp and /dev/shm stay writable. */
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        return fail("remount", "/");
    return 0;
}

int rbjail_build_root(const struct rbjail_fs *fs) {
    int rootfd = shared_root(fs);
    if (rootfd < 0) return -1;
    int rc = own_mounts(rootfd, fs);
    close(rootfd);
    if (rc == 0) rc = enter_cwd_as_root();
    if (rc == 0 && chdir("/work") < 0) rc = fail("chdir", "/work");
    return rc;
}

int rbjail_make_template(const struct rbjail_fs *fs) {
    int rootfd = shared_root(fs);
    if (rootfd < 0) return -1;
    close(rootfd);
    return enter_cwd_as_root();
}

/* ------------------------------------------------------------------ per-process layers */

int rbjail_apply_cgroups(const int *fds, size_t n) {
    for (size_t i = 0; i < n; i++) {
        /* "0" is the writing process itself, whatever pid namespace it is in. */
        if (pwrite(fds[i], "0\n", 2, 0) < 0) return fail("join cgroup", NULL);
    }
    return 0;
}

int rbjail_apply_cgroupns(void) {
    /* After joining: the program's cgroup becomes its "/", host paths stay hidden. */
    if (unshare(CLONE_NEWCGROUP) < 0) return fail("unshare", "cgroup ns");
    return 0;
}

int rbjail_reset_oom_score(void) {
    /* Inherited -1000 would make the program unkillable by the OOM killer. */
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return fail("open", "/proc/self/oom_score_adj");
    int rc = write_all(fd, "0", 1);
    close(fd);
    return rc < 0 ? fail("write", "oom_score_adj") : 0;
}

int rbjail_apply_rlimits(const struct rbjail_rlimit *limits, size_t n) {
    for (size_t i = 0; i < n; i++) {
        struct rlimit rl;
        rl.rlim_cur = limits[i].soft == ~0ULL ? RLIM_INFINITY : (rlim_t)limits[i].soft;
        rl.rlim_max = limits[i].hard == ~0ULL ? RLIM_INFINITY : (rlim_t)limits[i].hard;
        if (setrlimit(limits[i].resource, &rl) < 0) {
            char num[16];
            snprintf(num, sizeof num, "%d", limits[i].resource);
            return fail("setrlimit", num);
        }
    }
    return 0;
}

/* Set once this process emptied its bounding set: a set never grows again, so
 * every process forked after that (a session's programs) knows it is empty
 * without reading it 41 times. */
static int bounding_set_empty;

int rbjail_drop_bounding_set(void) {
    /* Each drop is a new set of credentials (~1 us); reading is not. A process
     * whose parent already emptied the set (a session's init) skips both. */
    if (bounding_set_empty) return 0;
    for (int cap = 0; cap <= 63; cap++) {
        int held = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (held < 0 && errno == EINVAL) break; /* past the kernel's last capability */
        if (held == 0) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) return fail("capbset drop", NULL);
    }
    bounding_set_empty = 1;
    return 0;
}

int rbjail_drop_capabilities(void) {
    /* Empty the bounding set so no later exec can regain a capability, then the
     * ambient set; setresuid to a non-zero uid clears the rest. */
    if (rbjail_drop_bounding_set() < 0) return -1;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return fail("ambient caps clear", NULL);
    return 0;
}

int rbjail_apply_uid(uid_t uid, gid_t gid) {
    if (setgroups(0, NULL) < 0) return fail("setgroups", NULL);
    if (setresgid(gid, gid, gid) < 0) return fail("setresgid", NULL);
    if (setresuid(uid, uid, uid) < 0) return fail("setresuid", NULL);
    uid_t r, e, s;
    if (getresuid(&r, &e, &s) < 0 || r != uid || e != uid || s != uid) {
        errno = EPERM;
        return fail("uid check", NULL);
    }
    return 0;
}

int rbjail_apply_no_new_privs(void) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return fail("no_new_privs", NULL);
    return 0;
}

/* Syscalls no judged program needs and that widen the kernel attack surface. */
static const int denied_eperm[] = {
    SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_mount, SYS_umount2,
    SYS_pivot_root, SYS_chroot, SYS_unshare, SYS_setns, SYS_keyctl, SYS_add_key,
    SYS_request_key, SYS_bpf, SYS_perf_event_open, SYS_kexec_load, SYS_kexec_file_load,
    SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_swapon, SYS_swapoff, SYS_reboot,
    SYS_userfaultfd, SYS_open_by_handle_at, SYS_name_to_handle_at, SYS_quotactl, SYS_acct,
    SYS_syslog, SYS_vhangup, SYS_iopl, SYS_ioperm, SYS_lookup_dcookie, SYS_fanotify_init,
    SYS_settimeofday, SYS_clock_settime, SYS_clock_adjtime, SYS_adjtimex, SYS_sethostname,
    SYS_setdomainname, SYS_uselib, SYS_ustat, SYS_sysfs, SYS_kcmp, SYS_pidfd_getfd,
    SYS_move_mount, SYS_open_tree, SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_fspick,
    SYS_mount_setattr, SYS_quotactl_fd,
};

/* ENOSYS, not EPERM: libraries take it as "old kernel" and fall back (glibc
 * pthread_create from clone3 to clone, libuv from io_uring to threads). */
static const int denied_enosys[] = {
    SYS_clone3, SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
};

/* Syscall numbers above this (newer than this filter) are refused with ENOSYS. */
#define RBJAIL_LAST_KNOWN_SYSCALL 462

#define NS_CLONE_FLAGS                                                                       \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |          \
     CLONE_NEWPID | CLONE_NEWNET)

#define ARG_LO(i) (offsetof(struct seccomp_data, args) + (i) * sizeof(__u64))

static struct sock_filter stmt(__u16 code, __u32 k) {
    struct sock_filter s = BPF_STMT(code, k);
    return s;
}

static struct sock_filter jump(__u16 code, __u32 k, __u8 jt, __u8 jf) {
    struct sock_filter s = BPF_JUMP(code, k, jt, jf);
    return s;
}

#define RET(v) stmt(BPF_RET | BPF_K, (v))
#define DENY(e) RET(SECCOMP_RET_ERRNO | ((__u32)(e) & SECCOMP_RET_DATA))
#define ALLOW RET(SECCOMP_RET_ALLOW)
#define LOAD(off) stmt(BPF_LD | BPF_W | BPF_ABS, (__u32)(off))
#define JEQ(k, t, f) jump(BPF_JMP | BPF_JEQ | BPF_K, (__u32)(k), (t), (f))

struct prog {
    struct sock_filter f[256];
    size_t n;
    int too_far; /* a jump past what BPF's 8-bit offsets reach */
};

static void emit(struct prog *p, struct sock_filter ins) { p->f[p->n++] = ins; }

/* clone(2) is what fork and threads use: allowed, except with namespace flags. */
static void clone_rule(struct prog *p) {
    emit(p, LOAD(ARG_LO(0)));
    emit(p, jump(BPF_JMP | BPF_JSET | BPF_K, NS_CLONE_FLAGS, 0, 1));
    emit(p, DENY(EPERM));
    emit(p, ALLOW);
}

/* socket(2): only unix, netlink and IP families; no raw IP. No AF_PACKET, and
 * no AF_VSOCK, which is not confined by the net namespace (the hypervisor). */
static void socket_rule(struct prog *p) {
    emit(p, LOAD(ARG_LO(0)));        /* +0 */
    emit(p, JEQ(AF_UNIX, 8, 0));     /* +1 -> +10 */
    emit(p, JEQ(AF_NETLINK, 7, 0));  /* +2 -> +10 */
    emit(p, JEQ(AF_INET, 2, 0));     /* +3 -> +6 */
    emit(p, JEQ(AF_INET6, 1, 0));    /* +4 -> +6 */
    emit(p, DENY(EAFNOSUPPORT));     /* +5 */
    emit(p, LOAD(ARG_LO(1)));        /* +6 */
    emit(p, stmt(BPF_ALU | BPF_AND | BPF_K, 0xf)); /* +7: SOCK_TYPE_MASK */
    emit(p, JEQ(SOCK_RAW, 0, 1));    /* +8 */
    emit(p, DENY(EPERM));            /* +9 */
    emit(p, ALLOW);                  /* +10 */
}

/* personality(2): only the query and the default persona. */
static void personality_rule(struct prog *p) {
    emit(p, LOAD(ARG_LO(0)));
    emit(p, JEQ(0xffffffffU, 2, 0));
    emit(p, JEQ(0, 1, 0));
    emit(p, DENY(EPERM));
    emit(p, ALLOW);
}

/* What the filter does with a syscall it names: refuses it with ``err``, or, when
 * that is 0, runs ``check`` on its arguments (a block that always returns). */
struct rule {
    int nr;
    int err;
    void (*check)(struct prog *);
};

#define MAX_RULES 64

static size_t rule_len(const struct rule *r) {
    if (r->err != 0) return 1;
    struct prog scratch = {.n = 0};
    r->check(&scratch);
    return scratch.n;
}

static int by_nr(const void *a, const void *b) {
    return ((const struct rule *)a)->nr - ((const struct rule *)b)->nr;
}

static size_t collect_rules(struct rule *rules) {
    size_t n = 0;
    for (size_t i = 0; i < sizeof denied_eperm / sizeof denied_eperm[0]; i++)
        rules[n++] = (struct rule){.nr = denied_eperm[i], .err = EPERM};
    for (size_t i = 0; i < sizeof denied_enosys / sizeof denied_enosys[0]; i++)
        rules[n++] = (struct rule){.nr = denied_enosys[i], .err = ENOSYS};
    rules[n++] = (struct rule){.nr = SYS_clone, .check = clone_rule};
    rules[n++] = (struct rule){.nr = SYS_socket, .check = socket_rule};
    rules[n++] = (struct rule){.nr = SYS_personality, .check = personality_rule};
    qsort(rules, n, sizeof rules[0], by_nr);
    return n;
}

/* A leaf of the search tree tests this many numbers one by one. */
#define LEAF_RULES 6

static size_t tree_len(const struct rule *r, size_t n) {
    size_t len = 1; /* a leaf's ALLOW, or a node's JGE */
    if (n > LEAF_RULES) return len + tree_len(r, n / 2) + tree_len(r + n / 2, n - n / 2);
    for (size_t i = 0; i < n; i++) len += 1 + rule_len(&r[i]);
    return len;
}

/* The rules (sorted by number) as a binary search on the syscall number in A:
 * a number the filter does not name takes ~log2(rules) comparisons, not one per
 * rule. That matters at every load of the filter: the kernel runs it for every
 * syscall number to build its cache of always-allowed ones (seccomp_cache_prepare),
 * with interrupts off. Against a list tested in turn (61 comparisons per number,
 * against 13): a load of the filter in a forked child cost 0.13-0.19 ms of CPU,
 * now 0.07-0.11 ms; a session pays it at every test. */
static void emit_tree(struct prog *p, const struct rule *r, size_t n) {
    if (n <= LEAF_RULES) {
        for (size_t i = 0; i < n; i++) {
            emit(p, JEQ((__u32)r[i].nr, 0, (__u8)rule_len(&r[i])));
            if (r[i].err != 0) emit(p, DENY(r[i].err));
            else r[i].check(p);
        }
        emit(p, ALLOW);
        return;
    }
    size_t half = n / 2;
    size_t lower = tree_len(r, half);
    if (lower > 255) p->too_far = 1; /* a BPF jump reaches 255 instructions at most */
    emit(p, jump(BPF_JMP | BPF_JGE | BPF_K, (__u32)r[half].nr, (__u8)lower, 0));
    emit_tree(p, r, half);
    emit_tree(p, r + half, n - half);
}

static int build_filter(struct prog *p) {
    struct rule rules[MAX_RULES];
    size_t n = collect_rules(rules);
    p->n = 0;
    p->too_far = 0;
    emit(p, LOAD(offsetof(struct seccomp_data, arch)));
    emit(p, JEQ(AUDIT_ARCH_X86_64, 1, 0));
    emit(p, RET(SECCOMP_RET_KILL_PROCESS)); /* i386 int 0x80 and anything else */
    emit(p, LOAD(offsetof(struct seccomp_data, nr)));
    /* x32 numbers alias x86_64 ones with a high bit: refuse the whole ABI. */
    emit(p, jump(BPF_JMP | BPF_JGE | BPF_K, __X32_SYSCALL_BIT, 0, 1));
    emit(p, DENY(ENOSYS));
    emit(p, jump(BPF_JMP | BPF_JGT | BPF_K, RBJAIL_LAST_KNOWN_SYSCALL, 0, 1));
    emit(p, DENY(ENOSYS));
    if (8 + tree_len(rules, n) > sizeof p->f / sizeof p->f[0] || n > MAX_RULES) return -1;
    emit_tree(p, rules, n);
    return p->too_far ? -1 : 0;
}

/* The filter, built once per process: by the first program that loads it, or
 * before forking any by a process that forks many (rbjail_prepare_children). */
static struct prog built_filter;
static int filter_built; /* 1 built, -1 cannot be built */

static const struct prog *the_filter(void) {
    if (filter_built == 0) filter_built = build_filter(&built_filter) < 0 ? -1 : 1;
    return filter_built > 0 ? &built_filter : NULL;
}

/* the_filter(), or NULL with rbjail_error() saying why. */
static const struct prog *loadable_filter(void) {
    const struct prog *p = the_filter();
    if (p == NULL) {
        errno = E2BIG;
        fail("seccomp filter", "does not fit BPF's jumps");
    }
    return p;
}

size_t rbjail_seccomp_filter(void *out, size_t max) {
    const struct prog *p = the_filter();
    if (p == NULL || p->n > max) return 0;
    memcpy(out, p->f, p->n * sizeof p->f[0]);
    return p->n;
}

int rbjail_seccomp_denial(size_t i, int *nr, int *err) {
    struct rule rules[MAX_RULES];
    size_t n = collect_rules(rules), k = 0;
    for (size_t j = 0; j < n; j++) {
        if (rules[j].err == 0) continue;
        if (k++ == i) {
            *nr = rules[j].nr;
            *err = rules[j].err;
            return 0;
        }
    }
    return -1;
}

int rbjail_apply_seccomp(void) {
#if !defined(__x86_64__)
    errno = ENOSYS;
    return fail("seccomp filter is written for x86_64", NULL);
#else
    const struct prog *p = loadable_filter();
    if (p == NULL) return -1;
    struct sock_fprog fprog = {.len = (unsigned short)p->n, .filter = (struct sock_filter *)p->f};
    /* TSYNC: a warm interpreter may have threads; all of them get the filter. */
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fprog) != 0)
        return fail("seccomp", NULL);
    return 0;
#endif
}

#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000 /* glibc sets it on every sigaction it makes */
#endif

/* The kernel's sigaction. glibc's refuses its own two signals (32 and 33), and
 * posix_spawn leaves those ignored in what it starts (the jail's spawner), so
 * every jail inherits them ignored unless they are reset here. */
struct raw_sigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    unsigned long mask;
};

static int raw_sigaction(int sig, const struct raw_sigaction *act, struct raw_sigaction *old) {
    return (int)syscall(SYS_rt_sigaction, sig, act, old, sizeof(unsigned long));
}

/* Signals whose disposition differs from the default (SIG_DFL, no flags) in
 * the process that called rbjail_prepare_children, bit sig - 1 (a sigset_t
 * would not do: glibc's sigaddset refuses 32 and 33 too); signals_noted: 1 once it did. */
static unsigned long long noted_signals;
static int signals_noted;

static void note_signals(void) {
    noted_signals = 0;
    for (int sig = 1; sig < NSIG; sig++) {
        struct raw_sigaction old;
        if (sig == SIGKILL || sig == SIGSTOP || raw_sigaction(sig, NULL, &old) < 0) continue;
        if (old.handler != SIG_DFL || (old.flags & ~SA_RESTORER) != 0) noted_signals |= 1ULL << (sig - 1);
    }
    signals_noted = 1;
}

int rbjail_reset_signals(void) {
    /* Ignored dispositions and the blocked mask survive execve: hand the program
     * defaults. Where the parent noted which signals are not at their default,
     * only those are reset (64 sigaction calls were 0.04 ms of a session test). */
    const struct raw_sigaction dfl = {.handler = SIG_DFL};
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        if (signals_noted && !(noted_signals & (1ULL << (sig - 1)))) continue;
        if (raw_sigaction(sig, &dfl, NULL) < 0) return fail("sigaction", NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0) return fail("sigprocmask", NULL);
    return 0;
}

const int rbjail_stops[RBJAIL_N_STOPS] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};

void rbjail_stop_signals(sigset_t *set) {
    sigemptyset(set);
    for (int i = 0; i < RBJAIL_N_STOPS; i++) sigaddset(set, rbjail_stops[i]);
}

/* A stop request reaches pid 1 only through a handler (it ignores what it has
 * none for). kill() and pidfd_send_signal() (SI_USER) fill in the sender's pid
 * as the namespace sees it: 0 for the worker, outside. A process of the jail
 * cannot forge that (sigqueue's codes are negative), and without the uid layer
 * it may signal pid 1: it is ignored then, not a jail ended without a report. */
static void stop_from_outside(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    if (info->si_code != SI_USER || info->si_pid != 0) return;
    kill(-1, SIGKILL);
    _exit(128 + sig);
}

void rbjail_exit_on_stops(void) {
    struct sigaction sa = {.sa_sigaction = stop_from_outside, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < RBJAIL_N_STOPS; i++) sigaction(rbjail_stops[i], &sa, NULL);
}

int rbjail_prepare_children(void) {
    note_signals();
    return loadable_filter() == NULL ? -1 : 0;
}

int rbjail_confine(const struct rbjail_child *c) {
    if (rbjail_apply_cgroups(c->cgroup_fds, c->n_cgroup_fds) < 0) return -1;
    if ((c->n_cgroup_fds > 0 || c->cgroupns) && rbjail_apply_cgroupns() < 0) return -1;
    if (c->reset_oom_score && rbjail_reset_oom_score() < 0) return -1;
    if (c->new_session && setsid() < 0) return fail("setsid", NULL);
    if (rbjail_apply_rlimits(c->rlimits, c->n_rlimits) < 0) return -1;
    if (c->drop_uid) {
        if (rbjail_drop_capabilities() < 0) return -1;
        if (rbjail_apply_uid(c->uid, c->gid) < 0) return -1;
    }
    if (rbjail_apply_no_new_privs() < 0) return -1;
    if (c->seccomp && rbjail_apply_seccomp() < 0) return -1;
    return rbjail_reset_signals();
}

int rbjail_rlimit_resource(const char *name) {
    static const struct {
        const char *name;
        int resource;
    } table[] = {
        {"cpu", RLIMIT_CPU},       {"as", RLIMIT_AS},         {"fsize", RLIMIT_FSIZE},
        {"nofile", RLIMIT_NOFILE}, {"nproc", RLIMIT_NPROC},   {"core", RLIMIT_CORE},
        {"stack", RLIMIT_STACK},   {"memlock", RLIMIT_MEMLOCK}, {"msgqueue", RLIMIT_MSGQUEUE},
        {"data", RLIMIT_DATA},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, name) == 0) return table[i].resource;
    return -1;
}


/* ------------------------------------------------------------------ status protocol, init
 *
 * The jail's init (the launcher's, and a warm pool's execution pid 1) talks to
 * the worker over a SOCK_SEQPACKET status socket and supervises the program. */

void rbjail_send_msg(int fd, const char *msg, int pass_fd) {
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = strlen(msg)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (pass_fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    while (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
}

void rbjail_send_error(int fd, const char *stage) {
    char msg[768];
    snprintf(msg, sizeof msg, "error %s: %s", stage, rbjail_error());
    rbjail_send_msg(fd, msg, -1);
}

int rbjail_wait_for_go(int fd) {
    char buf[16];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1; /* the caller went away: never run the program */
        buf[n] = '\0';
        return strcmp(buf, "go") == 0 ? 0 : -1;
    }
}

long long rbjail_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static void kill_leftovers(pid_t prog) {
    if (getpid() == 1) kill(-1, SIGKILL); /* everyone in this pid namespace but us */
    else kill(-prog, SIGKILL);
}

long long rbjail_default_wall_ms(long long cpu_ms) {
    /* As WallBackstop in sandbox.py: max(2 x limit, limit + 1 s). */
    long long doubled = 2 * cpu_ms, padded = cpu_ms + 1000;
    return doubled > padded ? doubled : padded;
}

/* ------------------------------------------------------------------ CPU time of a jail
 *
 * What the time limit is charged against, from the best source there is:
 *   cgroup   the slot's CPU counter: every process and thread of the jail,
 *            running or exited (cpuacct.usage on v1, usage_usec of cpu.stat on v2);
 *   procfs   no cgroup, but init is pid 1 of the jail's pid namespace with a /proc
 *            of its own: every live process (with the children it reaped) plus
 *            what init reaped;
 *   process  neither: the program's own process (all its threads) plus what init
 *            reaped; children the program waits for itself count once it exits
 *            (RLIMIT_CPU still bounds each process).
 * Nothing here allocates or keeps static state: a warm pool's pid 1 runs in its
 * zygote's memory, which later executions inherit. */
struct cpu_meter {
    int fd;
    int procfs;
    pid_t prog;
    const char *source;
    long long base_us;
    long long last_us;
};

static long long timeval_us(struct timeval tv) {
    return (long long)tv.tv_sec * 1000000LL + tv.tv_usec;
}

static long long reaped_cpu_us(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) < 0) return 0;
    return timeval_us(ru.ru_utime) + timeval_us(ru.ru_stime);
}

static long long cgroup_cpu_us(int fd) {
    char buf[512];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    if (buf[0] >= '0' && buf[0] <= '9') return strtoll(buf, NULL, 10) / 1000; /* v1: ns */
    const char *usage = strstr(buf, "usage_usec ");
    return usage != NULL ? strtoll(usage + 11, NULL, 10) : -1;
}

/* utime + stime + cutime + cstime (fields 14-17) of /proc/<name>/stat, in clock ticks. */
static long long proc_ticks(int procfd, const char *name) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "%s/stat", name);
    int fd = openat(procfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0; /* gone: reaped, so counted by whoever reaped it */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *tok = strrchr(buf, ')'); /* the command name may contain anything */
    if (tok == NULL) return 0;
    long long ticks = 0;
    for (int field = 3; field <= 17; field++) {
        tok = strchr(tok, ' ');
        if (tok == NULL) break;
        tok++;
        if (field >= 14) ticks += strtoll(tok, NULL, 10);
    }
    return ticks;
}

struct rb_dirent64 {
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Call fn for every numeric entry (a pid, a tid) of the directory dirfd/path. */
static void for_each_number(int dirfd, const char *path,
                            void (*fn)(int dirfd, const char *name, void *ctx), void *ctx) {
    int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[4096] __attribute__((aligned(8)));
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long at = 0; at < n;) {
            const struct rb_dirent64 *d = (const void *)(buf + at);
            at += d->d_reclen;
            if (d->d_name[0] >= '1' && d->d_name[0] <= '9') fn(fd, d->d_name, ctx);
        }
    }
    close(fd);
}

static void add_proc_ticks(int procfd, const char *name, void *ctx) {
    /* Processes but init itself, whose reaped children come from getrusage. */
    if (strcmp(name, "1") != 0) *(long long *)ctx += proc_ticks(procfd, name);
}

static long long procfs_cpu_us(void) {
    if (access("/proc/self/stat", R_OK) < 0) return -1;
    long long ticks = 0;
    for_each_number(AT_FDCWD, "/proc", add_proc_ticks, &ticks);
    long hz = sysconf(_SC_CLK_TCK);
    return ticks * 1000000LL / (hz > 0 ? hz : 100) + reaped_cpu_us();
}

/* ------------------------------------------------------------------ time waiting for a CPU
 *
 * The wall-clock backstop is for programs that sleep or block. A program that
 * is runnable but waits for a CPU (a busy host, or its own cgroup's CPU quota)
 * is neither: the time its tasks spend waiting on a run queue (run_delay, the
 * second field of /proc/<pid>/task/<tid>/schedstat) moves the backstop back,
 * up to a cap. Tasks that have exited take their delay with them: the count
 * only errs towards the plain wall clock. */

static void add_task_delay(int taskfd, const char *tid, void *ctx) {
    char path[64], buf[128];
    snprintf(path, sizeof path, "%s/schedstat", tid);
    int fd = openat(taskfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = '\0';
    const char *delay = strchr(buf, ' ');
    if (delay != NULL) *(long long *)ctx += strtoll(delay + 1, NULL, 10);
}

static void add_process_delay(int procfd, const char *pid, void *ctx) {
    if (strcmp(pid, "1") == 0) return; /* init: ours, not the program's */
    char path[64];
    snprintf(path, sizeof path, "%s/task", pid);
    for_each_number(procfd, path, add_task_delay, ctx);
}

/* Microseconds the jail's live tasks have waited for a CPU: every process of
 * our pid namespace with its own /proc, else the program's own threads. */
static long long waited_us(int own_proc, pid_t prog) {
    long long ns = 0;
    if (own_proc) {
        for_each_number(AT_FDCWD, "/proc", add_process_delay, &ns);
    } else {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/task", (int)prog);
        for_each_number(AT_FDCWD, path, add_task_delay, &ns);
    }
    return ns / 1000;
}

static long long process_cpu_us(pid_t prog) {
    clockid_t clock;
    struct timespec ts;
    long long own = 0;
    /* Once reaped, the process's time is in the children's usage instead. */
    if (clock_getcpuclockid(prog, &clock) == 0 && clock_gettime(clock, &ts) == 0)
        own = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
    return own + reaped_cpu_us();
}

/* Our pid namespace's /proc (not the host's, as without the mounts layer). */
static int own_procfs(void) {
    char self[16];
    ssize_t n = readlink("/proc/self", self, sizeof self - 1);
    return n == 1 && self[0] == '1';
}

static long long meter_raw(const struct cpu_meter *m) {
    if (m->fd >= 0) return cgroup_cpu_us(m->fd);
    return m->procfs ? procfs_cpu_us() : process_cpu_us(m->prog);
}

static void meter_start(struct cpu_meter *m, int cgroup_fd, pid_t prog) {
    *m = (struct cpu_meter){.fd = cgroup_fd, .prog = prog, .source = "cgroup"};
    if (cgroup_fd < 0 || (m->base_us = cgroup_cpu_us(cgroup_fd)) < 0) {
        m->fd = -1;
        m->procfs = getpid() == 1 && own_procfs();
        m->source = m->procfs ? "procfs" : "process";
        m->base_us = meter_raw(m);
        if (m->base_us < 0) { /* no /proc after all */
            m->procfs = 0;
            m->source = "process";
            m->base_us = meter_raw(m);
        }
    }
}

/* CPU microseconds since meter_start (the last good reading if a read fails). */
static long long meter_used_us(struct cpu_meter *m) {
    long long raw = meter_raw(m);
    if (raw >= 0 && raw - m->base_us > m->last_us) m->last_us = raw - m->base_us;
    return m->last_us;
}

static int usable_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return 1;
}

/* The shortest wait between two looks at the counter: what a run can overshoot its
 * limit by (per CPU it uses), on top of the counter's own tick granularity. */
#define RBJAIL_CPU_CHECK_FLOOR_US 2000LL
/* The shortest wait between two looks at the run-queue delays once the backstop
 * has been moved: each look reads every task's schedstat. */
#define RBJAIL_STARVED_CHECK_US 20000LL
/* A run whose wall time exceeds its CPU time by less than this did not wait for
 * a CPU for long enough to be worth reading every task's schedstat for. */
#define RBJAIL_WAITED_WORTH_US 10000LL

/* Wait for the program within its limits, without polling on a fixed tick:
 * SIGCHLD is blocked and collected with sigtimedwait, and the wait between
 * two looks at the CPU counter is the time the jail needs, at the very least,
 * to use up what is left (all usable CPUs busy): a short run is never woken,
 * one that runs to its limit is looked at a few dozen times. Orphans
 * reparented to init are reaped too. */
void rbjail_supervise(pid_t prog, long long start_us, const struct rbjail_time_limits *limits,
                      struct rbjail_outcome *out) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    struct cpu_meter meter;
    meter_start(&meter, limits->cpu_fd, prog);
    int own_proc = getpid() == 1 && own_procfs();
    long long cpu_limit_us = limits->cpu_ms * 1000LL;
    long long backstop = start_us + limits->wall_ms * 1000LL;
    long long wall_cap = start_us + (limits->wall_cap_ms > limits->wall_ms ? limits->wall_cap_ms
                                                                          : limits->wall_ms) *
                                        1000LL;
    long long wall_deadline = backstop;
    long long cpus = usable_cpus();
    int done = 0;
    while (!done) {
        int st;
        pid_t p;
        struct rusage ru;
        siginfo_t exited = {0};
        if (waitid(P_PID, (id_t)prog, &exited, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            exited.si_pid == prog) {
            /* Not reaped yet: its schedstat is still there (its other threads' are
             * gone). Only worth reading when it was off the CPU for a while. */
            long long wall = rbjail_now_us() - start_us;
            if (wall - meter_used_us(&meter) > RBJAIL_WAITED_WORTH_US)
                out->waited_us = waited_us(own_proc, prog);
        }
        while ((p = wait4(-1, &st, WNOHANG, &ru)) > 0) {
            if (p == prog) {
                out->status = st;
                out->maxrss_kb = ru.ru_maxrss;
                out->wall_us = rbjail_now_us() - start_us;
                done = 1;
            }
        }
        if (done || (p < 0 && errno == ECHILD)) break;
        long long wait_us = 100000; /* once killed: just wait for its SIGCHLD */
        if (!out->timed_out) {
            long long now = rbjail_now_us();
            if (now >= wall_deadline && wall_deadline < wall_cap) {
                /* Time spent waiting for a CPU does not count against the backstop. */
                long long moved = backstop + waited_us(own_proc, prog);
                if (moved > wall_cap) moved = wall_cap;
                if (moved > wall_deadline) wall_deadline = moved;
            }
            long long wall_left = wall_deadline - now;
            long long cpu_left = cpu_limit_us - meter_used_us(&meter);
            if (cpu_left <= 0 || wall_left <= 0) {
                kill_leftovers(prog);
                out->timed_out = cpu_left <= 0 ? RBJAIL_CPU_LIMIT : RBJAIL_WALL_BACKSTOP;
            } else {
                wait_us = cpu_left / cpus;
                if (wait_us < RBJAIL_CPU_CHECK_FLOOR_US) wait_us = RBJAIL_CPU_CHECK_FLOOR_US;
                if (wait_us > wall_left) wait_us = wall_left;
                /* Past the backstop, a starved program is looked at again at most this often. */
                if (now >= backstop && wait_us < RBJAIL_STARVED_CHECK_US) wait_us = RBJAIL_STARVED_CHECK_US;
            }
        }
        struct timespec ts = {.tv_sec = wait_us / 1000000, .tv_nsec = (wait_us % 1000000) * 1000};
        sigtimedwait(&chld, NULL, &ts);
    }
    kill_leftovers(prog);
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {
    }
    out->cpu_us = meter_used_us(&meter); /* everything has exited: the final count */
    out->cpu_source = meter.source;
}

static const char *timeout_name(int timed_out) {
    if (timed_out == RBJAIL_CPU_LIMIT) return "cpu";
    if (timed_out == RBJAIL_WALL_BACKSTOP) return "wall";
    return "none";
}

void rbjail_report(int fd, const struct rbjail_outcome *out, const struct rusage *since) {
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    long long utime = timeval_us(ru.ru_utime), stime = timeval_us(ru.ru_stime);
    long maxrss = ru.ru_maxrss;
    if (since != NULL) {
        utime -= timeval_us(since->ru_utime);
        stime -= timeval_us(since->ru_stime);
        maxrss = out->maxrss_kb;
    }
    int st = out->status;
    char msg[384];
    snprintf(msg, sizeof msg,
             "result exit=%d signal=%d wall_us=%lld utime_us=%lld stime_us=%lld maxrss_kb=%ld "
             "timed_out=%d limit=%s cpu_us=%lld cpu_source=%s waited_us=%lld",
             WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0,
             out->wall_us, utime, stime, maxrss,
             out->timed_out != RBJAIL_IN_TIME, timeout_name(out->timed_out), out->cpu_us,
             out->cpu_source != NULL ? out->cpu_source : "process", out->waited_us);
    rbjail_send_msg(fd, msg, -1);
}

/* ------------------------------------------------------------------ warm pools */

int rbjail_unshare_execution(int new_net) {
    /* No new uts namespace: the jail's hostname is set once and the program can
     * change it neither without capabilities nor past seccomp. */
    int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC;
    if (new_net) flags |= CLONE_NEWNET;
    if (unshare(flags) < 0) return fail("unshare", "execution namespaces");
    return 0;
}

int rbjail_setns_all(const int *fds, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (setns(fds[i], 0) < 0) return fail("setns", NULL);
    }
    return 0;
}

int rbjail_fresh_scratch(const struct rbjail_fs *fs) {
    /* The root is read-only and already holds the mount points: the new tmpfs
     * go on top of what is there (a zygote's, or nothing in a template's copy),
     * in the caller's own mount namespace. */
    if (chdir("/") < 0) return fail("chdir", "/");
    int rootfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) return fail("open", "/");
    int rc = own_mounts(rootfd, fs);
    close(rootfd);
    if (rc == 0 && chdir("/work") < 0) rc = fail("chdir", "/work");
    return rc;
}

/* The memory map fields of /proc/self/stat, for PR_SET_MM_MAP (which replaces them all). */
static int current_mm_map(struct prctl_mm_map *map) {
    char buf[2048];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail("open", "/proc/self/stat");
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return fail("read", "/proc/self/stat");
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain anything */
    if (p == NULL) {
        errno = EINVAL;
        return fail("parse", "/proc/self/stat");
    }
    unsigned long long field[53] = {0};
    int k = 3; /* the field after ")" is the third */
    for (char *save = NULL, *tok = strtok_r(p + 1, " ", &save); tok && k < 53;
         tok = strtok_r(NULL, " ", &save))
        field[k++] = strtoull(tok, NULL, 10);
    if (k < 52) {
        errno = EINVAL;
        return fail("parse", "/proc/self/stat");
    }
    memset(map, 0, sizeof *map);
    map->start_code = field[26];
    map->end_code = field[27];
    map->start_stack = field[28];
    map->start_data = field[45];
    map->end_data = field[46];
    map->start_brk = field[47];
    map->brk = (unsigned long)sbrk(0);
    map->arg_start = field[48];
    map->arg_end = field[49];
    map->env_start = field[50];
    map->env_end = field[51];
    map->exe_fd = (__u32)-1; /* keep /proc/self/exe */
    return 0;
}

int rbjail_set_cmdline(const char *args, size_t len) {
    if (len == 0 || args[len - 1] != '\0') {
        errno = EINVAL;
        return fail("cmdline", "not NUL-terminated");
    }
    /* A mapping of our own that is never freed: the kernel reads the command
     * line from this memory whenever /proc/<pid>/cmdline is opened. One byte
     * more than needed, so that the end address still lies inside it. */
    char *copy = mmap(NULL, len + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) return fail("mmap", "cmdline");
    memcpy(copy, args, len);
    unsigned long start = (unsigned long)copy, end = start + len;
    /* PR_SET_MM_MAP needs no capability when /proc/self/exe stays (CAP_SYS_RESOURCE,
     * which the single-field calls need, is often missing in containers). */
    struct prctl_mm_map map;
    if (current_mm_map(&map) == 0) {
        map.arg_start = start;
        map.arg_end = end;
        if (prctl(PR_SET_MM, PR_SET_MM_MAP, (unsigned long)&map, sizeof map, 0) == 0) return 0;
    }
    /* The kernel wants arg_start <= arg_end after each call: which bound moves
     * first depends on where the new area lies relative to the old one. */
    if (prctl(PR_SET_MM, PR_SET_MM_ARG_END, end, 0, 0) == 0) {
        if (prctl(PR_SET_MM, PR_SET_MM_ARG_START, start, 0, 0) == 0) return 0;
    } else if (prctl(PR_SET_MM, PR_SET_MM_ARG_START, start, 0, 0) == 0 &&
               prctl(PR_SET_MM, PR_SET_MM_ARG_END, end, 0, 0) == 0) {
        return 0;
    }
    munmap(copy, len + 1);
    return fail("prctl", "PR_SET_MM_ARG");
}

int rbjail_close_from(int lowfd) {
    if (syscall(SYS_close_range, (unsigned)lowfd, ~0U, 0) == 0) return 0;
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = lowfd; fd < (max > 0 ? max : 65536); fd++) close((int)fd);
    return 0;
}

size_t rbjail_struct_size(const char *name) {
    if (strcmp(name, "fs") == 0) return sizeof(struct rbjail_fs);
    if (strcmp(name, "child") == 0) return sizeof(struct rbjail_child);
    if (strcmp(name, "rlimit") == 0) return sizeof(struct rbjail_rlimit);
    if (strcmp(name, "mount") == 0) return sizeof(struct rbjail_mount);
    if (strcmp(name, "pool_request") == 0) return sizeof(struct rbjail_pool_request);
    if (strcmp(name, "zygote") == 0) return sizeof(struct rbjail_zygote);
    return 0;
}

/* ------------------------------------------------------------------ warm pools: the zygote */

/* stdin, stdout, stderr, status socket, request memfd and, when the slot has
 * one, its cgroup CPU counter (-1 otherwise). */
#define SPAWN_FDS 6
#define SPAWN_FDS_REQUIRED 5
#define MAX_CMDLINE (1 << 20)

/* The interpreter's own signal dispositions when it started serving (CPython
 * ignores SIGPIPE and SIGXFSZ and handles SIGINT): a program gets them back
 * after rbjail_confine() reset everything, as a fresh interpreter has them. */
static struct sigaction interpreter_signals[NSIG];

/* Shared by the launcher's spawner and the zygote: one message plus its fds. */
ssize_t rbjail_recv_with_fds(int fd, void *buf, size_t len, int *fds, int max_fds, int *n_fds) {
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    union {
        char buf[CMSG_SPACE(RBJAIL_MAX_RECV_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    ssize_t n;
    do {
        n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    *n_fds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < count; i++) {
            int got;
            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*n_fds < max_fds) fds[(*n_fds)++] = got;
            else close(got);
        }
    }
    return n;
}

/* One control message: 1 if it is a well-formed spawn request, 0 if malformed
 * (its fds closed), -1 once the worker has gone. */
static int recv_spawn(int fd, int fds[SPAWN_FDS]) {
    char buf[16];
    int n_fds;
    ssize_t n = rbjail_recv_with_fds(fd, buf, sizeof buf, fds, SPAWN_FDS, &n_fds);
    if (n <= 0 && n_fds == 0) return -1;
    if (n == 5 && memcmp(buf, "spawn", 5) == 0 && n_fds >= SPAWN_FDS_REQUIRED) {
        if (n_fds == SPAWN_FDS_REQUIRED) fds[SPAWN_FDS - 1] = -1;
        return 1;
    }
    for (int i = 0; i < n_fds; i++) close(fds[i]);
    return 0;
}

static void close_fds(const int *fds, int n) {
    for (int i = 0; i < n; i++) close(fds[i]);
}


static int read_head(int memfd, struct rbjail_pool_request *req) {
    if (pread(memfd, req, sizeof *req, 0) != (ssize_t)sizeof *req || req->size != sizeof *req ||
        req->cmdline_len == 0 || req->cmdline_len > MAX_CMDLINE ||
        req->n_rlimits > RBJAIL_POOL_MAX_RLIMITS) {
        errno = EINVAL;
        return fail("request", "layout does not match this library");
    }
    return 0;
}

/* The program (pid 2): waits for "go" (relayed by pid 1), is confined like a
 * launcher's program, and returns to the interpreter with the request memfd. */
static int pool_program(const struct rbjail_pool_request *req, const int fds[SPAWN_FDS],
                        int go_fd) {
    int status = fds[3], memfd = fds[4];
    char b;
    ssize_t n;
    while ((n = read(go_fd, &b, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) _exit(RBJAIL_FAULT); /* pid 1 went away without "go": never run */
    close(go_fd);
    for (int i = 0; i < 3; i++) {
        if (dup2(fds[i], i) < 0) {
            fail("dup2", NULL);
            rbjail_send_error(status, "program");
            _exit(RBJAIL_FAULT);
        }
    }
    char *cmdline = malloc(req->cmdline_len); /* our own memory now: the fork copied it */
    off_t at = (off_t)sizeof *req;
    if (cmdline == NULL || pread(memfd, cmdline, req->cmdline_len, at) != (ssize_t)req->cmdline_len ||
        lseek(memfd, at + req->cmdline_len, SEEK_SET) < 0) {
        fail("read", "request");
        rbjail_send_error(status, "program");
        _exit(RBJAIL_FAULT);
    }
    struct rbjail_child c = {
        .rlimits = req->rlimits, .n_rlimits = req->n_rlimits,
        .drop_uid = req->drop_uid, .uid = req->uid, .gid = req->gid,
        .seccomp = req->seccomp, .new_session = 1, .reset_oom_score = 1,
    };
    if (rbjail_set_cmdline(cmdline, req->cmdline_len) < 0 || rbjail_confine(&c) < 0) {
        rbjail_send_error(status, "confine");
        _exit(RBJAIL_FAULT);
    }
    /* The uid change made us non-dumpable; a launcher's program gets dumpable
     * back from execve. Without it, /proc/self would be root's and the
     * program's own processes invisible to each other (hidepid). */
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0) {
        fail("prctl", "PR_SET_DUMPABLE");
        rbjail_send_error(status, "confine");
        _exit(RBJAIL_FAULT);
    }
    free(cmdline);
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        (void)sigaction(sig, &interpreter_signals[sig], NULL);
    }
    /* Nothing of the zygote's or pid 1's stays open but the status socket and the
     * request, which the interpreter side reads and closes. */
    int keep_lo = status < memfd ? status : memfd;
    int keep_hi = status < memfd ? memfd : status;
    for (int fd = 3; fd < keep_lo; fd++) close(fd);
    for (int fd = keep_lo + 1; fd < keep_hi; fd++) close(fd);
    rbjail_close_from(keep_hi + 1);
    return memfd;
}

static void exec_fault(int status, const char *stage) {
    rbjail_send_error(status, stage);
    _exit(RBJAIL_FAULT); /* as pid 1: the kernel kills the program with us */
}

/* The execution's pid 1 (cloned by the zygote into the new namespaces, sharing
 * its memory: see rbjail_zygote_serve): fresh scratch mounts, the program
 * forked ahead (it waits for "go" on a pipe, so its fork overlaps the worker's
 * file placement), then the launcher's own init: "ready", "go", supervision,
 * "result". Returns only in the program.
 * (Measured: a vfork()ed pid 1 that execs the small launcher instead costs more
 * here; a glibc process start runs dozens of CPUID instructions, each a VM exit.) */
static int pool_execution(const struct rbjail_zygote *z, const int fds[SPAWN_FDS],
                          int *status_fd, volatile int *spawned) {
    int status = fds[3];
    /* The worker learns of this execution from pid 1 itself (the zygote is
     * suspended until pid 1 exits, see rbjail_zygote_serve). */
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (pidfd < 0) {
        fail("pidfd_open", NULL);
        _exit(RBJAIL_FAULT); /* the zygote reports the failed spawn */
    }
    rbjail_send_msg(z->control_fd, "spawned 1", pidfd);
    close(pidfd);
    *spawned = 1;
    close(z->control_fd);
    close_fds(z->ns_fds, (int)z->n_ns_fds);
    struct rbjail_pool_request req;
    if (read_head(fds[4], &req) < 0) exec_fault(status, "request");
    struct rbjail_fs fs = {.work_mb = req.work_mb, .tmp_mb = req.tmp_mb, .inodes = req.inodes,
                           .uid = req.drop_uid ? req.uid : 0, .gid = req.drop_uid ? req.gid : 0};
    if (rbjail_fresh_scratch(&fs) < 0 ||
        (z->fresh_net && req.loopback && rbjail_loopback_up() < 0))
        exec_fault(status, "setup");
    int workfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int go[2];
    if (workfd < 0 || pipe(go) < 0) {
        fail("open", "/work");
        exec_fault(status, "setup");
    }
    /* SIGCHLD: blocked (collected with sigtimedwait), not ignored as in the zygote. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    signal(SIGCHLD, SIG_DFL);
    pid_t prog = fork();
    if (prog < 0) {
        fail("fork", NULL);
        exec_fault(status, "fork");
    }
    if (prog == 0) {
        close(go[1]);
        close(workfd);
        *status_fd = status;
        return pool_program(&req, fds, go[0]);
    }
    close(go[0]);
    close_fds(fds, 3);
    close(fds[4]);
    /* Now the launcher's init, as it is after building a jail. */
    rbjail_exit_on_stops();
    rbjail_send_msg(status, "ready", workfd);
    close(workfd);
    if (rbjail_wait_for_go(status) < 0) _exit(RBJAIL_FAULT); /* the program dies with us */
    long long start = rbjail_now_us();
    if (write(go[1], "g", 1) != 1) _exit(RBJAIL_FAULT);
    close(go[1]);
    struct rbjail_outcome out = {0};
    struct rbjail_time_limits limits = {
        .cpu_ms = req.cpu_ms, .wall_ms = req.wall_ms, .wall_cap_ms = req.wall_cap_ms,
        .cpu_fd = fds[SPAWN_FDS - 1]};
    rbjail_supervise(prog, start, &limits, &out);
    rbjail_report(status, &out, NULL);
    _exit(0);
}

/* Pid 1 of an execution is cloned with CLONE_VM | CLONE_VFORK: it runs on a
 * stack of its own inside the zygote's memory while the zygote is suspended,
 * until it exits at the end of the execution. A forked pid 1 cost a second copy
 * of the interpreter's page tables and their teardown: ~0.4 ms of CPU per
 * execution, ~8 % of a warm one. Nothing runs concurrently with pid 1 in the
 * shared memory (the zygote is suspended, single-threaded), and pid 1 runs only
 * this file's code; its signal handlers and fd table are its own (no
 * CLONE_SIGHAND, no CLONE_FILES). The program is a fork of pid 1, so a
 * copy-on-write copy of the zygote as before, and it gets back to the
 * interpreter through resume_program, the zygote's context saved in
 * rbjail_zygote_serve before the clone. */
#define PID1_STACK_BYTES (256 * 1024)

struct pid1_args {
    const struct rbjail_zygote *z;
    int fds[SPAWN_FDS];
    volatile int spawned; /* pid 1 told the worker "spawned" */
};

static ucontext_t resume_program;
static volatile int program_memfd = -1;
static volatile int program_status = -1;

static int pid1_main(void *arg) {
    struct pid1_args *a = arg;
    int status = -1;
    int memfd = pool_execution(a->z, a->fds, &status, &a->spawned);
    /* Only the program gets here (pid 1 exits inside pool_execution). */
    program_status = status;
    program_memfd = memfd;
    setcontext(&resume_program);
    _exit(RBJAIL_FAULT); /* setcontext does not return */
}

int rbjail_zygote_serve(const struct rbjail_zygote *z, int *status_fd) {
    static void *pid1_stack;
    if (pid1_stack == NULL) {
        pid1_stack = mmap(NULL, PID1_STACK_BYTES, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (pid1_stack == MAP_FAILED) {
            pid1_stack = NULL;
            return fail("mmap", "pid 1 stack");
        }
    }
    for (int sig = 1; sig < NSIG; sig++) (void)sigaction(sig, NULL, &interpreter_signals[sig]);
    signal(SIGCHLD, SIG_IGN); /* executions' pid 1s: reaped by the kernel, watched by pidfd */
    unsigned long long clean_net = rbjail_net_traces();
    for (;;) {
        int fds[SPAWN_FDS];
        int got = recv_spawn(z->control_fd, fds);
        if (got < 0) return -1; /* the worker closed this pool member */
        if (got == 0) {
            rbjail_send_msg(z->control_fd, "error spawn request without its 5 (or 6) fds", -1);
            continue;
        }
        /* The previous execution is over (one at a time): if it used the
         * network, what it left (TIME_WAIT sockets, counters) must not be seen. */
        if (!z->fresh_net && rbjail_net_traces() != clean_net) {
            if (rbjail_net_renew(NULL, z->loopback) < 0) {
                close_fds(fds, SPAWN_FDS);
                rbjail_send_error(z->control_fd, "namespaces");
                continue;
            }
            clean_net = rbjail_net_traces();
        }
        if (rbjail_unshare_execution(z->fresh_net) < 0) {
            close_fds(fds, SPAWN_FDS);
            rbjail_send_error(z->control_fd, "namespaces");
            continue;
        }
        /* In the program, pid 1's fork of this very state comes back here
         * (resume_program), on this stack, and returns to the interpreter. */
        program_memfd = -1;
        getcontext(&resume_program);
        if (program_memfd >= 0) {
            *status_fd = program_status;
            return program_memfd;
        }
        struct pid1_args args = {.z = z, .spawned = 0};
        memcpy(args.fds, fds, sizeof args.fds);
        pid_t pid = clone(pid1_main, (char *)pid1_stack + PID1_STACK_BYTES,
                          CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
        /* Back here only once pid 1 has exited: the execution is over. */
        int saved = errno;
        /* Pid 1's stack is zygote memory every later program inherits: what an
         * execution's pid 1 left there (its request head, its result line) must
         * be gone before the next one starts. MADV_DONTNEED hands the pages back;
         * the next use maps zeroed ones. */
        if (madvise(pid1_stack, PID1_STACK_BYTES, MADV_DONTNEED) < 0) _exit(RBJAIL_FAULT);
        /* Stuck in an execution's namespaces, this zygote must not serve again. */
        if (rbjail_setns_all(z->ns_fds, z->n_ns_fds) < 0) _exit(RBJAIL_FAULT);
        close_fds(fds, SPAWN_FDS);
        if (pid < 0) {
            errno = saved;
            fail("clone", NULL);
            rbjail_send_error(z->control_fd, "fork");
        } else if (!args.spawned) {
            rbjail_send_error(z->control_fd, "spawn");
        }
    }
}
