"""Executions must not see each other: 200 alternating plant/look runs, zero leaks.

The runs of one session (a suite's stdin tests, one jail) must not either.

A planter leaves everything it can behind (files in /work, /tmp, /dev/shm and
$HOME, a POSIX semaphore, SysV IPC objects, a background process holding an
abstract unix socket and a listening TCP port, environment changes); the next
execution looks for all of it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from sandbox_workers.jail import JailSandbox
from sandbox_workers.sandbox import BindMount, ExecRequest

pytestmark = pytest.mark.sandbox

PREFIX = Path(sys.base_prefix).resolve()
PYTHON = str(PREFIX / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
MOUNTS = (BindMount(PREFIX, str(PREFIX)),)
PORT = 47123

PLANT = f"""
import ctypes, os, socket, sys, time
for path in ('/work/planted', '/tmp/planted', '/dev/shm/planted', os.path.expanduser('~/.planted')):
    open(path, 'w').write(sys.argv[1])
os.environ['PLANTED'] = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget(0x5EED, 4096, 0o1666)            # IPC_CREAT | 0666
libc.msgget(0x5EED, 0o1666)
libc.semget(0x5EED, 1, 0o1666)
sem = ctypes.CDLL('libc.so.6').sem_open(b'/planted', 0o100, 0o666, 1)  # O_CREAT
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        a = socket.socket(socket.AF_UNIX); a.bind('\\0planted'); a.listen()
        t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        t.bind(('127.0.0.1', {PORT})); t.listen()
        open('/tmp/listening', 'w').close()
        time.sleep(600)
    os._exit(0)
deadline = time.monotonic() + 5
while not os.path.exists('/tmp/listening') and time.monotonic() < deadline:
    time.sleep(0.001)
print('planted')
"""

LOOK = f"""
import json, os, socket
found = []
for path in ('/work/planted', '/tmp/planted', '/dev/shm/planted', os.path.expanduser('~/.planted'),
             '/dev/shm/sem.planted'):
    if os.path.exists(path): found.append(path)
if 'PLANTED' in os.environ: found.append('env')
found += [f'{{kind}}' for kind in ('shm', 'msg', 'sem')
          if len(open(f'/proc/sysvipc/{{kind}}').read().splitlines()) > 1]
others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]
if others: found.append(f'processes {{others}}')
a = socket.socket(socket.AF_UNIX)
try:
    a.connect('\\0planted'); found.append('abstract socket')
except OSError: pass
t = socket.socket()
if t.connect_ex(('127.0.0.1', {PORT})) == 0: found.append('tcp listener')
if os.listdir('.'): found.append(f'work dir {{os.listdir(".")}}')
print(json.dumps(found))
"""


def request(code: str, tag: str) -> ExecRequest:
    return ExecRequest(argv=(PYTHON, "-I", "-S", "-c", code, tag), extra_mounts=MOUNTS)


async def test_the_looker_sees_what_a_planter_leaves_in_its_own_execution(
    jail: JailSandbox,
) -> None:
    """Positive control: within one execution, every planted thing is found."""
    tag = f"rbpollute-{uuid.uuid4().hex}"
    result = await jail.execute(request(PLANT + "\n" + LOOK, tag))
    assert result.ok, result
    found = json.loads(result.stdout.split(b"\n", 1)[1])
    kinds = {item.split(" ", 1)[0] for item in found}
    assert {"/work/planted", "/tmp/planted", "/dev/shm/planted", "/dev/shm/sem.planted"} <= kinds
    assert {"env", "shm", "msg", "sem", "processes", "abstract", "tcp", "work"} <= kinds


async def test_two_hundred_alternating_executions_leave_nothing_behind(jail: JailSandbox) -> None:
    tag = f"rbpollute-{uuid.uuid4().hex}"
    leaks = []
    await jail.execute(request(LOOK, tag))  # a slot (spawner + cgroups) exists from here on
    fds_before = len(os.listdir("/proc/self/fd"))
    for i in range(100):
        planted = await jail.execute(request(PLANT, tag))
        assert planted.ok and planted.stdout == b"planted\n", planted
        looked = await jail.execute(request(LOOK, tag))
        assert looked.ok, looked
        found = json.loads(looked.stdout)
        if found:
            leaks.append((i, found))
    assert leaks == []
    assert not any(tag.encode() in _cmdline(pid) for pid in _pids()), "a planter survived"
    assert len(os.listdir("/proc/self/fd")) == fds_before, "file descriptors leaked"


async def test_concurrent_planters_and_lookers_do_not_meet(jail: JailSandbox) -> None:
    tag = f"rbpollute-{uuid.uuid4().hex}"
    runs = [request(PLANT if i % 2 == 0 else LOOK, tag) for i in range(12)]
    results = await asyncio.gather(*(jail.execute(r) for r in runs))
    for i, result in enumerate(results):
        assert result.ok, result
        if i % 2:
            assert json.loads(result.stdout) == []


def session_request(tag: str, code: str = "") -> ExecRequest:
    """A session's program: the Python code it is given on stdin (sh, so no warm zygote)."""
    argv = ("/bin/sh", "-c", f'exec {PYTHON} -I -S -c "$(cat)" {tag}')
    return ExecRequest(argv=argv, stdin=code.encode(), extra_mounts=MOUNTS)


async def test_a_session_s_runs_leave_nothing_to_each_other(jail: JailSandbox) -> None:
    tag = f"rbpollute-{uuid.uuid4().hex}"
    session = jail.session(session_request(tag))
    assert session is not None
    leaks = []
    try:
        both = await session.run(session_request(tag, PLANT + "\n" + LOOK))
        assert both.ok, both
        kinds = {item.split(" ", 1)[0] for item in json.loads(both.stdout.split(b"\n", 1)[1])}
        assert {"/work/planted", "/tmp/planted", "/dev/shm/planted", "shm", "processes"} <= kinds
        for i in range(50):
            planted = await session.run(session_request(tag, PLANT))
            assert planted.ok and planted.stdout == b"planted\n", planted
            looked = await session.run(session_request(tag, LOOK))
            assert looked.ok, looked
            if json.loads(looked.stdout):
                leaks.append((i, json.loads(looked.stdout)))
    finally:
        await session.aclose()
    assert leaks == []
    assert not any(tag.encode() in _cmdline(pid) for pid in _pids()), "a planter survived"


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
