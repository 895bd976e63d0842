/* rbjail layers: each isolation layer as one function.
 *
 * The same functions serve two callers: the rbjail launcher (a fresh process
 * per execution) and, through ctypes on librbjail.so, a child forked from a
 * pre-started warm interpreter. Every function returns 0 on success or -1 with
 * errno set and a message available from rbjail_error().
 */
#ifndef RBJAIL_LAYERS_H
#define RBJAIL_LAYERS_H

#include <stddef.h>
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

int rbjail_unshare_namespaces(void);
int rbjail_build_root(const struct rbjail_fs *fs);
int rbjail_set_hostname(const char *name);
int rbjail_loopback_up(void);

int rbjail_apply_cgroups(const int *fds, size_t n);
int rbjail_apply_cgroupns(void);
int rbjail_reset_oom_score(void);
int rbjail_apply_rlimits(const struct rbjail_rlimit *limits, size_t n);
int rbjail_drop_capabilities(void);
int rbjail_apply_uid(uid_t uid, gid_t gid);
int rbjail_apply_no_new_privs(void);
int rbjail_apply_seccomp(void);
int rbjail_reset_signals(void);
int rbjail_confine(const struct rbjail_child *child);

/* Name of an rlimit ("cpu", "as", ...) to its RLIMIT_* number, or -1. */
int rbjail_rlimit_resource(const char *name);

#endif
