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
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
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

int rbjail_unshare_namespaces(void) {
    /* The pid namespace applies to children: the caller forks the jail's init next. */
    int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
    if (unshare(flags) < 0) return fail("unshare", NULL);
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

static int populate_dev(int rootfd, unsigned long tmp_mb, unsigned long inodes) {
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
    /* A private /dev/shm: POSIX semaphores (multiprocessing) need one; the host's must not leak. */
    if (mkdirs(rootfd, "dev/shm") < 0) return -1;
    char opts[128];
    snprintf(opts, sizeof opts, "size=%lum,nr_inodes=%lu,mode=1777", tmp_mb, inodes);
    if (mount_tmpfs("dev/shm", MS_NOSUID | MS_NODEV, opts) < 0) return -1;
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

static int writable_tmpfs(int rootfd, const struct rbjail_fs *fs) {
    char opts[160];
    if (mkdirs(rootfd, "work") < 0 || mkdirs(rootfd, "tmp") < 0) return -1;
    snprintf(opts, sizeof opts, "size=%lum,nr_inodes=%lu,mode=0755,uid=%u,gid=%u", fs->work_mb,
             fs->inodes, (unsigned)fs->uid, (unsigned)fs->gid);
    if (mount_tmpfs("work", MS_NOSUID | MS_NODEV, opts) < 0) return -1;
    snprintf(opts, sizeof opts, "size=%lum,nr_inodes=%lu,mode=1777", fs->tmp_mb, fs->inodes);
    return mount_tmpfs("tmp", MS_NOSUID | MS_NODEV, opts);
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

static int enter_root(void) {
    /* pivot_root(".", ".") stacks the old root on the new one; detaching it
     * leaves no path back to the host file system. */
    if (syscall(SYS_pivot_root, ".", ".") < 0) return fail("pivot_root", NULL);
    if (umount2(".", MNT_DETACH) < 0) return fail("umount", "old root");
    if (chdir("/") < 0) return fail("chdir", "/");
    /* Only /work, /tmp and /dev/shm stay writable. */
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        return fail("remount", "/");
    if (chdir("/work") < 0) return fail("chdir", "/work");
    return 0;
}

int rbjail_build_root(const struct rbjail_fs *fs) {
    /* Nothing done below may propagate back to the host's mount table. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) return fail("make-rprivate", "/");
    if (mount_tmpfs(fs->root_dir, MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096,mode=0755") < 0)
        return -1;
    if (chdir(fs->root_dir) < 0) return fail("chdir", fs->root_dir);
    int rootfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) return fail("open", fs->root_dir);
    int rc = system_mounts(rootfd, fs);
    if (rc == 0) rc = synthetic_etc(rootfd, fs->uid, fs->gid);
    if (rc == 0) rc = writable_tmpfs(rootfd, fs);
    if (rc == 0) rc = populate_dev(rootfd, fs->tmp_mb, fs->inodes);
    if (rc == 0) rc = mount_proc(rootfd);
    close(rootfd);
    if (rc == 0) rc = enter_root();
    return rc;
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

int rbjail_drop_capabilities(void) {
    /* Empty the bounding set so no later exec can regain a capability, then the
     * ambient set; setresuid to a non-zero uid clears the rest. */
    for (int cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL) break; /* past the kernel's last capability */
            return fail("capbset drop", NULL);
        }
    }
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
};

static void emit(struct prog *p, struct sock_filter ins) { p->f[p->n++] = ins; }

static void emit_denials(struct prog *p, const int *nrs, size_t count, int err) {
    for (size_t i = 0; i < count; i++) {
        emit(p, JEQ((__u32)nrs[i], 0, 1));
        emit(p, DENY(err));
    }
}

/* clone(2) is what fork and threads use: allowed, except with namespace flags. */
static void emit_clone(struct prog *p) {
    emit(p, JEQ(SYS_clone, 0, 4));
    emit(p, LOAD(ARG_LO(0)));
    emit(p, jump(BPF_JMP | BPF_JSET | BPF_K, NS_CLONE_FLAGS, 0, 1));
    emit(p, DENY(EPERM));
    emit(p, ALLOW);
}

/* socket(2): only unix, netlink and IP families; no raw IP. No AF_PACKET, and
 * no AF_VSOCK, which is not confined by the net namespace (the hypervisor). */
static void emit_socket(struct prog *p) {
    emit(p, JEQ(SYS_socket, 0, 11));
    emit(p, LOAD(ARG_LO(0)));        /* +1 */
    emit(p, JEQ(AF_UNIX, 8, 0));     /* +2 -> +11 */
    emit(p, JEQ(AF_NETLINK, 7, 0));  /* +3 -> +11 */
    emit(p, JEQ(AF_INET, 2, 0));     /* +4 -> +7 */
    emit(p, JEQ(AF_INET6, 1, 0));    /* +5 -> +7 */
    emit(p, DENY(EAFNOSUPPORT));     /* +6 */
    emit(p, LOAD(ARG_LO(1)));        /* +7 */
    emit(p, stmt(BPF_ALU | BPF_AND | BPF_K, 0xf)); /* +8: SOCK_TYPE_MASK */
    emit(p, JEQ(SOCK_RAW, 0, 1));    /* +9 */
    emit(p, DENY(EPERM));            /* +10 */
    emit(p, ALLOW);                  /* +11 */
}

/* personality(2): only the query and the default persona. */
static void emit_personality(struct prog *p) {
    emit(p, JEQ(SYS_personality, 0, 5));
    emit(p, LOAD(ARG_LO(0)));
    emit(p, JEQ(0xffffffffU, 2, 0));
    emit(p, JEQ(0, 1, 0));
    emit(p, DENY(EPERM));
    emit(p, ALLOW);
}

static void build_filter(struct prog *p) {
    p->n = 0;
    emit(p, LOAD(offsetof(struct seccomp_data, arch)));
    emit(p, JEQ(AUDIT_ARCH_X86_64, 1, 0));
    emit(p, RET(SECCOMP_RET_KILL_PROCESS)); /* i386 int 0x80 and anything else */
    emit(p, LOAD(offsetof(struct seccomp_data, nr)));
    /* x32 numbers alias x86_64 ones with a high bit: refuse the whole ABI. */
    emit(p, jump(BPF_JMP | BPF_JGE | BPF_K, __X32_SYSCALL_BIT, 0, 1));
    emit(p, DENY(ENOSYS));
    emit(p, jump(BPF_JMP | BPF_JGT | BPF_K, RBJAIL_LAST_KNOWN_SYSCALL, 0, 1));
    emit(p, DENY(ENOSYS));
    emit_denials(p, denied_eperm, sizeof denied_eperm / sizeof denied_eperm[0], EPERM);
    emit_denials(p, denied_enosys, sizeof denied_enosys / sizeof denied_enosys[0], ENOSYS);
    emit_clone(p);
    emit_socket(p);
    emit_personality(p);
    emit(p, ALLOW);
}

int rbjail_apply_seccomp(void) {
#if !defined(__x86_64__)
    errno = ENOSYS;
    return fail("seccomp filter is written for x86_64", NULL);
#else
    struct prog p;
    build_filter(&p);
    struct sock_fprog fprog = {.len = (unsigned short)p.n, .filter = p.f};
    /* TSYNC: a warm interpreter may have threads; all of them get the filter. */
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fprog) != 0)
        return fail("seccomp", NULL);
    return 0;
#endif
}

int rbjail_reset_signals(void) {
    /* Ignored dispositions and the blocked mask survive execve: hand the program defaults. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        (void)sigaction(sig, &sa, NULL); /* EINVAL for glibc-internal signals is fine */
    }
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0) return fail("sigprocmask", NULL);
    return 0;
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
