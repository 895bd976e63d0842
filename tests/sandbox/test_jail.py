"""The jail, layer by layer: each test runs a real program and checks one guarantee."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_workers.jail import (
    ALL_LAYERS,
    IsolationUnavailable,
    JailConfig,
    JailSandbox,
    detect_layers,
)
from sandbox_workers.jail.cgroups import CgroupLimits, V2Slot, V2Tree, detect_tree
from sandbox_workers.pool import PoolConfig
from sandbox_workers.sandbox import BindMount, ExecRequest, ExecResult, SandboxFault
from tests.sandbox.jails import bare_options, bare_spawner, finished, launched
from tests.sandbox.procs import (
    children_of_this_process,
    jailed_processes,
    parent_of,
    processes_with,
)
from tests.support.poll import until

PREFIX = Path(sys.base_prefix).resolve()
PYTHON = str(PREFIX / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
MOUNTS = (BindMount(PREFIX, str(PREFIX)),)


def py(code: str, *args: str, **fields: Any) -> ExecRequest:
    """A Python program for the jail: the worker's base interpreter, isolated mode."""
    return ExecRequest(
        argv=(PYTHON, "-I", "-S", "-c", code, *args),
        extra_mounts=MOUNTS,
        **fields,
    )


def json_out(result: ExecResult) -> dict[str, Any]:
    assert result.exit_code == 0, result
    value = json.loads(result.stdout)
    assert isinstance(value, dict)
    return value


@pytest.fixture(scope="module")
def jail() -> Iterator[JailSandbox]:
    try:
        sandbox = JailSandbox(JailConfig())
    except IsolationUnavailable as exc:
        pytest.fail(f"this host cannot run the strict jail (see rewardbus doctor): {exc}")
    yield sandbox
    sandbox.close()


# ---------------------------------------------------------------------- namespaces


@pytest.mark.sandbox
async def test_pid_namespace_hides_everything_but_the_program(jail: JailSandbox) -> None:
    code = (
        "import os, json; print(json.dumps({'pid': os.getpid(), 'ppid': os.getppid(),"
        " 'procs': sorted(p for p in os.listdir('/proc') if p.isdigit())}))"
    )
    out = json_out(await jail.execute(py(code)))
    assert out["pid"] == 2
    assert out["ppid"] == 1  # the jail's init, itself invisible (hidepid)
    assert out["procs"] == ["2"]


@pytest.mark.sandbox
async def test_uts_namespace_has_its_own_hostname(jail: JailSandbox) -> None:
    result = await jail.execute(py("import socket; print(socket.gethostname())"))
    assert result.stdout == b"sandbox\n"


@pytest.mark.sandbox
async def test_network_reaches_no_host_service(jail: JailSandbox) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = (
            "import socket, sys\n"
            "s = socket.socket(); s.settimeout(2)\n"
            "print(s.connect_ex(('127.0.0.1', int(sys.argv[1]))))\n"
        )
        result = await jail.execute(py(code, str(port)))
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever arrived
    assert result.ok
    assert int(result.stdout) != 0  # refused: the jail's 127.0.0.1 is its own


@pytest.mark.sandbox
async def test_no_route_off_the_machine(jail: JailSandbox) -> None:
    # Fails at connect(): the namespace has no route, so no packet is ever sent.
    code = (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.connect(('1.1.1.1', 53))\n"
    )
    result = await jail.execute(py(code, time_s=5))
    assert result.exit_code == 1
    assert b"Network is unreachable" in result.stderr
    assert result.wall_ms < 3000  # at once: no 5 s wait, whatever the load


# ---------------------------------------------------------------------- file system


@pytest.mark.sandbox
async def test_root_is_minimal_and_read_only(jail: JailSandbox, repo_root: Path) -> None:
    code = (
        "import os, json, sys\n"
        "def err(f):\n"
        "    try: f(); return None\n"
        "    except OSError as e: return e.errno\n"
        "print(json.dumps({\n"
        " 'root': sorted(os.listdir('/')),\n"
        " 'etc': sorted(os.listdir('/etc')),\n"
        " 'dev': sorted(os.listdir('/dev')),\n"
        " 'passwd': open('/etc/passwd').read(),\n"
        " 'shadow': os.path.exists('/etc/shadow'),\n"
        " 'repo': os.path.exists(sys.argv[1]),\n"
        " 'write_root': err(lambda: open('/x', 'w')),\n"
        " 'write_usr': err(lambda: open('/usr/x', 'w')),\n"
        " 'cwd': os.getcwd(),\n"
        "}))"
    )
    out = json_out(await jail.execute(py(code, str(repo_root / "pyproject.toml"))))
    assert out["shadow"] is False
    assert out["repo"] is False
    assert out["write_root"] == 30 and out["write_usr"] == 30  # EROFS
    assert out["cwd"] == "/work"
    assert "shadow" not in out["etc"] and "gshadow" not in out["etc"]
    assert {"work", "tmp", "dev", "proc", "usr", "etc"} <= set(out["root"])
    assert "sys" not in out["root"]
    assert "root:x:0:0" in out["passwd"] and "nobody:x:65534" in out["passwd"]
    assert len(str(out["passwd"]).splitlines()) == 2
    assert set(out["dev"]) == {
        "null",
        "zero",
        "full",
        "random",
        "urandom",
        "fd",
        "stdin",
        "stdout",
        "stderr",
        "shm",
    }


