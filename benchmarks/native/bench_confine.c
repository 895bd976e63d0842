/* CPU per forked child of each confinement step that a session's program (and
 * every jail's program) takes, against a bare fork + exit in the same run.
 * Built and run by benchmarks/bench_confine.py; compiled with the jail's own
 * layer code, so the filter measured is the one the jail loads. */
#include "rbjail_layers.c"

struct step {
    const char *name;
    int (*run)(void);
};

static struct sock_fprog linear, tree;

static int load(struct sock_fprog *fprog) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, fprog);
}

static int nothing(void) { return 0; }
static int seccomp_tree(void) { return load(&tree); }
static int seccomp_linear(void) { return load(&linear); }
static int bounding_set(void) { return rbjail_drop_bounding_set(); }
static int signals(void) { return rbjail_reset_signals(); }

/* The same refusals tested one by one, as the filter did before its search tree
 * (without its argument checks, which only make a linear filter longer). */
static void build_linear(struct prog *p) {
    p->n = 0;
    emit(p, LOAD(offsetof(struct seccomp_data, arch)));
    emit(p, JEQ(AUDIT_ARCH_X86_64, 1, 0));
    emit(p, RET(SECCOMP_RET_KILL_PROCESS));
    emit(p, LOAD(offsetof(struct seccomp_data, nr)));
    int nr, err;
    for (size_t i = 0; rbjail_seccomp_denial(i, &nr, &err) == 0; i++) {
        emit(p, JEQ((__u32)nr, 0, 1));
        emit(p, DENY(err));
    }
    emit(p, ALLOW);
}

static double cpu_ms(void) {
    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    return (self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec + kids.ru_stime.tv_sec) * 1e3 +
           (self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec + kids.ru_stime.tv_usec) / 1e3;
}

static int block(const struct step *s, int forks, double *ms) {
    double start = cpu_ms();
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid == 0) _exit(s->run() == 0 ? 0 : 3);
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) < 0 || st != 0) return -1;
    }
    *ms = (cpu_ms() - start) / forks;
    return 0;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* argv: blocks, forks per block. One line per step: name, instructions, median ms,
 * first and third quartile; steps interleaved block by block, so drift cancels. */
int main(int argc, char **argv) {
    int blocks = argc > 1 ? atoi(argv[1]) : 21, forks = argc > 2 ? atoi(argv[2]) : 300;
    static struct prog t, l;
    if (build_filter(&t) < 0) return 2;
    build_linear(&l);
    tree = (struct sock_fprog){.len = (unsigned short)t.n, .filter = t.f};
    linear = (struct sock_fprog){.len = (unsigned short)l.n, .filter = l.f};
    /* The bounding set: dropped by each child of a parent that holds it, and known
     * empty by each child of a parent that emptied it (a session's init). The
     * signals: every one reset by each child, or only those the parent noted as
     * not at their default (a session's init, which inherits glibc's two ignored). */
    struct step steps[] = {{"fork", nothing},
                           {"seccomp_linear", seccomp_linear},
                           {"seccomp_tree", seccomp_tree},
                           {"bounding_set_full", bounding_set},
                           {"signals_all", signals}};
    struct step after[] = {{"fork_prepared_parent", nothing},
                           {"bounding_set_empty", bounding_set},
                           {"signals_noted", signals}};
    size_t n = sizeof steps / sizeof steps[0], n_after = sizeof after / sizeof after[0];
    double *ms = calloc((n + n_after) * (size_t)blocks, sizeof *ms);
    for (int b = 0; b < blocks; b++)
        for (size_t s = 0; s < n; s++)
            if (block(&steps[s], forks, &ms[s * blocks + b]) < 0) return 3;
    if (rbjail_drop_bounding_set() < 0) return 4;
    const struct raw_sigaction ignore = {.handler = SIG_IGN};
    if (raw_sigaction(32, &ignore, NULL) < 0 || raw_sigaction(33, &ignore, NULL) < 0) return 4;
    if (rbjail_prepare_children() < 0) return 4;
    for (int b = 0; b < blocks; b++)
        for (size_t s = 0; s < n_after; s++)
            if (block(&after[s], forks, &ms[(n + s) * blocks + b]) < 0) return 3;
    for (size_t s = 0; s < n + n_after; s++) {
        double *v = &ms[s * blocks];
        qsort(v, (size_t)blocks, sizeof *v, by_value);
        unsigned len = s == 1 ? linear.len : s == 2 ? tree.len : 0;
        printf("%s %u %.4f %.4f %.4f\n", s < n ? steps[s].name : after[s - n].name, len,
               v[blocks / 2], v[blocks / 4], v[3 * blocks / 4]);
    }
    return 0;
}
