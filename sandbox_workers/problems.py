"""The shared test-suite store: the compacted problems topic as a local table.

Completions may reference a test suite by ``problem_id`` (+ ``tests_digest``)
instead of carrying it inline; trainers publish each suite once as a
:class:`~schemas.ProblemRecord`. Every worker replays the topic from the
beginning (all partitions, no consumer group) and follows it.

Errors (``.reason`` says why; ``.retriable`` whether trying again can help)::

    ProblemError
    ├── ProblemNotFound     no inline tests and no such problem, even after catching up
    ├── DigestMismatch      the completion was written against another version of the suite
    └── ProblemTableBehind  not loaded, and the table did not catch up in time, or the
                            broker failed (retriable: the worker tries again, then
                            leaves the record to be redelivered)

Memory: records are kept as their encoded bytes (msgpack is several times
smaller than the decoded Python objects), plus a small LRU of decoded suites for
the problems in use right now. Every problem is kept: evicting one would turn
later completions for it into ``ProblemNotFound``, a wrong outcome, whereas
exceeding ``max_bytes`` only costs memory; so crossing the budget is logged
loudly (and counted in ``stats.over_budget``) instead of enforced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kafkaio import AioClients, Clients, CompactedTopicReader, KafkaIOError, Lifecycle
from sandbox_workers.errors import SandboxWorkerError
from sandbox_workers.lru import ByteLRU
from schemas import (
    Completion,
    KafkaSettings,
    ProblemRecord,
    SchemaError,
    TestSuite,
    decode,
    suite_digest,
)

__all__ = [
    "DigestMismatch",
    "ProblemError",
    "ProblemNotFound",
    "ProblemStats",
    "ProblemStore",
    "ProblemTableBehind",
]

log = logging.getLogger(__name__)


class ProblemError(SandboxWorkerError):
    """A completion's test suite cannot be resolved; ``reason`` says why."""


class ProblemNotFound(ProblemError):
    """No inline tests, and no problem with the referenced id after catching up."""


class ProblemTableBehind(ProblemError):
    """The problem is not loaded yet and the table did not catch up within the bound.

    Transient (a slow broker, a huge backlog of problems): not evidence that the
    problem does not exist.
    """

    retriable = True


class DigestMismatch(ProblemError):
    """The completion's ``tests_digest`` is not the digest of the suite it would be judged on."""


@dataclass
class ProblemStats:
    """What a :class:`ProblemStore` holds and has refused."""

    problems: int = 0
    size_bytes: int = 0
    loaded: int = 0  # records accepted (including updates of a problem)
    corrupt: int = 0  # records skipped: undecodable, key/id mismatch, wrong digest
    over_budget: bool = False


@dataclass(frozen=True)
class _Stored:
    digest: str
    value: bytes