ROOT_BUILT = "import os; s = os.stat('/'); print(s.st_ctime_ns)"


@pytest.mark.sandbox
async def test_a_slot_builds_its_jails_root_once_and_each_jail_its_own_scratch() -> None:
    # The spawner keeps the root it built (a template) and each jail runs in a
    # copy of it: "/" is the same tmpfs, made once. /work, /tmp and /dev/shm
    # are each jail's own: nothing written there reaches the next jail.
    leave = (
        "import os\n"
        "for d in ('/work', '/tmp', '/dev/shm'):\n"
        "    open(os.path.join(d, 'left-by-the-last-jail'), 'w').write('x')\n"
        "s = os.stat('/'); print(s.st_ctime_ns)"
    )
    look = (
        "import os\nprint(sorted(f for d in ('/work', '/tmp', '/dev/shm') for f in os.listdir(d)))"
    )
    async with JailSandbox(JailConfig(pool=PoolConfig(enabled=False))) as sandbox:
        first = await sandbox.execute(py(leave))
        second = await sandbox.execute(py(ROOT_BUILT))
        after = await sandbox.execute(py(look))
    assert first.ok and second.ok and after.ok, (first, second, after)
    assert first.stdout == second.stdout
    assert after.stdout == b"[]\n"


@pytest.mark.sandbox
async def test_a_host_file_replaced_under_a_bind_is_what_the_next_jail_sees(
    tmp_path: Path,
) -> None:
    # A bind holds the file its host path named when it was made: a root kept
    # from before the file was replaced (ldconfig renames a new ld.so.cache in)
    # would show the old one. The spawner builds it again.
    conf = tmp_path / "tool.conf"
    conf.write_text("one\n")
    cat = ExecRequest(
        argv=("/bin/cat", "/etc/rewardbus-tool.conf"),
        extra_mounts=(BindMount(conf, "/etc/rewardbus-tool.conf"),),
    )
    async with JailSandbox(JailConfig(pool=PoolConfig(enabled=False))) as sandbox:
        seen = [(await sandbox.execute(cat)).stdout for _ in range(2)]
        replacement = tmp_path / "tool.conf.new"
        replacement.write_text("two\n")
        replacement.replace(conf)
        seen.append((await sandbox.execute(cat)).stdout)
        conf.unlink()
        with pytest.raises(SandboxFault, match=r"tool\.conf"):
            await sandbox.execute(cat)
        conf.write_text("three\n")
        seen.append((await sandbox.execute(cat)).stdout)
    assert seen == [b"one\n", b"one\n", b"two\n", b"three\n"]


@pytest.mark.sandbox
async def test_jails_with_different_mounts_each_see_only_their_own(tmp_path: Path) -> None:
    # More sets of mounts than a spawner keeps roots for (8), taken in turns on
    # one slot (as compile and run steps of several languages take it): the
    # sets past 8 build their own root until a kept one has gone unused for 64
    # jails, then take its place. They bind the same host directory at
    # different places: a root kept for one set must not serve another because
    # their host paths are the same.
    sets = [
        ExecRequest(
            argv=("/bin/ls", "/opt/rewardbus-sets"),
            extra_mounts=(BindMount(tmp_path, f"/opt/rewardbus-sets/set{i}"),),
        )
        for i in range(10)
    ]
    order = [*range(10), *[0] * 64, 9, 8, *range(10)]
    async with JailSandbox(JailConfig(pool=PoolConfig(enabled=False))) as sandbox:
        seen = [(await sandbox.execute(sets[i])).stdout for i in order]
    assert seen == [f"set{i}\n".encode() for i in order]


@pytest.mark.sandbox
async def test_files_in_collect_out_and_symlinks_are_never_followed(jail: JailSandbox) -> None:
    code = (
        "import os, stat\n"
        "assert open('in/data.txt').read() == 'hello'\n"
        "assert stat.S_IMODE(os.stat('run.sh').st_mode) == 0o755\n"
        "assert stat.S_IMODE(os.stat('in/data.txt').st_mode) == 0o644\n"
        "os.makedirs('out/deep', exist_ok=True)\n"
        "open('out/deep/result.txt', 'w').write('R')\n"
        "open('out/top.txt', 'w').write('T')\n"
        "os.symlink('/etc/passwd', 'out/leak.txt')\n"
        "os.mkfifo('out/fifo.txt')\n"
    )
    request = py(
        code,
        files={"in/data.txt": b"hello", "run.sh": b"#!/bin/true\n"},
        executables=frozenset({"run.sh"}),
        collect=("out/**/*.txt",),
    )
    result = await jail.execute(request)
    assert result.ok, result.stderr
    assert dict(result.files) == {"out/deep/result.txt": b"R", "out/top.txt": b"T"}


