"""The canary batch id space: judge canaries that no learner batch may ever contain.

A canary is a known program with a known verdict, judged by the live worker group
to catch a judge that drifts (an image or toolchain change). Its completions carry a
batch id starting with :data:`CANARY_BATCH_PREFIX`; the aggregator ignores rewards
and manifests in that space and producers refuse learner batches named in it.
"""

from __future__ import annotations

__all__ = ["CANARY_BATCH_PREFIX", "is_canary_batch"]

CANARY_BATCH_PREFIX = "canary-"


def is_canary_batch(batch_id: str) -> bool:
    """Whether ``batch_id`` belongs to the canary space.

    >>> is_canary_batch("canary-host-1"), is_canary_batch("step-12")
    (True, False)
    """
    return batch_id.startswith(CANARY_BATCH_PREFIX)
