"""Connection settings shared by every component that talks to Kafka.

A frozen value object, parsed once at the edge (the CLI) and passed down. It
never reads the environment itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.topics import Topics

__all__ = ["KafkaSettings"]


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
