"""Warm pools: pre-started, already jailed interpreters that fork a fresh, isolated child per run.

A cold Python execution pays an interpreter start-up (~8 ms) on top of the
jail. A *zygote* pays it once: a Python interpreter started in its own jail
(pid, mount, net, ipc, uts namespaces; private read-only root; cgroup slot)
with the options and environment of the executions it serves, with the
standard modules judged programs use already imported and its heap frozen
(``gc.freeze``). It then hands over to a C serving loop in ``librbjail.so``
(``rbjail_zygote_serve``); per execution that loop starts:

- the execution's **pid 1**, in new mount, ipc and pid namespaces (a new net
  namespace too when needed, see below), all in C. It is cloned with
  ``CLONE_VM | CLONE_VFORK`` (the zygote waits, suspended, until it exits), so it
  costs no copy of the interpreter's page tables; its stack pages are handed
  back (``MADV_DONTNEED``) after every execution, so nothing it held reaches a
  later program. It tells the worker "spawned", mounts a fresh
  size-capped tmpfs ``/work``, ``/tmp``, ``/dev/shm`` and its own ``/proc``,
  forks the program, and runs the launcher's own init code ("ready" + fd of
  /work, "go", wall-time supervision, kill and reap everything, "result");
- the **program** (pid 2), confined by the launcher's own layer code
  (``rbjail_confine``: new session, OOM score, rlimits, empty capability sets,
  unprivileged uid, no_new_privs, seccomp), with the request's argv as its
  command line and every other fd closed; it then returns into the
  interpreter, which runs CPython's after-fork hooks, makes ``__main__`` (and
  stdin if need be) afresh and runs the ``-c`` code at the zygote program's
  module level, ending as ``PyErr_Print`` and ``Py_FinalizeEx`` would
  (tracebacks through ``sys.excepthook``, SystemExit, atexit, thread joins,
  stream flushes and status 120, finalisers of the program's own objects,
  death by SIGINT after an unhandled KeyboardInterrupt).

The worker drives it through the same :class:`~sandbox_workers.jail.process.Launch`
as a cold execution (the zygote stands in for the slot's ``Spawner``, and its
spawned process speaks the launcher's status protocol), so file placement,
output capture, limits, cgroup accounting and result parsing are one
implementation.

Layering: this package never imports :mod:`sandbox_workers.jail`. What it needs
of a jail slot is two protocols (:mod:`.slot`), and the jail wires the pool in
(:mod:`sandbox_workers.jail.zygotes`), so the dependency goes one way only
(``tests/unit/test_layout.py`` keeps it so).

Nothing an execution does is visible to the next: its files live on tmpfs
mounts that die with its mount namespace, its processes die with its pid
namespace, its SysV/POSIX IPC with its ipc namespace; the zygote never reads a
request (pid 1 and the program do), so no execution's data sits in the memory
later children inherit. Pid 1 does run in the zygote's memory, but what it holds
(the request's head of limits, its result line) lives on its own stack, which
is emptied after every execution (``test_pid_1_leaves_nothing_in_the_zygotes_memory``).
Executions of a zygote share its loopback-only network namespace only
while they leave no trace there, as a slot's cold jails do: before each fork
the zygote compares the namespace's SNMP counters and its count of live sockets
with their pristine value and, if the previous execution sent any packet (it
may have left TIME_WAIT sockets that would make a later ``bind`` fail, and
counters) or left a socket alive (one kept in flight in a unix socket of its
own outlives its processes until the kernel collects it, its abstract name
bound, its port taken), moves to a new namespace first
(``JailConfig.fresh_net``: always).

What differs from a cold run, by design: preloaded modules are already in
``sys.modules`` (a work-dir file of the same name still shadows one, as on a
fresh ``sys.path``) and are not torn down at exit (tearing them down would write
to every inherited page: ~5 ms); children of one zygote share its hash secret
(identical when ``PYTHONHASHSEED`` is set, as the executor sets it) and its
address-space layout (ASLR is per zygote, not per run); the program's stack
starts one frame deeper (the zygote program's module frame), so the recursion
limit is reached a frame or two earlier; ``peak_memory_kb`` includes the
zygote's pages the program maps, as a cold run's includes the fresh
interpreter's; ``/proc/self/exe`` is the interpreter, as cold, and
``/proc/self/cmdline`` is the request's argv; a compiled entry whose bytes are
a file the pool keeps (``PoolConfig.keep_code``: the worker's judging harness)
runs the zygote's code object, the same code a cold run unmarshals, and
``sys.modules`` shows it (``_rewardbus_kept``); the zygote sees those files
read-only under ``/.rbjail/kept``, and so do its executions; a ``-c`` command
the zygote compiled before forking (``PoolConfig.precompile``: the worker's
bootstraps) runs as that code object, the same code the program would compile.

Ruby, PHP, R and Racket are pooled too, by a zygote that forks where the
interpreter first opens a file its launch names (``Launch.warm_after``; R: its
first read of it, ``warm_on_read``), in ``native/rbjail_warm.c``. Its jail runs
the request's very command line with ``librbjail-warm.so`` preloaded; the
interpreter starts up as it always does, and inside that ``open()`` the library
does in C what :mod:`.zygote_main` does (library fd, namespaces, "ready") and
serves. The program comes back from it confined, in its fresh ``/work``, and the
interpreter reads the file the worker wrote there. What a runtime's own ``fork``
does in its child is done too: each fd the interpreter held is a fresh object of
its kind at the same number (pipes, epoll instances with their watches, eventfds;
``/dev/null`` otherwise); Ruby forks from inside an ``exec`` of a missing path,
where it has stopped the timer thread that owns its POSIX timer and signal pipes,
restarts it in the program and runs ``rb_thread_atfork``; R's session temporary
directory is made again; the interpreter runs as pid 3, so no runtime takes the
zygote's resources (made "by pid 2", the program's pid) for its own. What differs
from a cold run is listed in docs/languages.md ("Warm pools").

Node and Java are not pooled. V8 and the JVM are multi-threaded from their
first instruction (V8's platform workers and GC threads, the JVM's compiler,
GC and signal threads); after ``fork()`` only the calling thread exists, with
every lock another thread held stuck forever, so a forked V8 or JVM is not a
working runtime, and neither offers a way to fork itself (Node's
``child_process.fork`` starts a new process; the JVM has no fork at all). What
would be equivalent in isolation is a
*snapshot*, not a fork: restoring a pre-initialised heap in a fresh process
inside the jail (Node's ``--snapshot-blob`` / ``node --build-snapshot``, the
JVM's CDS/AppCDS archives, CRaC checkpoint/restore). A persistent per-slot
process that runs programs in ``vm`` contexts (Node) or class loaders (Java)
is **not** isolation-equivalent: the runtime, its process state, its
prototypes/statics reachable through escapes, its file descriptors and its
memory are shared by every program it runs, and one program's runaway
allocation or infinite loop takes the others down.
"""

from sandbox_workers.pool.config import DEFAULT_PRELOAD, PoolConfig
from sandbox_workers.pool.pool import PoolStats, WarmPool, ZygoteStarter
from sandbox_workers.pool.profile import PooledCommand, Profile, pooled_command, shadowed_modules
from sandbox_workers.pool.slot import JailSpawner, SlotCgroup
from sandbox_workers.pool.zygote import ExecutionSpec, Zygote, ZygoteFault, ZygoteInfo

__all__ = [
    "DEFAULT_PRELOAD",
    "ExecutionSpec",
    "JailSpawner",
    "PoolConfig",
    "PoolStats",
    "PooledCommand",
    "Profile",
    "SlotCgroup",
    "WarmPool",
    "Zygote",
    "ZygoteFault",
    "ZygoteInfo",
    "ZygoteStarter",
    "pooled_command",
    "shadowed_modules",
]
