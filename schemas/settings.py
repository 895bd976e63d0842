"""Connection settings shared by every component that talks to Kafka.

A frozen value object, parsed once at the edge (the CLI, verl's reward manager
and tool) and passed down. :func:`kafka_settings` is the one reading of the
``REWARDBUS_*`` variables: every edge hands it the environment it was given, and
its own options, which win.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.topics import Topics

__all__ = ["ENV_BOOTSTRAP", "ENV_SECURITY", "ENV_TOPIC_PREFIX", "KafkaSettings", "kafka_settings"]

ENV_BOOTSTRAP = "REWARDBUS_BOOTSTRAP_SERVERS"
ENV_TOPIC_PREFIX = "REWARDBUS_TOPIC_PREFIX"
ENV_SECURITY = "REWARDBUS_SECURITY_PROTOCOL"


@dataclass(frozen=True)
class KafkaSettings:
    """Where the cluster is and how to reach it.

    ``client_options`` passes extra keyword arguments (TLS, SASL) straight to
    every aiokafka client.
    """

    bootstrap_servers: str
    topics: Topics = field(default_factory=Topics)
    client_id: str = "rewardbus"
    security_protocol: str = "PLAINTEXT"
    client_options: dict[str, Any] = field(default_factory=dict)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments common to aiokafka producers, consumers and admins."""
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            **self.client_options,
        }


def kafka_settings(
    env: Mapping[str, str],
    *,
    bootstrap: str | None = None,
    topic_prefix: str | None = None,
    security_protocol: str | None = None,
    client_id: str = "rewardbus",
    client_options: Mapping[str, Any] | None = None,
) -> KafkaSettings | None:
    """Options win over the environment; None when no cluster is named at all.

    ``topic_prefix`` None: the environment's (default none); a string, even an
    empty one, is the prefix. ``security_protocol`` None: the environment's
    (default ``PLAINTEXT``).
    """
    servers = bootstrap or env.get(ENV_BOOTSTRAP)
    if not servers:
        return None
    prefix = topic_prefix if topic_prefix is not None else env.get(ENV_TOPIC_PREFIX, "")
    return KafkaSettings(
        bootstrap_servers=servers,
        topics=Topics(prefix=prefix),
        client_id=client_id,
        security_protocol=security_protocol or env.get(ENV_SECURITY, "PLAINTEXT"),
        client_options=dict(client_options or {}),
    )
