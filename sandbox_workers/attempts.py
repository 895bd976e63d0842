"""The quarantine ledger: how often each completion record was started and never finished.

A record that crashes or wedges the worker judging it (a bug of ours that this
input triggers) is redelivered to the next member of the group, which dies on it
too: one record kills worker after worker. So before a worker judges a record it
writes the record's start count to the compacted attempts topic (key
``topic:partition:offset``) and waits for the ack; when the record is done (its
reward or dead letter acknowledged) it writes a tombstone (with its next start's
write, in the same produce request, or alone within 50 ms), and when it gives the
record back unfinished on a graceful stop (the drain deadline) it writes the
previous count back. An entry that outlives its worker therefore counts starts
that died with their worker, and it survives restarts, rebalances and the broker
itself. At ``quarantine_after`` such starts the next owner dead-letters the
record unjudged, with the reason.

The record judge asks an :class:`Admission` before it judges a record:
:class:`Quarantine` (the ledger, the threshold and the :class:`SuspectGate`) or,
with quarantine off, :class:`AdmitAll`.

At-least-once makes this safe, not exact: a start whose ack the crash beat was
never judged (the worker waits for the ack first); a lost tombstone or count
restore only counts one start too many, and only for a record that is redelivered
anyway. Every worker replays the whole topic (it holds one live entry per record
in flight) and, on each assignment, waits until it has read everything written
before it, so a new owner sees its predecessor's last write (no record of them
is admitted before that). It follows the topic in fetches the broker holds for up
to 100 ms: between assignments nothing reads the other workers' entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from kafkaio import (
    Clients,
    CompactedTopicReader,
    Delivery,
    KafkaIOError,
    Lifecycle,
    Producer,
    TopicPartition,
    send_with_retries,
)
from sandbox_workers.errors import SandboxWorkerError
from schemas import Attempt, attempt_key, decode, encode

__all__ = ["Admission", "AdmitAll", "AttemptLedger", "Quarantine", "SuspectGate"]

log = logging.getLogger(__name__)


# How long a finished record's tombstone waits for the next start's write (finish).
TOMBSTONE_DELAY_S = 0.05
# How long the ledger's follower lets the broker hold a fetch for more entries.
_FOLLOW_WAIT_MS = 100


class AttemptLedger(Lifecycle):
    """Start counts of the completion records in flight anywhere in the group."""

    def __init__(
        self,
        clients: Clients,
        producer: Producer,
        topic: str,
        *,
        worker_id: str,
        tombstone_delay_s: float = TOMBSTONE_DELAY_S,
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._worker_id = worker_id
        self._counts: dict[bytes, int] = {}
        self._tombstone_delay_s = tombstone_delay_s
        # Keys of finished records whose tombstones wait for the next write (see finish).
        self._finished: list[bytes] = []
        self._flush: asyncio.TimerHandle | None = None
        self._flushing: set[asyncio.Task[None]] = set()
        # Its entries matter to a record's next owner, which waits for them on
        # assignment (caught_up): no fetch answered for every entry of every
        # worker. Answered at once, those fetches cost ~2-2.5 ms of CPU per
        # completion (workers and broker, 2 workers; docs/performance.md).
        self._reader = CompactedTopicReader(
            clients,
            topic,
            self._apply,
            fetch_min_bytes=1 << 20,
            fetch_max_wait_ms=_FOLLOW_WAIT_MS,
        )

    async def start(self) -> None:
        """Replay the ledger and keep following it."""
        await self._reader.start()

    async def stop(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        with contextlib.suppress(KafkaIOError):  # best effort, as every tombstone
            await self._send_tombstones()
        await asyncio.gather(*self._flushing, return_exceptions=True)
        await self._reader.stop()

    async def caught_up(self, timeout_s: float = 30.0) -> None:
        """Return once every entry written so far (by any worker) is applied."""
        await self._reader.wait_caught_up(timeout_s)

    def died_in(self, tp: TopicPartition, offset: int) -> int:
        """How often this record was started and not finished (0: never, or all done)."""
        return self._counts.get(attempt_key(tp.topic, tp.partition, offset), 0)

    async def begin(self, tp: TopicPartition, offset: int) -> int:
        """Count one more start of this record, durably; returns the new count."""
        key = attempt_key(tp.topic, tp.partition, offset)
        count = self._counts.get(key, 0) + 1
        entry = Attempt(count=count, worker_id=self._worker_id)
        # The tombstones waiting go in the same produce request as this start.
        await self._send_tombstones()
        # Judging waits on this write, whatever the broker does (as a dead letter would).
        await send_with_retries(
            self._producer, self._topic, encode(entry), key=key, attempts=0, backoff_s=0.5
        )
        self._counts[key] = count
        return count

    async def finish(self, tp: TopicPartition, offset: int) -> None:
        """The record is done: forget it (a tombstone; not waited for, see the module doc).

        The tombstone rides with the next start's write, or goes out alone after
        ``tombstone_delay_s`` (or at stop): sent on its own, each cost ~1.5 ms of
        CPU per completion, worker and broker together (docs/performance.md). A
        crash before it is sent counts one start too many, as a lost tombstone does.
        """
        key = attempt_key(tp.topic, tp.partition, offset)
        if self._counts.pop(key, None) is None:
            return
        self._finished.append(key)
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(
                self._tombstone_delay_s, self._flush_later
            )

    def _flush_later(self) -> None:
        self._flush = None
        task = asyncio.create_task(self._send_tombstones())
        self._flushing.add(task)
        task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("attempts ledger tombstones not sent: %s", task.exception())

    async def _send_tombstones(self) -> None:
        finished, self._finished = self._finished, []
        for key in finished:
            _logged(await self._producer.send(self._topic, None, key=key))

    async def give_back(self, tp: TopicPartition, offset: int) -> None:
        """The record is handed back unfinished, not because it killed us: undo the start."""
        key = attempt_key(tp.topic, tp.partition, offset)
        count = self._counts.pop(key, 0) - 1
        value = encode(Attempt(count=count, worker_id=self._worker_id)) if count > 0 else None
        if count > 0:
            self._counts[key] = count
        _logged(await self._producer.send(self._topic, value, key=key))

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        if value is None:
            self._counts.pop(key, None)
            return
        self._counts[key] = decode(value, Attempt).count


def _logged(delivery: asyncio.Future[Delivery]) -> None:
    """A write nobody waits for: its failure is logged (it costs one extra count at most)."""

    def report(done: asyncio.Future[Delivery]) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.warning("attempts ledger write failed: %s", done.exception())

    delivery.add_done_callback(report)


class SuspectGate:
    """Judges a suspect (a record that was in flight when a worker died) on its own.

    When a worker dies, every record it had started is counted, the culprit and
    its innocent neighbours alike. A suspect is therefore started only when no other
    counted record is in flight, and nothing else starts until it is done: a death
    while a suspect runs alone is its own. A neighbour is counted at most once (by
    the first death, before it was a suspect), so ``quarantine_after`` >= 2 never
    quarantines it.
    """

    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._normal = 0
        self._suspect = False

    @contextlib.asynccontextmanager
    async def hold(self, *, suspect: bool) -> AsyncIterator[None]:
        """Wait for a turn (alone, for a suspect); yield while judging."""
        async with self._changed:
            if suspect:
                await self._changed.wait_for(lambda: not self._suspect and self._normal == 0)
                self._suspect = True
            else:
                await self._changed.wait_for(lambda: not self._suspect)
                self._normal += 1
        try:
            yield
        finally:
            async with self._changed:
                if suspect:
                    self._suspect = False
                else:
                    self._normal -= 1
                self._changed.notify_all()


class Admission(Protocol):
    """Whether a record may be judged, and the bookkeeping around judging it."""

    async def caught_up(self) -> None:
        """Return once the counts of newly assigned partitions' last owners are known."""
        ...

    async def refusal(self, tp: TopicPartition, offset: int) -> str | None:
        """Why this record is not to be judged again (it is dead-lettered unjudged), or None."""
        ...

    async def refused(self, tp: TopicPartition, offset: int) -> None:
        """The refused record's dead letter is acknowledged: it is done."""
        ...

    def judging(
        self, tp: TopicPartition, offset: int
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Held while an admitted record is judged: its start counted, then settled."""
        ...


class AdmitAll:
    """Quarantine off (``quarantine_after=0``): every record is judged, nothing is counted."""

    async def caught_up(self) -> None:
        return

    async def refusal(self, tp: TopicPartition, offset: int) -> str | None:
        return None

    async def refused(self, tp: TopicPartition, offset: int) -> None:
        return

    def judging(
        self, tp: TopicPartition, offset: int
    ) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()


class Quarantine:
    """Refuses a record once ``after`` workers died judging it; judges a suspect alone."""

    def __init__(self, ledger: AttemptLedger, *, after: int) -> None:
        self._ledger = ledger
        self._after = after
        self._suspects = SuspectGate()
        # Set once the ledger holds what the last owners of this worker's partitions
        # wrote. The consumer hands records of new partitions over while their
        # assignment's callback (caught_up) still runs, and a record judged before
        # its count is read starts counting afresh: a record that kills every
        # worker would never reach the limit.
        self._current = asyncio.Event()

    async def caught_up(self) -> None:
        # Before any record of the new partitions: what their last owner counted.
        self._current.clear()
        try:
            await self._ledger.caught_up()
        finally:
            self._current.set()  # (a catch-up that failed stops nobody for ever)

    async def refusal(self, tp: TopicPartition, offset: int) -> str | None:
        await self._current.wait()
        died = self._ledger.died_in(tp, offset)
        if died < self._after:
            return None
        return (
            f"quarantined: {died} workers died (crashed, wedged or were killed) while judging "
            f"this record; not judged again (quarantine_after={self._after})"
        )

    async def refused(self, tp: TopicPartition, offset: int) -> None:
        await self._ledger.finish(tp, offset)

    @contextlib.asynccontextmanager
    async def judging(self, tp: TopicPartition, offset: int) -> AsyncIterator[None]:
        """Count the start, then settle it.

        Done: forgotten. Handed back for the host's fault (a retriable error) or at the
        drain deadline: the start is undone. Anything else is a bug this record set
        off: the start stays counted (and the worker stops: sandbox_workers.errors).
        """
        async with self._suspects.hold(suspect=self._ledger.died_in(tp, offset) > 0):
            await self._ledger.begin(tp, offset)
            try:
                yield
            except SandboxWorkerError as exc:
                if exc.retriable:  # handed back to the group for a fault of the host, not its own
                    await self._ledger.give_back(tp, offset)
                raise
            except asyncio.CancelledError:  # the drain deadline: handed back, it killed no one
                await self._ledger.give_back(tp, offset)
                raise
            await self._ledger.finish(tp, offset)
