"""Producing with a bounded number of retries for retriable errors."""

from __future__ import annotations

import asyncio
import logging

from kafkaio.errors import KafkaIOError, ProduceError
from kafkaio.protocols import Headers, Producer
from kafkaio.records import Delivery

__all__ = ["send_with_retries"]

log = logging.getLogger(__name__)


async def send_with_retries(
    producer: Producer,
    topic: str,
    value: bytes | None,
    *,
    key: bytes | None = None,
    headers: Headers = (),
    attempts: int,
    backoff_s: float,
) -> Delivery:
    """Send and wait for the ack, trying a retriable failure again after ``backoff_s``.

    Raises :class:`~kafkaio.ProduceError` (``retriable=False``) at once for an error
    that trying again cannot fix, and after ``attempts`` tries for one that might;
    ``attempts=0`` tries for ever (for a last resort such as the dead-letter topic).
    """
    tries = 0
    while True:
        tries += 1
        try:
            return await producer.send_and_wait(topic, value, key=key, headers=headers)
        except KafkaIOError as exc:
            if not exc.retriable or (attempts and tries >= attempts):
                raise ProduceError(
                    f"{exc.reason} (gave up after {tries} {'try' if tries == 1 else 'tries'})",
                    retriable=False,
                ) from exc
            log.warning("produce to %s failed (%s); retrying", topic, exc.reason)
            await asyncio.sleep(backoff_s)
