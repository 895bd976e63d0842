"""A net namespace shared by consecutive executions must look new to each of them.

A slot's cold jails, and a warm zygote's executions, share a (loopback-only) net
namespace only while they leave no trace in it (JailConfig.fresh_net). These
programs leave every kind of trace a program without privileges can (a TIME_WAIT
socket, counters, sockets kept alive past their program) and the next execution
looks for them, on both paths, sharing or not.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from sandbox_workers.jail import JailSandbox
from sandbox_workers.jail.process import Launch, Spawner
from sandbox_workers.pool import PoolConfig
from tests.sandbox.jails import bare_options, bare_spawner, finished, launched, py, strict_sandbox

PATHS = {"warm": PoolConfig(size=1, prewarm=1.0), "cold": PoolConfig(enabled=False)}


def sandbox_on(path: str, *, fresh_net: bool = False) -> JailSandbox:
    return strict_sandbox(PATHS[path], fresh_net=fresh_net)


def all_served_as(sandbox: JailSandbox, path: str) -> bool:
    stats = sandbox.pool_stats
    return stats is None if path == "cold" else stats is not None and stats.cold == 0


TCP_PLANT = (
    "import socket\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 47555)); s.listen()\n"
    "c = socket.create_connection(('127.0.0.1', 47555)); a, _ = s.accept()\n"
    "a.close(); c.recv(1); c.close(); s.close()\n"  # the accepted side closes first: TIME_WAIT
    "print('planted')"
)
UDP_PLANT = (
    "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 9))"
)
TCP_LOOK = (
    "import os, socket\n"
    "udp = [line for line in open('/proc/net/snmp') if line.startswith('Udp:')][1].split()\n"
    "s = socket.socket()\n"
    "try:\n"
    "    s.bind(('127.0.0.1', 47555)); bound = 'bound'\n"
    "except OSError as e:\n"
    "    bound = e.errno\n"
    "print(bound, udp[1], udp[4], os.readlink('/proc/self/ns/net'))"  # InDatagrams, OutDatagrams
)


@pytest.mark.sandbox
@pytest.mark.parametrize("fresh_net", [False, True])
@pytest.mark.parametrize("path", PATHS)
async def test_network_traces_never_reach_the_next_execution(path: str, fresh_net: bool) -> None:
    sandbox = sandbox_on(path, fresh_net=fresh_net)
    try:
        for plant in (TCP_PLANT, UDP_PLANT):
            assert (await sandbox.execute(py(plant))).ok
            looked = (await sandbox.execute(py(TCP_LOOK))).stdout.split()
            # The port is free (no TIME_WAIT) and the counters are a new namespace's.
            assert looked[:3] == [b"bound", b"0", b"0"], looked
        assert all_served_as(sandbox, path)
    finally:
        await sandbox.aclose()


# Sockets that outlive their program without sending a packet: kept in flight in
# a unix socket of their own, they stay alive (their abstract names bound, their
# port taken) until the kernel's unix garbage collector runs.
SOCKET_PLANT = (
    "import array, socket\n"
    "s = socket.socket(socket.AF_UNIX); s.bind('\\0rb-planted'); s.listen()\n"
    "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 47556))\n"
    "a, b = socket.socketpair()\n"
    "fds = array.array('i', [s.fileno(), u.fileno(), a.fileno(), b.fileno()])\n"
    "b.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])\n"
    "a.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds[2:])])\n"
    "print(open('/proc/net/unix').read().count('rb-planted'))"
)
SOCKET_LOOK = (
    "import socket\n"
    "c = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    c.connect('\\0rb-planted'); seen = 'connected'\n"
    "except OSError as e:\n"
    "    seen = e.errno\n"
    "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "try:\n"
    "    u.bind(('127.0.0.1', 47556)); bound = 'bound'\n"
    "except OSError as e:\n"
    "    bound = e.errno\n"
    "print(seen, bound, open('/proc/net/unix').read().count('rb-planted'))"
)


@pytest.mark.sandbox
@pytest.mark.parametrize("fresh_net", [False, True])
@pytest.mark.parametrize("path", PATHS)
async def test_sockets_an_execution_left_alive_never_reach_the_next(
    path: str, fresh_net: bool
) -> None:
    sandbox = sandbox_on(path, fresh_net=fresh_net)
    try:
        for _ in range(2):
            planted = await sandbox.execute(py(SOCKET_PLANT))
            assert planted.ok and planted.stdout == b"1\n", planted
            # At once, before the collector could run: no name, the port free.
            looked = await sandbox.execute(py(SOCKET_LOOK))
            assert looked.stdout == f"{errno.ECONNREFUSED} bound 0\n".encode(), looked
        assert all_served_as(sandbox, path)
    finally:
        await sandbox.aclose()


QUIET = "import os; print(os.readlink('/proc/self/ns/net'))"


@pytest.mark.sandbox
@pytest.mark.parametrize("path", PATHS)
async def test_the_network_namespace_is_renewed_only_after_use(path: str) -> None:
    sandbox = sandbox_on(path)
    try:
        first = (await sandbox.execute(py(QUIET))).stdout
        assert (await sandbox.execute(py(QUIET))).stdout == first  # nothing sent: kept
        assert (await sandbox.execute(py(TCP_PLANT))).ok
        assert (await sandbox.execute(py(QUIET))).stdout != first
        assert all_served_as(sandbox, path)
        if path == "warm":
            assert sandbox.pool_stats is not None
            assert sandbox.pool_stats.served == 4 and sandbox.pool_stats.started == 1
    finally:
        await sandbox.aclose()


@pytest.mark.sandbox
async def test_concurrent_cold_jails_never_share_a_network_namespace() -> None:
    sandbox = sandbox_on("cold")
    looked = "import os, time; print(os.readlink('/proc/self/ns/net')); time.sleep(0.3)"
    try:
        for _ in range(3):
            results = await asyncio.gather(*(sandbox.execute(py(looked)) for _ in range(3)))
            assert all(result.ok for result in results), results
            assert len({result.stdout for result in results}) == 3, results
    finally:
        await sandbox.aclose()


async def started(spawner: Spawner, workdir: Path, sleep_s: float) -> Launch:
    """A jail of ``spawner`` that prints its net namespace, then sleeps."""
    program = ["/bin/sh", "-c", f"readlink /proc/self/ns/net; sleep {sleep_s}"]
    return await launched(spawner, bare_options(workdir, *program))


@pytest.mark.sandbox
async def test_a_jail_spawned_while_the_last_one_runs_gets_a_namespace_of_its_own(
    tmp_path: Path,
) -> None:
    """The spawner's branch no JailSandbox reaches: a slot given back before its
    jail ended (possible only where no cgroup shows what is left in it)."""
    strict_sandbox(PATHS["cold"]).close()  # fails where this host has no strict jail
    spawner = bare_spawner(share_net=True)
    try:
        running = await started(spawner, tmp_path, 1)
        meanwhile = await finished(await started(spawner, tmp_path, 0))
        first = await finished(running)
        after = [await finished(await started(spawner, tmp_path, 0)) for _ in range(2)]
    finally:
        spawner.close()
    assert meanwhile != first
    assert after == [meanwhile, meanwhile]  # quiet consecutive jails do share


# A session's runs: each one's stdin picks a plant, or the look.
SESSION_PROGRAM = (
    "import sys\n"
    "what = sys.stdin.read().strip()\n"
    "if what == 'look':\n"
    "    exec(LOOK_TCP + '\\n' + LOOK_SOCKETS)\n"
    "elif what:\n"
    "    exec(PLANTS[what])\n"
)


@pytest.mark.sandbox
async def test_a_sessions_runs_never_see_what_the_run_before_left_in_the_network() -> None:
    sandbox = sandbox_on("cold")
    plants = {"tcp": TCP_PLANT, "udp": UDP_PLANT, "sockets": SOCKET_PLANT}
    source = (
        f"PLANTS = {plants!r}\nLOOK_TCP = {TCP_LOOK!r}\nLOOK_SOCKETS = {SOCKET_LOOK!r}\n"
        + SESSION_PROGRAM
    )
    try:
        session = sandbox.session(py(source))
        assert session is not None
        try:

            async def run(stdin: str) -> bytes:
                result = await session.run(py(source, stdin=stdin.encode()))
                assert result.ok, result
                return result.stdout

            pristine = f"{errno.ECONNREFUSED} bound 0\n".encode()
            first = (await run("look")).split(b"\n", 1)
            assert first[0].split()[:3] == [b"bound", b"0", b"0"] and first[1] == pristine
            assert await run("look") == b"\n".join(first)  # nothing sent: the same namespace
            for plant in plants:
                await run(plant)
                looked = (await run("look")).split(b"\n", 1)
                assert looked[0].split()[:3] == [b"bound", b"0", b"0"], (plant, looked)
                assert looked[1] == pristine, (plant, looked)
        finally:
            await session.aclose()
    finally:
        await sandbox.aclose()
