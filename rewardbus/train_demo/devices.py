"""The learner's device, chosen at run time: ``auto``, ``cpu``, ``cuda`` or ``npu``.

Ascend NPUs come through ``torch-npu`` (the ``npu`` extra). It is imported only
when asked for, or, under ``auto``, when it is installed: importing it registers
the ``npu`` device with torch, and a CPU install must not need it.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Literal

import torch

from rewardbus.errors import Unavailable

__all__ = ["DeviceChoice", "DeviceUnavailable", "empty_cache", "resolve_device"]

DeviceChoice = Literal["auto", "cpu", "cuda", "npu"]


class DeviceUnavailable(Unavailable):
    """The device asked for is not usable on this host (not retriable)."""


def _npu_available(required: bool) -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        if required:
            raise DeviceUnavailable(
                "--device npu needs torch-npu (pip install 'rewardbus[npu]') and an Ascend NPU"
            )
        return False
    importlib.import_module("torch_npu")  # registers torch.npu
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and npu.is_available())


def resolve_device(choice: DeviceChoice) -> torch.device:
    """The torch device for ``choice``; ``auto`` prefers CUDA, then an NPU, then the CPU."""
    if choice == "cpu":
        return torch.device("cpu")
    if choice == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailable("--device cuda: torch sees no CUDA device")
        return torch.device("cuda")
    if choice == "npu":
        if not _npu_available(required=True):
            raise DeviceUnavailable("--device npu: torch-npu sees no Ascend NPU")
        return torch.device("npu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _npu_available(required=False):
        return torch.device("npu")
    return torch.device("cpu")


def empty_cache(device: torch.device) -> None:
    """Return cached allocator blocks between steps, where the device keeps them.

    CUDA and NPU allocators hold freed blocks for reuse; a long demo on a shared
    accelerator gives them back each step. The CPU has no such cache.
    """
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "npu":
        npu = getattr(torch, "npu", None)
        if npu is not None:
            npu.empty_cache()
