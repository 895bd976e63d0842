"""Which isolation layers this host offers: tried, not guessed.

The launcher's ``--probe`` tries namespaces, mounts + pivot_root, seccomp, the
uid drop and rlimits in throw-away children; cgroups are tried here by creating
a slot and writing its limits.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from sandbox_workers.jail.build import Binaries, BuildError, build
from sandbox_workers.jail.cgroups import CgroupLimits, CgroupTree, detect_tree
from sandbox_workers.jail.config import ALL_LAYERS, JailConfig, LayerStatus

__all__ = ["HostLayers", "detect_layers", "probe_host"]

_PROBED_BY_LAUNCHER = ("namespaces", "mounts", "seccomp", "uid", "rlimits")
_PROBE_LIMITS = CgroupLimits(memory_bytes=64 << 20, max_processes=8, cpu_cores=1.0)


@dataclass
class HostLayers:
    """Detection results plus what a sandbox keeps using afterwards."""

    layers: list[LayerStatus]
    binaries: Binaries | None
    tree: CgroupTree | None

    def active(self, name: str) -> bool:
        return any(layer.name == name and layer.active for layer in self.layers)


def _launcher_probe(binaries: Binaries, config: JailConfig) -> dict[str, tuple[bool, str]]:
    config.root_mountpoint.mkdir(parents=True, exist_ok=True)
    argv = [str(binaries.launcher), "--probe", "--root", str(config.root_mountpoint)]
    try:
        # S603: our own launcher, argv list, empty environment, no shell.
        proc = subprocess.run(  # noqa: S603
            argv, capture_output=True, text=True, timeout=30, check=False, env={}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {name: (False, f"launcher probe failed: {exc}") for name in _PROBED_BY_LAUNCHER}
    found: dict[str, tuple[bool, str]] = {}
    for line in proc.stdout.splitlines():
        name, _, rest = line.partition(" ")
        state, _, detail = rest.partition(" ")
        found[name] = (state == "ok", detail)
    return found


_NO_CPU_COUNTER = (
    "time limits fall back to per-process CPU times (every process of the jail's /proc;"
    " without a pid namespace, the program's own process and its exited children)"
)


def _cgroup_probe(config: JailConfig) -> tuple[CgroupTree | None, dict[str, tuple[bool, str]]]:
    names = ("cgroup_memory", "cgroup_pids", "cgroup_cpu", "cpu_time")
    try:
        tree = detect_tree(config.cgroup_parent, config.cgroup_root)
    except OSError as exc:
        return None, {n: (False, f"cannot create cgroups: {exc}") for n in names}
    if tree is None:
        return None, {n: (False, "no cgroup hierarchy with memory or pids") for n in names}
    try:
        slot = tree.new_slot()
        try:
            slot.prepare(_PROBE_LIMITS)
        finally:
            slot.remove()
    except OSError as exc:
        tree.close()
        return None, {n: (False, f"cannot write cgroup limits: {exc}") for n in names}
    where = f"cgroup v{tree.version}"
    counter = "cpuacct.usage" if tree.version == 1 else "cpu.stat"
    return tree, {
        "cgroup_memory": (tree.memory, where if tree.memory else f"{where}: no memory controller"),
        "cgroup_pids": (tree.pids, where if tree.pids else f"{where}: no pids controller"),
        "cgroup_cpu": (tree.cpu, where if tree.cpu else f"{where}: no cpu controller"),
        "cpu_time": (
            tree.cpu_accounting,
            f"{where} {counter}: time limits count the CPU time of every process and thread"
            if tree.cpu_accounting
            else f"{where}: no cpuacct controller: {_NO_CPU_COUNTER}",
        ),
    }


def probe_host(config: JailConfig) -> HostLayers:
    """Try every layer; the returned tree (if any) is owned by the caller."""
    found: dict[str, tuple[bool, str]] = {}
    binaries: Binaries | None = None
    try:
        binaries = build(config.bin_dir)
        found["launcher"] = (True, str(binaries.launcher))
    except (BuildError, OSError) as exc:
        found["launcher"] = (False, str(exc))
    if binaries is not None:
        found.update(_launcher_probe(binaries, config))
    tree, cgroup_found = _cgroup_probe(config)
    found.update(cgroup_found)
    layers: list[LayerStatus] = []
    for name in ALL_LAYERS:
        active, detail = found.get(name, (False, "needs the launcher"))
        if name in config.disabled:
            active, detail = False, "disabled by configuration"
        elif name == "cpu_time" and active and not _cgroups_in_use(layers):
            active, detail = False, f"the cgroup layers are off: {_NO_CPU_COUNTER}"
        layers.append(LayerStatus(name, active, detail or "ok", required=name in config.required))
    return HostLayers(layers=layers, binaries=binaries, tree=tree)


def _cgroups_in_use(layers: list[LayerStatus]) -> bool:
    # JailSandbox keeps its cgroup tree only for an active controller layer.
    cgroups = ("cgroup_memory", "cgroup_pids", "cgroup_cpu")
    return any(layer.active for layer in layers if layer.name in cgroups)


def detect_layers(config: JailConfig) -> list[LayerStatus]:
    """Every isolation layer, active or not and why (used by ``rewardbus doctor``)."""
    host = probe_host(config)
    if host.tree is not None:
        host.tree.close()
    return host.layers