@pytest.mark.sandbox
async def test_work_dir_size_is_capped(jail: JailSandbox) -> None:
    code = "open('big', 'wb').write(b'x' * (20 << 20))"
    result = await jail.execute(py(code, workdir_mb=8, file_size_mb=64))
    assert result.exit_code == 1
    assert b"No space left on device" in result.stderr


@pytest.mark.sandbox
async def test_file_size_rlimit(jail: JailSandbox) -> None:
    code = "open('/tmp/big', 'wb').write(b'x' * (4 << 20))"
    result = await jail.execute(py(code, file_size_mb=1))
    assert not result.ok
    assert result.signal == 25 or b"File too large" in result.stderr  # SIGXFSZ / EFBIG


# ---------------------------------------------------------------------- identity, env


@pytest.mark.sandbox
async def test_runs_as_nobody_with_no_capabilities(jail: JailSandbox) -> None:
    code = (
        "import os, json\n"
        "lines = open('/proc/self/status').read().splitlines()\n"
        "status = dict(l.split(':\\t', 1) for l in lines if ':\\t' in l)\n"
        "print(json.dumps({'ids': [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],\n"
        " 'groups': os.getgroups(), 'capeff': status['CapEff'], 'capbnd': status['CapBnd'],\n"
        " 'nnp': status['NoNewPrivs'], 'seccomp': status['Seccomp'],\n"
        " 'oom': open('/proc/self/oom_score_adj').read().strip()}))"
    )
    out = json_out(await jail.execute(py(code)))
    assert out["ids"] == [65534] * 4
    assert out["groups"] == []
    assert int(str(out["capeff"]), 16) == 0 and int(str(out["capbnd"]), 16) == 0
    assert out["nnp"] == "1" and out["seccomp"] == "2"
    assert out["oom"] == "0"  # not the spawner's -1000: the program is the OOM victim