class ProblemStore(Lifecycle):
    """Test suites by ``problem_id``, replayed from the problems topic.

    ``max_bytes`` budgets the encoded records (see the module doc);
    ``hot_bytes`` the decoded suites kept for reuse; ``lookup_timeout_s``
    bounds how long :meth:`resolve` waits for the table to catch up before it
    declares a problem unknown. ``clients`` makes the Kafka clients (default:
    :class:`~kafkaio.AioClients` for ``kafka``).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        max_bytes: int = 1 << 30,
        hot_bytes: int = 64 << 20,
        lookup_timeout_s: float = 10.0,
        metadata_timeout_s: float = 30.0,
        clients: Clients | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.lookup_timeout_s = lookup_timeout_s
        self.stats = ProblemStats()
        self._records: dict[str, _Stored] = {}
        self._hot: ByteLRU[tuple[str, str], TestSuite] = ByteLRU(hot_bytes)
        self._reader = CompactedTopicReader(
            clients or AioClients(kafka),
            kafka.topics.problems,
            self._load,
            metadata_timeout_s=metadata_timeout_s,
        )

    async def start(self) -> None:
        """Start replaying the problems topic (in the background)."""
        await self._reader.start()

    async def stop(self) -> None:
        """Stop following the topic."""
        await self._reader.stop()

    async def wait_caught_up(self, timeout_s: float) -> None:
        """Return once every record on the topic now is loaded (TimeoutError else)."""
        await self._reader.wait_caught_up(timeout_s)

    # -- lookups -----------------------------------------------------------------

    async def resolve(self, completion: Completion) -> TestSuite:
        """The test suite ``completion`` is to be judged on.

        Inline ``tests`` win (checked against ``tests_digest`` when it is set).
        Otherwise ``problem_id`` is looked up; when it is not loaded yet, or its
        digest is not the one the completion expects (the problem may have been
        updated), the table first catches up with the topic, waiting at most
        ``lookup_timeout_s``. Raises :class:`ProblemNotFound` or
        :class:`DigestMismatch`; RuntimeError if the store is not running.
        """
        if completion.tests is None:
            return (await self._resolve_reference(completion))[0]
        if completion.tests_digest is not None:
            _check_digest(completion, suite_digest(completion.tests))
        return completion.tests

    async def resolve_with_digest(self, completion: Completion) -> tuple[TestSuite, str]:
        """Like :meth:`resolve`, plus the suite's digest, for the result-cache fingerprint.

        Suite and digest are read together: a problem updated between two
        separate calls must never pair the new digest with the old suite.
        """
        if completion.tests is None:
            return await self._resolve_reference(completion)
        digest = suite_digest(completion.tests)
        if completion.tests_digest is not None:
            _check_digest(completion, digest)
        return completion.tests, digest

    async def _resolve_reference(self, completion: Completion) -> tuple[TestSuite, str]:
        if completion.problem_id is None:
            raise ProblemNotFound(
                f"completion {completion.sample_id} has neither tests nor problem_id"
            )
        stored = await self._lookup(completion.problem_id)
        if completion.tests_digest not in (None, stored.digest):
            # Perhaps the problem was updated and this table is behind: catch up first.
            stored = await self._lookup(completion.problem_id, refresh=True)
            _check_digest(completion, stored.digest)
        return self._suite(completion.problem_id, stored), stored.digest

    async def _lookup(self, problem_id: str, *, refresh: bool = False) -> _Stored:
        stored = self._records.get(problem_id)
        if stored is not None and not refresh:
            return stored
        behind = await self._catch_up()
        if behind is not None:
            if stored is not None:
                return stored  # what we have is all we can know
            raise ProblemTableBehind(f"problem {problem_id!r} not loaded: {behind}")
        stored = self._records.get(problem_id)
        if stored is None:
            raise ProblemNotFound(f"problem {problem_id!r} is not on {self._reader.topic}")
        return stored

    async def _catch_up(self) -> str | None:
        """Why the table could not catch up with the topic (bounded), or None once it has."""
        try:
            await self._reader.wait_caught_up(self.lookup_timeout_s)
        except TimeoutError:
            return f"the problems table did not catch up within {self.lookup_timeout_s:g} s"
        except KafkaIOError as exc:
            return f"the problems table cannot catch up: {exc.reason}"
        return None

    def _suite(self, problem_id: str, stored: _Stored) -> TestSuite:
        # Keyed by digest too: an updated problem must never be served from the old suite.
        key = (problem_id, stored.digest)
        suite = self._hot.get(key)
        if suite is None:
            suite = decode(stored.value, ProblemRecord).tests  # verified on load
            self._hot.put(key, suite, len(stored.value))
        return suite

    # -- the topic ---------------------------------------------------------------

    def _load(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            self._corrupt(b"", "record without a key")
            return
        if value is None:  # a tombstone: the problem was withdrawn
            self._forget(key.decode(errors="replace"))
            return
        try:
            record = decode(value, ProblemRecord)
        except SchemaError as exc:
            self._corrupt(key, exc.reason)
            return
        reason = _invalid(key, record)
        if reason is not None:
            self._corrupt(key, reason)
            return
        self._keep(record.problem_id, _Stored(record.digest, value))

    def _keep(self, problem_id: str, stored: _Stored) -> None:
        self._forget(problem_id)
        self._records[problem_id] = stored
        self.stats.loaded += 1
        self.stats.problems = len(self._records)
        self.stats.size_bytes += len(stored.value)
        if self.stats.size_bytes > self.max_bytes and not self.stats.over_budget:
            self.stats.over_budget = True
            log.error(
                "problem store over budget: %d problems, %d bytes > max_bytes %d; keeping all "
                "(evicting would fail completions), raise the budget or shard the problems",
                len(self._records),
                self.stats.size_bytes,
                self.max_bytes,
            )

    def _forget(self, problem_id: str) -> None:
        old = self._records.pop(problem_id, None)
        if old is not None:
            self.stats.size_bytes -= len(old.value)
            self.stats.problems = len(self._records)
            self.stats.over_budget = self.stats.size_bytes > self.max_bytes

    def _corrupt(self, key: bytes, reason: str) -> None:
        self.stats.corrupt += 1
        log.error("problems: skipping record %r: %s", key[:80], reason)


def _invalid(key: bytes, record: ProblemRecord) -> str | None:
    """Why ``record`` must not be trusted, or None."""
    if record.problem_id.encode() != key:
        return f"key {key[:80]!r} does not match problem_id {record.problem_id!r}"
    actual = suite_digest(record.tests)
    if record.digest != actual:
        return f"digest {record.digest} is not the suite's digest {actual}"
    return None


def _check_digest(completion: Completion, actual: str) -> None:
    if completion.tests_digest != actual:
        source = (
            "inline tests" if completion.tests is not None else f"problem {completion.problem_id!r}"
        )
        raise DigestMismatch(
            f"completion {completion.sample_id} expects tests {completion.tests_digest}, "
            f"but {source} have digest {actual}"
        )
