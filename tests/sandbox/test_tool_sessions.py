"""Live Python sessions in the jail (issue 20 item 2): state kept, limits per cell, isolation.

Each session is one jailed interpreter (``JailSandbox.start_session``); these tests run
cells in it the way the tool service will, try to break out of it or into another one,
and check that nothing of a session is left once it is closed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from sandbox_workers.jail.live import JailLiveSession, ResultFrames, request_frame
from sandbox_workers.pool import PoolConfig
from sandbox_workers.tools.session import CellResult, SessionLimits
from tests.sandbox.procs import children_of_this_process, processes_with, spawner_children

pytestmark = pytest.mark.sandbox

LIMITS = SessionLimits(memory_mb=128, max_processes=16, workdir_mb=16, lifetime_s=120.0)
CAP = 4096


@pytest.fixture(scope="module")
def jail() -> Iterator[JailSandbox]:
    try:
        sandbox = JailSandbox(JailConfig(pool=PoolConfig(enabled=False)))
    except IsolationUnavailable as exc:
        pytest.fail(f"this host cannot run the strict jail (see rewardbus doctor): {exc}")
    yield sandbox
    sandbox.close()


@pytest.fixture
async def session(jail: JailSandbox) -> AsyncIterator[JailLiveSession]:
    live = await jail.start_session(LIMITS)
    yield live
    await live.aclose()


async def cell(live: JailLiveSession, code: str, time_s: float = 2.0) -> CellResult:
    return await live.run_cell(code, time_s=time_s, output_bytes=CAP)


async def ok(live: JailLiveSession, code: str) -> str:
    result = await cell(live, code)
    assert result.status == "ok" and result.alive, result
    return result.stdout.decode()


async def test_variables_functions_imports_and_files_live_across_cells(
    session: JailLiveSession,
) -> None:
    await ok(session, "x = 1")
    assert await ok(session, "print(x + 1)") == "2\n"
    await ok(session, "import json\ndef twice(v):\n    return 2 * v\n")
    assert await ok(session, "print(json.dumps(twice(x)))") == "2\n"
    await ok(session, "open('/work/a.txt', 'w').write('in work'); open('/tmp/b', 'w').write('tmp')")
    assert await ok(session, "print(open('a.txt').read(), open('/tmp/b').read())") == (
        "in work tmp\n"
    )
    who = await ok(session, "import os; print(os.getuid(), os.getpid(), os.getcwd())")
    assert who == "65534 2 /work\n"  # unprivileged, pid 2 of its own namespace, in /work


async def test_output_is_captured_at_the_fd_level_per_cell(session: JailLiveSession) -> None:
    code = (
        "import os, subprocess, sys\n"
        "print('py'); os.write(1, b'fd\\n'); sys.stderr.write('err\\n')\n"
        "subprocess.run(['/bin/echo', 'child'])\n"
    )
    result = await cell(session, code)
    assert (result.status, result.stdout, result.stderr) == ("ok", b"py\nfd\nchild\n", b"err\n")
    assert (await cell(session, "pass")).stdout == b""  # nothing carried over


async def test_a_cell_that_raises_shows_its_traceback_and_the_session_goes_on(
    session: JailLiveSession,
) -> None:
    await ok(session, "def bad(n):\n    return n / 0\n")
    result = await cell(session, "y = 5\nbad(y)")
    assert result.status == "error" and result.alive
    assert result.stderr.decode() == (
        "Traceback (most recent call last):\n"
        '  File "<cell 2>", line 2, in <module>\n'
        "    bad(y)\n"
        '  File "<cell 1>", line 2, in bad\n'
        "    return n / 0\n"
        "           ~~^~~\n"
        "ZeroDivisionError: division by zero\n"
    )
    syntax = await cell(session, "def (")
    assert syntax.status == "error" and b"SyntaxError" in syntax.stderr
    assert b"pysession" not in syntax.stderr and b"<string>" not in syntax.stderr
    assert await ok(session, "print(y)") == "5\n"


async def test_an_endless_loop_hits_the_time_limit_and_a_new_session_starts(
    jail: JailSandbox,
) -> None:
    live = await jail.start_session(LIMITS)
    try:
        started = time.monotonic()
        result = await cell(live, "while True: pass", time_s=0.5)
        took = time.monotonic() - started
    finally:
        await live.aclose()
    assert (result.status, result.alive) == ("time_limit", False), result
    assert result.cpu_ms >= 450 and took < 5.0, (result, took)
    assert not live.alive
    assert (await cell(live, "print(1)")).status == "session_lost"
    fresh = await jail.start_session(LIMITS)
    try:
        assert await ok(fresh, "print('fresh')") == "fresh\n"
    finally:
        await fresh.aclose()


async def test_threads_and_children_share_the_cell_s_cpu_time(jail: JailSandbox) -> None:
    live = await jail.start_session(LIMITS)
    code = (
        "import subprocess\n"
        "procs = [subprocess.Popen(['/bin/sh', '-c', 'while :; do :; done']) for _ in range(3)]\n"
        "for p in procs: p.wait()\n"
    )
    try:
        result = await cell(live, code, time_s=0.5)
    finally:
        await live.aclose()
    assert result.status == "time_limit" and result.cpu_ms >= 450, result


async def test_a_sleeping_cell_meets_the_wall_clock_backstop(jail: JailSandbox) -> None:
    live = await jail.start_session(LIMITS)
    try:
        started = time.monotonic()
        result = await cell(live, "import time; time.sleep(60)", time_s=0.2)
        took = time.monotonic() - started
    finally:
        await live.aclose()
    assert (result.status, result.alive) == ("time_limit", False)
    assert 1.0 <= took < 5.0, took  # DEFAULT_BACKSTOP: max(2 x 0.2 s, 0.2 s + 1 s)


@pytest.mark.parametrize(
    "hog", ["while True: keep.append(bytearray(1 << 20))", "keep.append(bytearray(2 << 30))"]
)
async def test_a_memory_hog_hits_the_memory_limit(jail: JailSandbox, hog: str) -> None:
    live = await jail.start_session(LIMITS)
    try:
        await ok(live, "keep = []")
        result = await cell(live, hog, time_s=10.0)
    finally:
        await live.aclose()
    assert (result.status, result.alive) == ("memory_limit", False), result


async def test_output_past_the_cap_is_cut_and_the_session_lives(session: JailLiveSession) -> None:
    result = await cell(session, "for i in range(100_000): print(i)\nx = 'done'")
    assert (result.status, result.truncated, result.alive) == ("output_limit", True, True)
    assert len(result.stdout) == CAP and result.stdout.startswith(b"0\n1\n2\n")
    assert await ok(session, "print(x)") == "done\n"


async def test_a_cell_larger_than_a_pipe_is_sent_whole(session: JailLiveSession) -> None:
    big = "x = '" + "a" * (1 << 20) + "'\nprint(len(x))"
    assert await ok(session, big) == f"{1 << 20}\n"


@pytest.mark.parametrize(
    "code",
    ["import os; os._exit(3)", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
)
async def test_a_cell_that_kills_its_interpreter_ends_the_session(
    jail: JailSandbox, code: str
) -> None:
    live = await jail.start_session(LIMITS)
    try:
        await ok(live, "print('before')")
        result = await cell(live, code)
    finally:
        await live.aclose()
    assert (result.status, result.alive) == ("session_lost", False)


async def test_system_exit_ends_the_session_with_what_the_cell_printed(
    jail: JailSandbox,
) -> None:
    live = await jail.start_session(LIMITS)
    try:
        result = await cell(live, "print('bye'); raise SystemExit(3)")
    finally:
        await live.aclose()
    assert (result.status, result.stdout, result.alive) == ("session_lost", b"bye\n", False)


# Writes to every pipe the interpreter holds open for writing: the result channel too.
FORGE = """
import os, stat
for name in os.listdir('/proc/self/fd'):
    fd = int(name)
    try:
        if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, PAYLOAD)
    except OSError:
        pass
