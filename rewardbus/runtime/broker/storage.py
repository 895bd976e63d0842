"""Formatting a broker's storage with Kafka's StorageTool before its first start."""

from __future__ import annotations

import signal
import subprocess
import time

from rewardbus.runtime.broker.config import BrokerConfig
from rewardbus.runtime.broker.errors import BrokerError
from rewardbus.runtime.broker.jvm import KafkaRuntime
from rewardbus.runtime.broker.layout import DataLayout
from rewardbus.runtime.broker.server_properties import new_cluster_id
from rewardbus.runtime.reaped_child import parent_death_signal

__all__ = ["format_storage"]


def format_storage(
    runtime: KafkaRuntime,
    config: BrokerConfig,
    layout: DataLayout,
    cds: list[str],
    deadline: float,
) -> None:
    """Format `layout.log_dir` for `config`'s cluster; BrokerError with the tool's output."""
    argv = [
        *runtime.command(config, layout.log4j, cds),
        "kafka.tools.StorageTool",
        "format",
        # A static voter set (a cluster) needs no bootstrap controller of its own.
        *([] if config.quorum_voters else ["--standalone"]),
        "--cluster-id",
        config.cluster_id or new_cluster_id(),
        "--config",
        str(layout.server_properties),
    ]
    timeout_s = max(deadline - time.monotonic(), 1.0)
    try:
        result = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            argv,
            cwd=layout.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
            preexec_fn=parent_death_signal(signal.SIGKILL),
        )
    except subprocess.TimeoutExpired as exc:
        raise BrokerError(f"formatting Kafka storage took over {timeout_s:.0f}s") from exc
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        raise BrokerError(f"formatting Kafka storage failed (exit {result.returncode}):\n{output}")
