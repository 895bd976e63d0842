"""Free TCP ports for the servers rewardbus starts (the broker, a cluster, Jaeger)."""

from __future__ import annotations

import contextlib
import socket

__all__ = ["free_ports"]


def free_ports(host: str, count: int) -> list[int]:
    """Distinct free ports, held open together so the kernel cannot hand one out twice."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
