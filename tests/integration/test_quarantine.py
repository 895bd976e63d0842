"""A completion that kills the worker judging it is quarantined, not fed to worker after worker.

Real worker processes (tests/integration/faulty_worker.py: the real worker with one
injected fault, since no real completion is known to crash it any more) on the real
broker, restarted by the test as a supervisor would whenever one dies. One
partition, so every record goes to whichever worker owns it. The poison kills
exactly ``quarantine_after`` (3) workers; the next owner dead-letters it unjudged,
and the good completions published after it are scored.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import Popen, TimeoutExpired

import pytest

from kafkaio import Record
from producers import RolloutProducer
from rewardbus.topics import ensure_topics
from sandbox_workers.watchdog import EXIT_STALLED
from schemas import Completion, DeadLetter, IoSuite, KafkaSettings, RewardEvent, decode
from tests.support.reading import read_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
SUITE = IoSuite(inputs=["2 3\n"], outputs=["5\n"])
QUARANTINE_AFTER = 3  # WorkerConfig's default
STALL_S = 3.0  # the faulty workers' loop watchdog ("wedge")


class Supervisor:
    """Keeps ``size`` faulty-worker processes running, restarting any that dies."""

    def __init__(self, kafka: KafkaSettings, log_dir: Path, size: int) -> None:
        self._kafka = kafka
        self._log_dir = log_dir
        self._size = size
        self.live: list[Popen[bytes]] = []
        self.exits: list[int] = []
        self._started = 0

    def _spawn(self) -> None:
        worker_id = f"w{self._started}"
        self._started += 1
        argv = [
            sys.executable,
            str(Path(__file__).with_name("faulty_worker.py")),
            self._kafka.bootstrap_servers,
            self._kafka.topics.prefix,
            f"{self._kafka.topics.prefix}workers",
            worker_id,
            str(STALL_S),
        ]
        with (self._log_dir / f"{worker_id}.log").open("wb") as log:
            self.live.append(Popen(argv, cwd=ROOT, stdout=log, stderr=log))

    def tend(self) -> None:
        """Reap the dead and start their replacements."""
        for proc in [p for p in self.live if p.poll() is not None]:
            self.live.remove(proc)
            self.exits.append(proc.returncode)
        while len(self.live) < self._size:
            self._spawn()

    def stop(self) -> None:
        for proc in self.live:
            proc.terminate()
        for proc in self.live:
            try:
                proc.wait(timeout=60)
            except TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def supervised(kafka: KafkaSettings, log_dir: Path, size: int) -> Iterator[Supervisor]:
    supervisor = Supervisor(kafka, log_dir, size)
    supervisor.tend()
    try:
        yield supervisor
    finally:
        supervisor.stop()


async def _poll(
    kafka: KafkaSettings,
    topics: list[str],
    done: Callable[[dict[str, list[bytes]]], bool],
    supervisor: Supervisor,
    timeout_s: float,
) -> dict[str, list[bytes]]:
    """Read ``topics`` until ``done(values)``, tending the workers between polls."""

    def by_topic(records: list[Record]) -> dict[str, list[bytes]]:
        values: dict[str, list[bytes]] = {topic: [] for topic in topics}
        for record in records:
            values[record.topic].append(record.value or b"")
        return values

    records = await read_until(
        kafka,
        topics,
        lambda read: done(by_topic(read)),
        what=lambda: f"the records awaited (worker exits {supervisor.exits})",
        timeout_s=timeout_s,
        between=supervisor.tend,
    )
    return by_topic(records)


@pytest.mark.parametrize("fault", ["bug", "abort", "wedge"])
async def test_a_completion_that_kills_its_worker_is_quarantined_after_three_deaths(
    kafka: KafkaSettings, tmp_path: Path, fault: str
) -> None:
    await ensure_topics(kafka, partitions=1)
    poison = Completion(
        sample_id="poison", batch_id="b", code=ADD, tests=SUITE, attributes={"fault": fault}
    )
    good = [
        Completion(sample_id=f"good-{i}", batch_id="b", code=f"# {i}\n{ADD}", tests=SUITE)
        for i in range(3)
    ]
    t = kafka.topics
    with supervised(kafka, tmp_path, size=2) as supervisor:
        async with RolloutProducer(kafka) as producer:
            await producer.publish_many([poison, *good])

        def done(values: dict[str, list[bytes]]) -> bool:
            scored = {decode(v, RewardEvent).sample_id for v in values[t.rewards]}
            return bool(values[t.dlq]) and scored >= {c.sample_id for c in good}

        seen = await _poll(kafka, [t.rewards, t.dlq], done, supervisor, timeout_s=240)
    (letter,) = [decode(v, DeadLetter) for v in seen[t.dlq]]
    assert letter.key == b"poison" and letter.stage == "quarantine", letter
    assert f"{QUARANTINE_AFTER} workers died" in letter.reason
    # Exactly three workers died on it (non-zero), and no one else.
    assert len(supervisor.exits) == QUARANTINE_AFTER, supervisor.exits
    assert all(code != 0 for code in supervisor.exits)
    if fault == "wedge":  # the watchdog ended each wedged worker, none was left hanging
        assert set(supervisor.exits) == {EXIT_STALLED}, supervisor.exits
    rewarded = [decode(v, RewardEvent).sample_id for v in seen[t.rewards]]
    assert "poison" not in rewarded
    assert set(rewarded) == {c.sample_id for c in good}
