/* rbjail --probe: try each isolation layer in a throw-away child and print
 * "LAYER ok" or "LAYER missing REASON", one line each. This is what
 * `rewardbus doctor` and strict mode rely on: the layers are tried, not guessed. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rbjail_layers.h"

static const char *g_root_dir;

static int probe_namespaces(void) {
    if (rbjail_unshare_namespaces(1, 1) < 0) return -1;
    /* Every jail brings "lo" up in its new net namespace: that needs CAP_NET_ADMIN,
     * which a container may lack while it has CAP_SYS_ADMIN (docs/containers.md). */
    if (rbjail_loopback_up() < 0) return -1;
    pid_t pid = fork(); /* the pid namespace is only real once it has a process */
    if (pid < 0) return -1;
    if (pid == 0) _exit(getpid() == 1 ? 0 : 1);
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        errno = ESRCH;
        return -1;
    }
    return 0;
}

static int probe_mounts(void) {
    if (unshare(CLONE_NEWNS) < 0) return -1;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) return -1;
    const char *dir = g_root_dir ? g_root_dir : "/tmp";
    if (mount("rbjail", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k") < 0) return -1;
    if (chdir(dir) < 0) return -1;
    if (syscall(SYS_pivot_root, ".", ".") < 0) return -1;
    return umount2(".", MNT_DETACH);
}

static int probe_seccomp(void) {
    if (rbjail_apply_no_new_privs() < 0 || rbjail_apply_seccomp() < 0) return -1;
    if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) == 0 || errno != EPERM) {
        errno = ENOTSUP;
        return -1;
    }
    return 0;
}

static int probe_uid(void) {
    if (rbjail_drop_capabilities() < 0) return -1;
    return rbjail_apply_uid(65534, 65534);
}

static int probe_rlimits(void) {
    struct rbjail_rlimit rl = {RLIMIT_CORE, 0, 0};
    return rbjail_apply_rlimits(&rl, 1);
}

static int probe_userns(void) { return unshare(CLONE_NEWUSER); }

static int probe_cgroupns(void) { return unshare(CLONE_NEWCGROUP); }

struct probe {
    const char *name;
    int (*fn)(void);
};

static void run_probe(const struct probe *p) {
    int pipefd[2];
    if (pipe(pipefd) < 0) {
        printf("%s missing pipe: %s\n", p->name, strerror(errno));
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        if (p->fn() == 0) _exit(0);
        const char *msg = rbjail_error()[0] ? rbjail_error() : strerror(errno);
        (void)!write(pipefd[1], msg, strlen(msg));
        _exit(1);
    }
    close(pipefd[1]);
    char reason[512] = "";
    ssize_t n = pid > 0 ? read(pipefd[0], reason, sizeof reason - 1) : -1;
    reason[n > 0 ? n : 0] = '\0';
    close(pipefd[0]);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) {
        printf("%s missing fork: %s\n", p->name, strerror(errno));
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        printf("%s ok\n", p->name);
    } else {
        printf("%s missing %s\n", p->name, reason[0] ? reason : "probe child died");
    }
}

int rbjail_probe(const char *root_dir) {
    static const struct probe probes[] = {
        {"namespaces", probe_namespaces}, {"mounts", probe_mounts},
        {"seccomp", probe_seccomp},       {"uid", probe_uid},
        {"rlimits", probe_rlimits},       {"userns", probe_userns},
        {"cgroupns", probe_cgroupns},
    };
    g_root_dir = root_dir;
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) run_probe(&probes[i]);
    fflush(stdout);
    return 0;
}
