"""Kafka settings, read once at the edge: flags, then the environment, then defaults.

Every command that talks to Kafka reads them here, through :func:`kafka_settings`.
A topic prefix given as a flag wins even when empty: ``--topic-prefix ""`` means
no prefix, whatever ``REWARDBUS_TOPIC_PREFIX`` says.
"""

from __future__ import annotations

from collections.abc import Mapping

from schemas import KafkaSettings, Topics

__all__ = ["ENV_BOOTSTRAP", "ENV_SECURITY", "ENV_TOPIC_PREFIX", "kafka_settings"]

ENV_BOOTSTRAP = "REWARDBUS_BOOTSTRAP_SERVERS"
ENV_TOPIC_PREFIX = "REWARDBUS_TOPIC_PREFIX"
ENV_SECURITY = "REWARDBUS_SECURITY_PROTOCOL"


def kafka_settings(
    env: Mapping[str, str],
    *,
    bootstrap: str | None = None,
    topic_prefix: str | None = None,
    client_id: str = "rewardbus",
) -> KafkaSettings | None:
    """Flags win over the environment; None when no cluster is named at all.

    ``topic_prefix`` None: the environment's (default none); a string, even an
    empty one, is the prefix.
    """
    servers = bootstrap or env.get(ENV_BOOTSTRAP)
    if not servers:
        return None
    prefix = topic_prefix if topic_prefix is not None else env.get(ENV_TOPIC_PREFIX, "")
    return KafkaSettings(
        bootstrap_servers=servers,
        topics=Topics(prefix=prefix),
        client_id=client_id,
        security_protocol=env.get(ENV_SECURITY, "PLAINTEXT"),
    )
