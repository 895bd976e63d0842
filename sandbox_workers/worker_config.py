"""What a worker is told (:class:`WorkerConfig`) and what it counts (:class:`WorkerStats`).

Shared by the worker's two halves, the loop (:mod:`sandbox_workers.worker_loop`) and
the record judge (:mod:`sandbox_workers.record_judge`), and by the service that
wires them (:mod:`sandbox_workers.service`, which re-exports both).
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from dataclasses import dataclass, field

from kafkaio import ConsumerOptions, ProducerOptions
from schemas import MAX_RECORD_BYTES

__all__ = ["WorkerConfig", "WorkerStats"]


@dataclass(frozen=True)
class WorkerConfig:
    """How one worker process consumes and judges."""

    group_id: str = "rewardbus-workers"
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    concurrency: int = 1
    max_in_flight: int = 0  # records fetched and not done; 0 -> 2 x concurrency
    commit_interval_s: float = 0.5
    drain_timeout_s: float = 30.0
    group_instance_id: str | None = None
    # Failover after a kill -9 takes the session timeout plus one heartbeat: 6 s is the
    # broker's smallest allowed (group.min.session.timeout.ms); a 500 ms heartbeat tells
    # the survivors of a rebalance within half a second (tests/integration/test_faults.py).
    session_timeout_ms: int = 6_000
    # A static member (group_instance_id) keeps its partitions across a restart only if
    # it is back within its session timeout: a worker restart takes 2-6 s on a busy
    # machine, so static members get a longer one (and a dead one fails over that late).
    static_session_timeout_ms: int = 30_000
    heartbeat_interval_ms: int = 500
    # How long a starting worker waits for its topics to exist (a deployment creates
    # them in a job that may finish after the workers start); then TopicNotFound.
    topic_wait_s: float = 120.0
    produce_retry_backoff_s: float = 0.5
    # Retriable produce errors are retried this often before the input is dead-lettered.
    produce_attempts: int = 20
    # A retriable judging fault (the problems table behind) is tried this often before
    # the worker gives the record back to the group (it stops, the record uncommitted).
    transient_attempts: int = 3
    # A response, code or packed program longer than this is dead-lettered unread: no
    # model writes 4 Mi characters, and extracting, fingerprinting and jailing it would
    # hold the worker (the completions topic takes records up to 16 MiB for the suites).
    max_program_chars: int = 4 << 20
    # A record that was being judged when this many workers died (crashed, wedged,
    # killed) is dead-lettered unjudged by the next (sandbox_workers.attempts); 0: off.
    quarantine_after: int = 3
    fetch_max_wait_ms: int = 20
    # How often the consumer-lag gauge is refreshed (from the consumer's own state).
    lag_interval_s: float = 1.0
    result_cache_bytes: int = 256 << 20  # 0 disables the result cache
    problem_store_bytes: int = 1 << 30
    # Anything besides the toolchain that shapes a reward (rewardbus and harness
    # versions): part of every cache fingerprint, so an upgrade never serves stale verdicts.
    runtime_version: str = ""

    @property
    def in_flight_limit(self) -> int:
        return self.max_in_flight or 2 * self.concurrency

    @property
    def effective_session_timeout_ms(self) -> int:
        """The session timeout the consumer uses: longer for a static member."""
        if self.group_instance_id is not None:
            return self.static_session_timeout_ms
        return self.session_timeout_ms

    def consumer_options(self, group_id: str, max_poll_records: int) -> ConsumerOptions:
        """A consumer of this worker's (its completions' or its tool calls') in ``group_id``."""
        return ConsumerOptions(
            group_id=group_id,
            group_instance_id=self.group_instance_id,
            session_timeout_ms=self.effective_session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            max_poll_records=max_poll_records,
            # Partitions are paused whenever the in-flight limit is reached; after a
            # resume the next fetch must not sit in a 500 ms (default) broker long-poll.
            fetch_max_wait_ms=self.fetch_max_wait_ms,
        )

    @staticmethod
    def producer_options() -> ProducerOptions:
        """The worker's producer: rewards, tool results, ledger entries, dead letters."""
        return ProducerOptions(
            acks="all",
            idempotent=True,
            # No linger: a reward, a tool result and a ledger entry are each waited on
            # (docs/performance.md, docs/tools.md).
            linger_ms=0,
            # A dead letter carries the original record, which may be a multi-MB suite.
            max_request_bytes=MAX_RECORD_BYTES,
        )


@dataclass
class WorkerStats:
    """Counters a running worker exposes (and logs on exit)."""

    consumed: int = 0
    rewarded: int = 0
    dead_lettered: int = 0
    cache_hits: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    paused: int = 0
