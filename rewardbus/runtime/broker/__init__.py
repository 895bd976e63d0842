"""An embedded single-node Apache Kafka broker for development, tests and the demo.

It runs the real Kafka (the jars that `make kafka-jars` copies from Maven Central) as a
child JVM in KRaft combined mode (one process is both broker and controller), bound to
127.0.0.1 only. The child can never outlive this Python process: it is spawned with
PR_SET_PDEATHSIG=SIGKILL from a thread that lives exactly as long as the child
(`rewardbus.runtime.reaped_child`).

Errors: every failure is a `BrokerError` (a shell `Unavailable`) whose message says what to do:
java missing, jars missing, the broker died during start-up (with the tail of its log), or
it did not become ready in time. None of them is worth retrying as is.

The modules, one job each:

- `config`: `BrokerConfig`, `KAFKA_VERSION`, `default_kafka_lib`; `errors`: `BrokerError`.
- `jvm`: finding and checking java and the jars; the JVM's argv (`KafkaRuntime`).
- `server_properties`: free ports, cluster ids and the server.properties text.
- `log4j`: the packaged `log4j2.properties`, the one copy (the kafka image uses it too).
- `class_archive`: the JVM's class-data sharing archive (faster start-ups).
- `layout` and `storage`: the data directory's files; formatting storage.
- `readiness`: the ApiVersions probe that says the broker serves clients.
- `broker_log`: the lines of a failed broker's log that say why.
- `embedded`: `EmbeddedBroker`, which puts those together; `serving`: `serve`.
"""

from __future__ import annotations

from rewardbus.runtime.broker.config import KAFKA_VERSION, BrokerConfig, default_kafka_lib
from rewardbus.runtime.broker.embedded import EmbeddedBroker
from rewardbus.runtime.broker.errors import BrokerError
from rewardbus.runtime.broker.log4j import log4j2_properties
from rewardbus.runtime.broker.serving import serve

__all__ = [
    "KAFKA_VERSION",
    "BrokerConfig",
    "BrokerError",
    "EmbeddedBroker",
    "default_kafka_lib",
    "log4j2_properties",
    "serve",
]
