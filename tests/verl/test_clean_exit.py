"""A verl process that used rewardbus exits clean: its Kafka clients stopped, reply topics deleted.

verl never stops what a reward manager or ``compute_score`` starts, and its loops
end in three ways (never closed, closed by ``asyncio.run``, running in an actor's
thread at exit); ``exit_child.py`` uses all three, in a process of its own, against
the real broker and real sandbox workers.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

from schemas import KafkaSettings

pytestmark = pytest.mark.integration

CHILD = Path(__file__).with_name("exit_child.py")


@pytest.mark.timeout(420)
async def test_a_verl_process_stops_its_clients_and_deletes_its_reply_topics(
    verl_sandbox_workers: KafkaSettings, verl_tokenizer_dir: Path
) -> None:
    kafka = verl_sandbox_workers
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        kafka.bootstrap_servers,
        kafka.topics.prefix,
        str(verl_tokenizer_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), timeout=360)
    stderr = err.decode()
    assert child.returncode == 0, stderr[-4000:]
    replies = json.loads(out.decode().strip().splitlines()[-1])
    # verl's loop, two asyncio.run loops, the actor thread's loop: one client each.
    assert len(set(replies)) == 4, replies
    assert all(kafka.topics.is_reply_topic(topic) for topic in replies), replies
    for complaint in ("Unclosed", "Task was destroyed", "never awaited", "not stopped at exit"):
        assert complaint not in stderr, stderr[-4000:]
    # Each client deleted its reply topic as it stopped (the broker acknowledged it).
    # Whether the name stays free is the broker's affair: one that auto-creates topics
    # (the embedded one) makes it again at a worker's next metadata refresh.
    deleted = re.findall(r"deleted reply topic (\S+)", stderr)
    assert sorted(deleted) == sorted(replies), stderr[-4000:]
