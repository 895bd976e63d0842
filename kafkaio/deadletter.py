"""The dead-letter writer: what could not be processed goes to the DLQ with why."""

from __future__ import annotations

import asyncio
import logging

from kafkaio.produce import send_with_retries
from kafkaio.protocols import Producer
from kafkaio.records import Delivery, Record
from schemas import CONTENT_TYPE, DeadLetter, DeadLetterErrorType, DeadLetterStage, encode

__all__ = ["DeadLetterWriter"]

log = logging.getLogger(__name__)


class DeadLetterWriter:
    """Writes :class:`~schemas.DeadLetter` records (the original bytes plus the reason).

    ``service`` names the writer in every letter. The letter is keyed like its
    input, so the DLQ keeps the inputs of one key in order. ``stage`` and
    ``error_type`` come from closed sets (:data:`~schemas.DeadLetterStage`,
    :data:`~schemas.DeadLetterErrorType`): what the DLQ holds can be counted by them.
    """

    def __init__(self, producer: Producer, topic: str, *, service: str) -> None:
        self._producer = producer
        self.topic = topic
        self.service = service

    def letter(
        self,
        record: Record,
        *,
        reason: str,
        error_type: DeadLetterErrorType,
        stage: DeadLetterStage,
    ) -> DeadLetter:
        """The dead letter for ``record`` (pure: nothing is sent)."""
        return DeadLetter(
            source_topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value or b"",
            reason=reason,
            error_type=error_type,
            stage=stage,
            service=self.service,
        )

    async def send(
        self,
        record: Record,
        *,
        reason: str,
        error_type: DeadLetterErrorType,
        stage: DeadLetterStage,
    ) -> asyncio.Future[Delivery]:
        """Queue the letter; the future resolves on its ack (gather several, then commit)."""
        letter = self._logged(record, reason, error_type, stage)
        return await self._producer.send(
            self.topic, encode(letter), key=record.key, headers=[CONTENT_TYPE]
        )

    async def write(
        self,
        record: Record,
        *,
        reason: str,
        error_type: DeadLetterErrorType,
        stage: DeadLetterStage,
        backoff_s: float,
    ) -> None:
        """Send the letter and wait for its ack, retrying retriable failures for ever.

        The DLQ is the last resort: there is nowhere further to send a record, so
        only an error trying again cannot fix (ProduceError) gets out.
        """
        letter = self._logged(record, reason, error_type, stage)
        await send_with_retries(
            self._producer,
            self.topic,
            encode(letter),
            key=record.key,
            headers=[CONTENT_TYPE],
            attempts=0,
            backoff_s=backoff_s,
        )

    def _logged(
        self, record: Record, reason: str, error_type: DeadLetterErrorType, stage: DeadLetterStage
    ) -> DeadLetter:
        log.warning(
            "dead letter %s:%d@%d (%s): %s",
            record.topic,
            record.partition,
            record.offset,
            stage,
            reason,
        )
        return self.letter(record, reason=reason, error_type=error_type, stage=stage)