"""


@pytest.mark.parametrize(
    "payload",
    [
        "b'garbage' * 1000",
        # A well-formed frame for the cell running now, with bytes after it.
        "__import__('struct').pack('!4sIBII', b'RBPR', 1, 0, 3, 0) + b'hi\\n' + b'x'",
        # A header that claims far more output than the cap allows.
        "__import__('struct').pack('!4sIBII', b'RBPR', 1, 0, 1 << 30, 0)",
    ],
)
async def test_a_forged_frame_ends_the_session_never_the_worker(
    jail: JailSandbox, payload: str
) -> None:
    live = await jail.start_session(LIMITS)
    try:
        result = await cell(live, f"PAYLOAD = {payload}\n{FORGE}")
        if result.alive:  # the forgery was taken for the result: the next cell sees it all
            result = await cell(live, "print(1)")
    finally:
        await live.aclose()
    assert (result.status, result.alive) == ("session_lost", False), result


async def test_sessions_never_see_each_other(jail: JailSandbox) -> None:
    a = await jail.start_session(LIMITS)
    b = await jail.start_session(LIMITS)
    try:
        await ok(
            a, "secret = 42\nfor p in ('/tmp/secret', '/work/secret'): open(p, 'w').write('s')"
        )
        a_pids = a.processes()
        assert a_pids and not a_pids & b.processes()
        look = (
            "import os\n"
            "print('secret' in globals(), os.path.exists('/tmp/secret'),"
            " os.path.exists('/work/secret'))\n"
            "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        )
        seen, pids = (await ok(b, look)).splitlines()
        assert seen == "False False False"
        assert set(eval(pids)) <= {1, 2}  # its init and itself: nobody else's processes
        for pid in sorted(a_pids):
            signal = await ok(
                b,
                f"import os\ntry:\n    os.kill({pid}, 9)\nexcept OSError as e:\n"
                "    print(type(e).__name__)\nelse:\n    print('sent')\n",
            )
            assert signal == "ProcessLookupError\n", pid
        full = await ok(
            b,
            "import errno\nn = 0\ntry:\n"
            "    for i in range(100):\n"  # files of 16 MB: RLIMIT_FSIZE caps each one
            "        with open(f'/tmp/fill{i}', 'wb') as f:\n"
            "            for _ in range(16): f.write(b'x' * (1 << 20)); f.flush(); n += 1\n"
            "except OSError as e:\n    print(errno.errorcode[e.errno], n)\n",
        )
        assert full.split()[0] == "ENOSPC", full
        assert await ok(a, "open('/tmp/more', 'wb').write(b'y' * (1 << 20)); print(secret)") == (
            "42\n"
        )
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_session_has_no_network(session: JailLiveSession) -> None:
    code = (
        "import socket\n"
        "for host, port in (('127.0.0.1', 19092), ('10.0.0.1', 80), ('8.8.8.8', 53)):\n"
        "    s = socket.socket(); s.settimeout(2)\n"
        "    try:\n"
        "        s.connect((host, port)); print('connected', host)\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
    )
    out = (await ok(session, code)).splitlines()
    assert out[:3] == ["ConnectionRefusedError", "OSError", "OSError"], out
    assert out[3] == "['lo']"


async def test_closed_sessions_leave_no_process_and_closing_twice_is_fine(
    jail: JailSandbox,
) -> None:
    marker = "987654.5"
    sessions = await asyncio.gather(*(jail.start_session(LIMITS) for _ in range(4)))
    pids: set[int] = set()
    for live in sessions:
        await ok(live, f"import subprocess\nsubprocess.Popen(['/bin/sleep', '{marker}'])")
        pids |= live.processes()
        assert live.memory_bytes() > 1 << 20
    assert processes_with(marker)
    for live in sessions:
        await live.aclose()
        await live.aclose()
        assert live.memory_bytes() == 0 and not live.alive
    assert processes_with(marker) == []
    assert [pid for pid in pids if alive_and_not_a_spawner(pid)] == []
    assert children_of_this_process() == [] and spawner_children() == []


def alive_and_not_a_spawner(pid: int) -> bool:
    """Slot spawners stay for the next execution (they run nothing of a session)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"--spawner" not in f.read()
    except OSError:
        return False


