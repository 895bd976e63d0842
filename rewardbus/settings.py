"""Settings read once, at the edge, from the environment and CLI flags."""

from __future__ import annotations

from collections.abc import Mapping

from schemas import KafkaSettings, Topics

__all__ = ["ENV_BOOTSTRAP", "ENV_TOPIC_PREFIX", "kafka_settings"]

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
    """Flags win over the environment; None when no cluster is named at all."""
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
