"""Whether a broker serves clients yet: one Kafka ApiVersions request over a plain socket.

A hand-written probe rather than a Kafka client: it costs one connection and two small
reads, and needs nothing that the broker shell does not already have.
"""

from __future__ import annotations

import socket
import struct

__all__ = ["answers_api_versions"]

_PROBE_CORRELATION_ID = 0x72627573  # "rbus"
_PROBE_CLIENT_ID = b"rewardbus-probe"
# ApiVersions v0 (api key 18) is the one request every Kafka version answers.
_PROBE_REQUEST = (
    struct.pack(">hhih", 18, 0, _PROBE_CORRELATION_ID, len(_PROBE_CLIENT_ID)) + _PROBE_CLIENT_ID
)
_PROBE_FRAME = struct.pack(">i", len(_PROBE_REQUEST)) + _PROBE_REQUEST


def answers_api_versions(host: str, port: int, timeout_s: float) -> bool:
    """True once the broker answers Kafka requests on its client listener.

    A KRaft broker only starts processing client requests after the controller has
    unfenced it, so an answer here means clients can create topics and produce.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(_PROBE_FRAME)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            body = _recv_exact(sock, size)
    except OSError:
        return False
    correlation_id, error_code = struct.unpack_from(">ih", body)
    return bool(correlation_id == _PROBE_CORRELATION_ID and error_code == 0)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        data += chunk
    return data
