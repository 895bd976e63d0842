"""The seccomp filter's decisions, read off the filter itself by a classic-BPF emulator.

The filter is a binary search on the syscall number (``rbjail_layers.c``); these
tests check that the search answers for every number what the rules say, and
that the argument checks of clone, socket and personality hold, without a kernel
in the loop (``test_jail.py`` runs the real thing on a sample of syscalls).
"""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from sandbox_workers.jail import JailConfig
from sandbox_workers.jail.layers import LayerLibrary, load_layers

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
X32_BIT = 0x40000000
LAST_KNOWN = 462  # RBJAIL_LAST_KNOWN_SYSCALL
ALLOW = 0x7FFF0000
KILL_PROCESS = 0x80000000
CLONE, SOCKET, PERSONALITY = 56, 41, 135
NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


def deny(err: int) -> int:
    return 0x00050000 | err  # SECCOMP_RET_ERRNO


def run(program: list[tuple[int, int, int, int]], nr: int, arch: int, args: tuple[int, ...]) -> int:
    """What the filter returns for one syscall (struct seccomp_data: nr, arch, ip, args)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))
    a, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            (a,) = struct.unpack_from("<I", data, k)
            pc += 1
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            a &= k
            pc += 1
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            taken = {0x15: a == k, 0x35: a >= k, 0x25: a > k, 0x45: a & k != 0}[code]
            pc += 1 + (jt if taken else jf)


@pytest.fixture(scope="module")
def layers() -> LayerLibrary:
    return load_layers(JailConfig())


def test_every_syscall_number_gets_what_the_rules_say(layers: LayerLibrary) -> None:
    program = layers.seccomp_filter()
    denials = layers.seccomp_denials()
    assert denials[101] == errno.EPERM and denials[435] == errno.ENOSYS  # ptrace, clone3
    assert len(denials) >= 50
    for nr in range(LAST_KNOWN + 40):
        got = run(program, nr, AUDIT_ARCH_X86_64, (0, 0))
        if nr > LAST_KNOWN:
            assert got == deny(errno.ENOSYS), nr
        elif nr in denials:
            assert got == deny(denials[nr]), nr
        elif nr not in (CLONE, SOCKET, PERSONALITY):
            assert got == ALLOW, nr
        assert run(program, nr | X32_BIT, AUDIT_ARCH_X86_64, ()) == deny(errno.ENOSYS), nr
        assert run(program, nr, AUDIT_ARCH_I386, ()) == KILL_PROCESS, nr


def test_the_argument_checks(layers: LayerLibrary) -> None:
    program = layers.seccomp_filter()

    def call(nr: int, *args: int) -> int:
        return run(program, nr, AUDIT_ARCH_X86_64, args)

    assert call(CLONE, 0x11) == ALLOW  # fork: SIGCHLD
    assert call(CLONE, 0x3D0F00) == ALLOW  # a thread
    for flag in range(17, 31):
        if 1 << flag & NS_FLAGS:
            assert call(CLONE, 1 << flag | 0x11) == deny(errno.EPERM), hex(1 << flag)
    for family in (socket.AF_UNIX, socket.AF_NETLINK, socket.AF_INET, socket.AF_INET6):
        assert call(SOCKET, family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) == ALLOW
    assert call(SOCKET, socket.AF_INET, socket.SOCK_RAW) == deny(errno.EPERM)
    assert call(SOCKET, socket.AF_INET6, socket.SOCK_RAW | socket.SOCK_NONBLOCK) == deny(
        errno.EPERM
    )
    for refused in (17, 40):  # AF_PACKET, AF_VSOCK
        assert call(SOCKET, refused, socket.SOCK_STREAM) == deny(errno.EAFNOSUPPORT)
    assert call(PERSONALITY, 0xFFFFFFFF) == ALLOW and call(PERSONALITY, 0) == ALLOW
    assert call(PERSONALITY, 0x0040000) == deny(errno.EPERM)  # ADDR_NO_RANDOMIZE