@pytest.mark.sandbox
async def test_environment_is_scrubbed(jail: JailSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REWARDBUS_FAKE_SECRET", "hunter2")
    code = "import os, json; print(json.dumps(dict(os.environ)))"
    out = json_out(await jail.execute(py(code, env={"EXTRA": "1"})))
    assert set(out) == {"PATH", "HOME", "LANG", "EXTRA"}
    assert out["HOME"] == "/work"


# ---------------------------------------------------------------------- seccomp, rlimits


@pytest.mark.sandbox
async def test_seccomp_blocks_escape_syscalls_but_not_threads(jail: JailSandbox) -> None:
    code = (
        "import ctypes, json, socket, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def call(f, *a):\n"
        "    rc = f(*a); return [rc, ctypes.get_errno()]\n"
        "def sock(*a):\n"
        "    try: socket.socket(*a).close(); return 0\n"
        "    except OSError as e: return e.errno\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "print(json.dumps({\n"
        " 'ptrace': call(libc.ptrace, 0, 0, 0, 0),\n"
        " 'unshare': call(libc.unshare, 0x10000000),\n"
        " 'mount': call(libc.mount, b'none', b'/tmp', b'tmpfs', 0, None),\n"
        " 'clone3': call(libc.syscall, 435, 0, 0),\n"
        " 'keyctl': call(libc.syscall, 250, 0, 0),\n"
        " 'bpf': call(libc.syscall, 321, 0, 0, 0),\n"
        " 'pidfd_getfd': call(libc.syscall, 438, 0, 0, 0),\n"
        " 'quotactl_fd': call(libc.syscall, 443, 0, 0, 0, 0),\n"
        " 'io_uring_setup': call(libc.syscall, 425, 0, 0),\n"
        " 'personality': call(libc.personality, 0x0040000),\n"
        " 'clone_newuser': call(libc.syscall, 56, 0x10000000 | 17, 0, 0, 0, 0),\n"
        " 'packet': sock(17, socket.SOCK_RAW, 0),\n"
        " 'raw': sock(socket.AF_INET, socket.SOCK_RAW, 1),\n"
        " 'vsock': sock(40, socket.SOCK_STREAM, 0),\n"
        " 'tcp': sock(socket.AF_INET, socket.SOCK_STREAM, 0),\n"
        " 'unix': sock(socket.AF_UNIX, socket.SOCK_STREAM, 0),\n"
        "}))"
    )
    out = json_out(await jail.execute(py(code)))
    # From every part of the filter's search tree; without the filter pidfd_getfd
    # answers EBADF, io_uring_setup EFAULT and personality succeeds (ADDR_NO_RANDOMIZE).
    for name in ("ptrace", "unshare", "mount", "keyctl", "bpf", "pidfd_getfd", "quotactl_fd"):
        assert out[name] == [-1, 1], name  # EPERM
    assert out["personality"] == [-1, 1] and out["clone_newuser"] == [-1, 1]
    assert out["clone3"] == [-1, 38] and out["io_uring_setup"] == [-1, 38]  # ENOSYS: fallbacks
    assert out["packet"] == 97 and out["vsock"] == 97  # EAFNOSUPPORT
    assert out["raw"] == 1
    assert out["tcp"] == 0 and out["unix"] == 0


@pytest.mark.sandbox
async def test_rlimits_cannot_be_raised(jail: JailSandbox) -> None:
    code = (
        "import resource, json\n"
        "out = {}\n"
        "for name in ('RLIMIT_NOFILE', 'RLIMIT_CPU', 'RLIMIT_FSIZE', 'RLIMIT_CORE'):\n"
        "    r = getattr(resource, name); soft, hard = resource.getrlimit(r)\n"
        "    inf = resource.RLIM_INFINITY\n"
        "    try: resource.setrlimit(r, (inf, inf)); out[name] = 'raised'\n"
        "    except (ValueError, OSError): out[name] = [soft, hard]\n"
        "print(json.dumps(out))"
    )
    out = json_out(await jail.execute(py(code, time_s=2, file_size_mb=8)))
    assert out["RLIMIT_NOFILE"] == [1024, 1024]
    assert out["RLIMIT_CPU"] == [3, 4]
    assert out["RLIMIT_FSIZE"] == [8 << 20, 8 << 20]
    assert out["RLIMIT_CORE"] == [0, 0]


# ---------------------------------------------------------------------- cgroups, limits


@pytest.mark.sandbox
async def test_memory_cgroup_kill_is_memory_exceeded(jail: JailSandbox) -> None:
    code = "chunks = []\nwhile True: chunks.append(bytearray(8 << 20))"
    result = await jail.execute(py(code, memory_mb=64, time_s=10))
    assert result.memory_exceeded
    assert result.signal == 9
    assert not result.timed_out
    assert result.peak_memory_kb >= 60 * 1024


@pytest.mark.sandbox
async def test_memory_limit_does_not_break_threads(jail: JailSandbox) -> None:
    # Each thread reserves an 8 MiB stack: 64 of them exceed a 64 MiB RLIMIT_AS,
    # which is why the memory limit is a cgroup, not an address-space limit.
    code = (
        "import threading\n"
        "ts = [threading.Thread(target=sum, args=(range(10000),)) for _ in range(48)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print('ok')"
    )
    result = await jail.execute(py(code, memory_mb=64, max_processes=64))
    assert result.ok, result
    assert result.peak_memory_kb < 64 * 1024


@pytest.mark.sandbox
async def test_pids_limit_stops_forking(jail: JailSandbox) -> None:
    code = (
        "import os\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            import time; time.sleep(60)\n"
        "        n += 1\n"
        "except OSError:\n"
        "    print(n)\n"
    )
    result = await jail.execute(py(code, max_processes=16, time_s=10))
    assert result.ok, result
    assert 0 < int(result.stdout) < 16


@pytest.mark.sandbox
async def test_cpu_time_and_wall_time_are_measured(jail: JailSandbox) -> None:
    code = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    result = await jail.execute(py(code))
    assert result.ok
    assert 250 <= result.cpu_ms <= 1500
    assert 250 <= result.wall_ms <= 3000


@pytest.mark.sandbox
async def test_output_is_capped(jail: JailSandbox) -> None:
    result = await jail.execute(py("while True: print('x' * 1000)", output_bytes=50_000))
    assert result.output_exceeded
    assert len(result.stdout) == 50_000
    assert result.exit_code is None and result.signal == 9


@pytest.mark.sandbox
async def test_stdin_is_fed_whether_or_not_it_is_read(jail: JailSandbox) -> None:
    data = os.urandom(1 << 20)
    read_all = await jail.execute(py("import sys; print(len(sys.stdin.buffer.read()))", stdin=data))
    assert read_all.stdout == b"1048576\n"
    ignored = await jail.execute(py("print('done')", stdin=data))
    assert ignored.ok and ignored.stdout == b"done\n"


@pytest.mark.sandbox
async def test_timeout_kills_a_double_forked_sleeper(jail: JailSandbox) -> None:
    marker = f"rbtest-{uuid.uuid4().hex}"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        "time.sleep(600)\n"
    )
    # Sleepers use no CPU: the wall-clock backstop ends them.
    result = await jail.execute(py(code, marker, time_s=0.5, wall_s=1.0))
    assert result.timed_out and result.timed_out_by == "wall"
    assert result.signal == 9
    assert 1000 <= result.wall_ms < 2500
    assert processes_with(marker) == []


@pytest.mark.sandbox
async def test_program_not_found_is_exit_127(jail: JailSandbox) -> None:
    result = await jail.execute(ExecRequest(argv=("no-such-program",)))
    assert result.exit_code == 127
    assert b"cannot execute no-such-program" in result.stderr


@pytest.mark.sandbox
async def test_cancelled_execution_leaves_nothing_behind(jail: JailSandbox) -> None:
    marker = f"rbtest-{uuid.uuid4().hex}"
    code = "import os, time\nos.fork()\ntime.sleep(600)"
    task = asyncio.create_task(jail.execute(py(code, marker, time_s=60)))
    await until(lambda: len(jailed_processes(marker)) == 2, "both jailed processes", timeout_s=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(
        lambda: not processes_with(marker) and not children_of_this_process(),
        "every process of the cancelled execution to be gone",
        timeout_s=5,
    )
    assert (await jail.execute(py("print(1)"))).stdout == b"1\n"


@pytest.mark.sandbox
@pytest.mark.usefixtures("jail")  # skips where the strict jail cannot run
async def test_a_running_jail_dies_with_its_spawner() -> None:
    """The init a slot's spawner forks dies with it (PR_SET_PDEATHSIG), and with
    init every process of its pid namespace."""
    marker = f"rbtest-{uuid.uuid4().hex}"
    code = "import os, time\nos.fork()\ntime.sleep(600)"
    async with JailSandbox(JailConfig(pool=PoolConfig(enabled=False))) as sandbox:
        task = asyncio.create_task(sandbox.execute(py(code, marker, time_s=60)))
        await until(
            lambda: len(jailed_processes(marker)) == 2, "both jailed processes", timeout_s=5
        )
        jailed = jailed_processes(marker)
        (init,) = {parent_of(pid) for pid in jailed} - set(jailed)
        spawner = parent_of(init)
        assert spawner in processes_with("--spawner")
        os.kill(spawner, signal.SIGKILL)
        with pytest.raises(SandboxFault, match="without a report"):
            await task
        await until(
            lambda: not processes_with(marker), "every process of the jail to be gone", timeout_s=5
        )
        assert (await sandbox.execute(py("print(1)"))).stdout == b"1\n"
    assert children_of_this_process() == []


@pytest.mark.sandbox
async def test_a_root_built_while_the_last_jail_runs_does_not_wait_for_it(
    jail: JailSandbox, tmp_path: Path
) -> None:
    # The spawner builds a new set of mounts' root in a child it waits for:
    # that wait must be for the child alone, not for the jail still running
    # (a slot given back early, where no cgroup shows what is left in it).
    config = JailConfig()
    mounts = ["--ns", "--mounts", "--root", str(config.root_mountpoint), "--wait-go"]
    for path in config.system_mounts:
        mounts += ["--mirror", path]
    spawner = bare_spawner()
    try:
        forever = ["--cpu-ms", "600000", "--wall-ms", "600000", "--", "/bin/sleep", "600"]
        running = await launched(spawner, [*mounts, *forever])
        other = [*mounts, "--ro", str(tmp_path), "/opt/rewardbus-other", "--", "/bin/ls", "/opt"]

        async def list_other() -> bytes:
            return await finished(await launched(spawner, other))

        listed = await asyncio.wait_for(list_other(), 30)
        running.stop("test")
        await running.finish(10)
        running.close()
    finally:
        spawner.close()
    assert listed == b"rewardbus-other\n"
    assert running.stop_reason == "test"


@pytest.mark.sandbox
async def test_a_jail_that_cannot_be_built_is_a_sandbox_fault(jail: JailSandbox) -> None:
    broken = (BindMount(Path("/nonexistent-rewardbus-path"), "/opt/x"),)
    with pytest.raises(SandboxFault, match="nonexistent-rewardbus-path"):
        await jail.execute(ExecRequest(argv=("/bin/true",), extra_mounts=broken))
    assert children_of_this_process() == []
    assert (await jail.execute(ExecRequest(argv=("/bin/true",)))).ok


# The signals that stop a jail when the worker sends them to its init.
STOPS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1")
SIGNAL_INIT = (
    "import ctypes, json, os, signal, time\n"
    "tried = {}\n"
    f"for name in {STOPS!r}:\n"
    "    try:\n"
    "        os.kill(1, getattr(signal, name)); tried[name] = 'sent'\n"
    "    except OSError as exc:\n"
    "        tried[name] = exc.strerror\n"
    "# rt_sigqueueinfo with a forged sender: si_signo, si_errno, si_code SI_QUEUE, si_pid 0\n"
    "info = (ctypes.c_int * 32)(signal.SIGTERM, 0, -1, 0)\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "tried['forged'] = libc.syscall(129, 1, signal.SIGTERM, info) or 'sent'\n"
    "time.sleep(0.3)\n"
    "print(json.dumps(tried))\n"
)


@pytest.mark.sandbox
@pytest.mark.usefixtures("jail")  # skips where the strict jail cannot run
@pytest.mark.parametrize("path", ["cold", "warm"])
@pytest.mark.parametrize("uid", ["dropped", "kept"])
async def test_no_process_of_the_jail_can_stop_its_init(uid: str, path: str) -> None:
    """A jail's pid 1 (the init the spawner forks, or a zygote's execution's) exits
    on a stop signal from the worker, outside its pid namespace, only. With the
    uid layer on the program cannot signal pid 1 at all; with it off (root, the
    same uid) the signals arrive and are ignored, not a jail ended without a report."""
    disabled = frozenset({"uid"}) if uid == "kept" else frozenset()
    config = JailConfig(
        strict=not disabled, disabled=disabled, pool=PoolConfig(enabled=path == "warm")
    )
    async with JailSandbox(config) as sandbox:
        result = await sandbox.execute(py(SIGNAL_INIT, time_s=10))
        tried = json_out(result)
        if uid == "kept":
            assert [tried[name] for name in STOPS] == ["sent"] * len(STOPS), tried
        else:
            assert set(tried.values()) <= {"Operation not permitted", -1}, tried
        assert (sandbox.pool_stats is not None and sandbox.pool_stats.served == 1) == (
            path == "warm"
        )
        assert (await sandbox.execute(py("print(1)"))).stdout == b"1\n"
    assert children_of_this_process() == []


@pytest.mark.sandbox
@pytest.mark.usefixtures("jail")  # skips where the strict jail cannot run
async def test_the_spawner_refuses_a_malformed_request_and_serves_the_next(
    tmp_path: Path,
) -> None:
    spawner = bare_spawner()
    try:
        r, w = os.pipe()
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            fds = [r, w, w, theirs.fileno()]
            with pytest.raises(SandboxFault, match=r"error request: rbjail: .*--no-such-option"):
                await spawner.spawn(["--no-such-option", "--", "/bin/true"], fds)
        finally:
            for fd in (r, w):
                os.close(fd)
            status.close()
            theirs.close()
        assert spawner.alive
        served = await launched(spawner, bare_options(tmp_path, "/bin/echo", "served"))
        assert await finished(served) == b"served\n"
    finally:
        spawner.close()
    assert children_of_this_process() == []


@pytest.mark.sandbox
@pytest.mark.usefixtures("jail")  # skips where the strict jail cannot run
async def test_a_report_is_read_even_when_init_exits_with_a_message_unread(
    tmp_path: Path,
) -> None:
    """Without --wait-go init never reads the worker's "go": it exits with it
    unread, and the kernel answers the worker's next read with ECONNRESET before
    the messages init sent. Those must still be read."""
    spawner = bare_spawner()
    try:
        for _ in range(3):
            options = ["--ns", "--no-mounts", "--workdir", str(tmp_path), "--", "/bin/true"]
            launch = await launched(spawner, options)  # "go" is never read
            # The loop stalls (as a busy worker's does) until init has exited.
            time.sleep(0.2)  # noqa: ASYNC251
            await finished(launch)
    finally:
        spawner.close()


@pytest.mark.sandbox
async def test_invalid_requests_are_refused_before_anything_runs(jail: JailSandbox) -> None:
    with pytest.raises(ValueError, match="work directory"):
        await jail.execute(ExecRequest(argv=("/bin/true",), files={"../escape": b""}))
    with pytest.raises(ValueError, match="environment"):
        await jail.execute(ExecRequest(argv=("/bin/true",), env={"A=B": "x"}))
    with pytest.raises(ValueError, match="program"):
        await jail.execute(ExecRequest(argv=()))
    with pytest.raises(ValueError, match="NUL"):
        await jail.execute(ExecRequest(argv=("/bin/echo", "a\0b")))
    assert children_of_this_process() == []


@pytest.mark.sandbox
async def test_concurrent_executions_do_not_see_each_other(jail: JailSandbox) -> None:
    code = (
        "import os, sys, json\n"
        "open(sys.argv[1], 'w').write('x')\n"
        "open('/tmp/' + sys.argv[1], 'w').write('x')\n"
        "print(json.dumps(sorted(os.listdir('.')) + sorted(os.listdir('/tmp'))))"
    )
    results = await asyncio.gather(*(jail.execute(py(code, f"f{i}")) for i in range(6)))
    for i, result in enumerate(results):
        assert json.loads(result.stdout) == [f"f{i}", f"f{i}"]


# ---------------------------------------------------------------------- strict mode, layers


@pytest.mark.sandbox
def test_detect_layers_reports_every_layer() -> None:
    layers = detect_layers(JailConfig(strict=False))
    assert [layer.name for layer in layers] == list(ALL_LAYERS)
    assert all(layer.detail for layer in layers)
    assert {layer.name for layer in layers if layer.required} == set(JailConfig().required)


@pytest.mark.sandbox
def test_a_strict_jail_has_every_required_layer(jail: JailSandbox) -> None:
    assert all(layer.active for layer in jail.layers if layer.required), jail.layers


@pytest.mark.sandbox
@pytest.mark.usefixtures("jail")  # skips where the strict jail cannot run
def test_strict_mode_refuses_a_missing_required_layer() -> None:
    with pytest.raises(IsolationUnavailable) as info:
        JailSandbox(JailConfig(disabled=frozenset({"seccomp"})))
    assert [layer.name for layer in info.value.missing] == ["seccomp"]
    assert not info.value.retriable


@pytest.mark.sandbox
@pytest.mark.usefixtures("jail")  # skips where the strict jail cannot run
async def test_non_strict_mode_runs_degraded_and_says_so() -> None:
    async with JailSandbox(JailConfig(strict=False, disabled=frozenset({"seccomp"}))) as sandbox:
        assert sandbox.degraded == ("seccomp",)
        code = "print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])"
        result = await sandbox.execute(py(code))
        assert result.stdout == b"0\n"


@pytest.mark.sandbox
@pytest.mark.usefixtures("jail")  # skips where the strict jail cannot run
async def test_without_a_memory_cgroup_the_address_space_is_the_limit() -> None:
    config = JailConfig(strict=False, disabled=frozenset({"cgroup_memory"}))
    async with JailSandbox(config) as sandbox:
        result = await sandbox.execute(py("x = bytearray(512 << 20)", memory_mb=128))
    assert result.exit_code == 1 and b"MemoryError" in result.stderr
    assert not result.memory_exceeded  # no cgroup said so; the judge reads the exit


@pytest.mark.sandbox
@pytest.mark.usefixtures("jail")  # skips where the strict jail cannot run
async def test_degraded_without_namespaces_runs_in_a_private_host_dir(tmp_path: Path) -> None:
    work_root = tmp_path / "work"
    config = JailConfig(
        strict=False, disabled=frozenset({"namespaces", "mounts"}), work_root=work_root
    )
    sandbox = JailSandbox(config)
    try:
        assert sandbox.degraded == ("namespaces", "mounts")
        request = ExecRequest(
            argv=("/bin/sh", "-c", "id -u; cat in.txt; echo out > out.txt"),
            files={"in.txt": b"in\n"},
            collect=("out.txt",),
        )
        result = await sandbox.execute(request)
    finally:
        await sandbox.aclose()
    assert result.ok, result
    assert result.stdout == b"65534\nin\n"
    assert dict(result.files) == {"out.txt": b"out\n"}
    assert list(work_root.iterdir()) == []  # the per-execution dir is gone


@pytest.mark.sandbox
@pytest.mark.usefixtures("jail")  # skips where the strict jail cannot run
def test_layer_library_confines_a_forked_child(repo_root: Path) -> None:
    """librbjail.so: the launcher's layer code, callable from a warm interpreter's fork."""
    code = (
        "import ctypes, os, resource\n"
        "from sandbox_workers.jail import JailConfig\n"
        "from sandbox_workers.jail.layers import load_layers\n"
        "layers = load_layers(JailConfig())\n"
        "layers.apply_rlimits([(resource.RLIMIT_NOFILE, 64, 64)])\n"
        "layers.drop_capabilities()\n"
        "layers.apply_uid(65534, 65534)\n"
        "layers.apply_no_new_privs()\n"
        "layers.apply_seccomp()\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.ptrace(0, 0, 0, 0) == -1 and ctypes.get_errno() == 1\n"
        "assert resource.getrlimit(resource.RLIMIT_NOFILE) == (64, 64)\n"
        "assert os.getuid() == 65534\n"
        "try:\n"
        "    layers.apply_uid(0, 0)\n"
        "except OSError as e:\n"
        "    print('confined', e.errno)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=repo_root
    )
    assert proc.stdout == "confined 1\n", proc.stderr


# ---------------------------------------------------------------------- cgroup files (no root)


def _fake_v2_root(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def test_cgroup_v2_slot_writes_limits_and_reads_counters(tmp_path: Path) -> None:
    base = _fake_v2_root(tmp_path) / "rewardbus"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpu memory pids\n")
    tree = V2Tree(base, "w1-1")
    assert (tree.memory, tree.pids, tree.cpu) == (True, True, True)
    assert (
        base / "cgroup.subtree_control"
    ).read_text() == "+cpu"  # last write wins in a plain file
    slot = tree.new_slot()
    assert isinstance(slot, V2Slot)
    (slot.path / "memory.swap.max").write_text("max\n")
    (slot.path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    (slot.path / "cpu.stat").write_text("usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\n")
    (slot.path / "memory.current").write_text("4096\n")
    slot.prepare(CgroupLimits(memory_bytes=256 << 20, max_processes=32, cpu_cores=1.5))
    slot.start_measuring()
    assert (slot.path / "memory.max").read_text() == str(256 << 20)
    assert (slot.path / "memory.swap.max").read_text() == "0"
    assert (slot.path / "memory.oom.group").read_text() == "1"
    assert (slot.path / "pids.max").read_text() == "32"
    assert (slot.path / "cpu.max").read_text() == "150000 100000"
    assert slot.procs_files == (slot.path / "cgroup.procs",)
    assert slot.cpu_counter == slot.path / "cpu.stat"  # the jail's init enforces time on it
    # The "kernel" moves on: cpu time, a peak, one more OOM kill.
    (slot.path / "cpu.stat").write_text("usage_usec 125000\nuser_usec 1\nsystem_usec 1\n")
    (slot.path / "memory.peak").write_text(f"{(100 << 20) + 4096}\n")
    (slot.path / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n")
    stats = slot.stats()
    assert stats.cpu_ms == 120.0
    assert stats.peak_memory_kb == 100 * 1024
    assert stats.oom_killed
    # Unchanged limits are not rewritten; changed ones are.
    (slot.path / "pids.max").write_text("sentinel")
    slot.prepare(CgroupLimits(memory_bytes=256 << 20, max_processes=32, cpu_cores=None))
    slot.start_measuring()
    assert (slot.path / "pids.max").read_text() == "sentinel"
    assert (slot.path / "cpu.max").read_text() == "max 100000"
    assert not slot.stats().oom_killed
    (slot.path / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    assert slot.is_empty()
    for child in slot.path.iterdir():
        child.unlink()
    assert slot.remove()


def _unified_mount() -> Path | None:
    for path in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (path / "cgroup.procs").exists() and (path / "cgroup.controllers").exists():
            return path
    return None


@pytest.mark.sandbox
@pytest.mark.skipif(
    os.geteuid() != 0 or _unified_mount() is None, reason="needs root and a cgroup2 mount"
)
def test_cgroup_v2_slot_on_the_real_unified_hierarchy() -> None:
    """Join, account, kill and remove on a real cgroup2 (controllers may be on v1 here)."""
    root = _unified_mount()
    assert root is not None
    base = root / f"rewardbus-test-{uuid.uuid4().hex[:8]}"
    try:
        tree = V2Tree(base, "w1-1")
    except PermissionError:
        pytest.skip("the cgroup2 mount is not writable here")
    slot = tree.new_slot()
    slot.prepare(CgroupLimits(memory_bytes=64 << 20, max_processes=8, cpu_cores=1.0))
    slot.start_measuring()
    code = "import sys; open(sys.argv[1], 'w').write('0'); print('in', flush=True); input()"
    with subprocess.Popen(
        [sys.executable, "-c", code, str(slot.procs_files[0])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == b"in\n"
        assert not slot.is_empty()
        assert slot.stats().cpu_ms is not None
        slot.kill()
        assert proc.wait(timeout=10) == -9
    assert slot.is_empty()
    assert slot.remove()
    tree.close()
    base.rmdir()  # fails if the instance dir were left behind


def test_cgroup_v2_detection_from_mountinfo(tmp_path: Path) -> None:
    root = _fake_v2_root(tmp_path)
    (root / "system.slice").mkdir()
    mountinfo = f"30 1 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    tree = detect_tree("rewardbus", mountinfo=mountinfo, proc_cgroup="0::/system.slice/worker\n")
    assert isinstance(tree, V2Tree)
    # Next to the worker's own cgroup, never inside it (v2: no processes in inner nodes).
    assert (root / "system.slice" / "rewardbus").is_dir()
    assert not (root / "system.slice" / "worker").exists()


def test_cgroup_v1_detection_nests_under_own_cgroup(tmp_path: Path) -> None:
    mountinfo = "".join(
        f"{30 + i} 1 0:{40 + i} / {tmp_path / name} rw - cgroup cgroup rw,{opts}\n"
        for i, (name, opts) in enumerate(
            [("memory", "memory"), ("pids", "pids"), ("cpu,cpuacct", "cpu,cpuacct")]
        )
    )
    proc_cgroup = "4:memory:/job/7\n3:pids:/\n2:cpu,cpuacct:/\n0::/\n"
    tree = detect_tree("rewardbus", mountinfo=mountinfo, proc_cgroup=proc_cgroup)
    assert tree is not None and tree.version == 1
    slot = tree.new_slot()
    # One cgroup.procs per hierarchy: cpu and cpuacct share one.
    hierarchies = sorted(p.relative_to(tmp_path).parts[0] for p in slot.procs_files)
    assert hierarchies == ["cpu,cpuacct", "memory", "pids"]
    # The jail's init enforces time limits on the cpuacct hierarchy's counter.
    counter = slot.cpu_counter
    assert counter is not None and counter.name == "cpuacct.usage"
    assert counter.parent.relative_to(tmp_path).parts[0] == "cpu,cpuacct"
    # v1 allows nesting under the worker's own cgroup, so host limits still apply.
    assert (tmp_path / "memory" / "job" / "7" / "rewardbus").is_dir()
    assert (tmp_path / "pids" / "rewardbus").is_dir()
