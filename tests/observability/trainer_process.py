"""A trainer process for the tracing tests (run as a script, not collected by pytest).

``python trainer_process.py BOOTSTRAP TOPIC_PREFIX INPUT.json``: publishes the
problems, then, under a ``trainer step`` span of its own (as a trainer's step
would be), the manifest and the completions of ``INPUT.json``; its spans go to
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as service ``rewardbus-trainer``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import msgspec
from opentelemetry import trace

from producers import RolloutProducer
from rewardbus.telemetry import configure_tracing
from schemas import BatchManifest, Completion, KafkaSettings, ProblemRecord, Topics

SERVICE = "rewardbus-trainer"
STEP_SPAN = "trainer step"


class TrainerInput(msgspec.Struct):
    manifest: BatchManifest
    completions: list[Completion]
    problems: list[ProblemRecord] = []


async def publish(bootstrap: str, prefix: str, data: TrainerInput) -> None:
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap, topics=Topics(prefix=prefix), client_id="trainer"
    )
    tracer = trace.get_tracer("tests.trainer")
    async with RolloutProducer(kafka) as producer:
        for problem in data.problems:
            await producer.publish_problem(problem)
        with tracer.start_as_current_span(STEP_SPAN, attributes={"rewardbus.policy_version": 3}):
            await producer.publish_manifest(data.manifest)
            await producer.publish_many(data.completions)


def main() -> None:
    bootstrap, prefix, path = sys.argv[1:4]
    data = msgspec.json.decode(Path(path).read_bytes(), type=TrainerInput)
    _, flush = configure_tracing(SERVICE, env=os.environ)
    try:
        asyncio.run(publish(bootstrap, prefix, data))
    finally:
        flush()


if __name__ == "__main__":
    main()