async def test_closing_the_sandbox_takes_live_sessions_down() -> None:
    sandbox = JailSandbox(JailConfig(pool=PoolConfig(enabled=False)))
    live = await sandbox.start_session(LIMITS)
    marker = "987655.5"
    await ok(live, f"import subprocess\nsubprocess.Popen(['/bin/sleep', '{marker}'])")
    sandbox.close()
    await live.aclose()
    assert processes_with(marker) == []
    assert children_of_this_process() == []


async def test_a_cancelled_cell_ends_its_session(jail: JailSandbox) -> None:
    live = await jail.start_session(LIMITS)
    try:
        task = asyncio.ensure_future(cell(live, "import time; time.sleep(30)", time_s=20))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not live.alive
    finally:
        await live.aclose()


def test_result_frames_take_only_the_frame_asked_for() -> None:
    frames = ResultFrames()
    hello = b"RBPR" + bytes([0, 0, 0, 0, 0]) + bytes(8)
    assert frames.feed(hello[:5]) is None
    hello_frame = frames.feed(hello[5:])
    assert hello_frame is not None and hello_frame.status == 0
    with pytest.raises(ValueError, match="between cells"):
        frames.feed(b"x")
    frames = ResultFrames()
    frames.feed(hello)
    frames.expect(1, 4)
    with pytest.raises(ValueError, match="longer"):
        frames.feed(b"RBPR\x00\x00\x00\x01\x00\x00\x00\x00\x06\x00\x00\x00\x00")
    assert request_frame(3, 10, "é")[-2:] == "é".encode()
