"""Tool calls of multi-turn rollouts: live interpreter sessions served over Kafka."""

from sandbox_workers.tools.session import (
    CellResult,
    CellStatus,
    LiveSession,
    SessionFactory,
    SessionLimits,
)

__all__ = ["CellResult", "CellStatus", "LiveSession", "SessionFactory", "SessionLimits"]
