"""``rewardbus doctor``: which isolation layers and languages work on this host, and why not."""

from __future__ import annotations

from typing import TextIO

from sandbox_workers import Executor, ExecutorConfig, JailConfig, JailSandbox, detect_layers
from sandbox_workers.languages import LANGUAGES

__all__ = ["report"]

_INSTALL = (
    "no toolchain found: infra/docker/languages.sh {language} installs its packages"
    " (TypeScript, Kotlin and Scala also need make toolchains)"
)


def report(out: TextIO) -> int:
    """Print the layer and language table; 0 when strict mode can run here."""
    config = JailConfig(strict=False)
    layers = detect_layers(config)
    out.write("isolation layers\n")
    for layer in layers:
        mark = "ok" if layer.active else ("MISSING" if layer.required else "absent")
        out.write(f"  {mark:8} {layer.name:14} {layer.detail}\n")
    sandbox = JailSandbox(config)
    executor = Executor(ExecutorConfig(worker_id="doctor"), sandbox)
    found = executor.languages
    out.write(f"languages: {len(found)} of {len(LANGUAGES)} ready\n")
    for language in sorted(LANGUAGES):
        if language in found:
            out.write(f"  ok       {language:14} {found[language]}\n")
        else:
            out.write(f"  absent   {language:14} {_INSTALL.format(language=language)}\n")
    missing = [layer.name for layer in layers if layer.required and not layer.active]
    if missing:
        out.write(f"strict mode: REFUSES to start (missing: {', '.join(missing)})\n")
        return 1
    out.write("strict mode: ready (every layer active)\n")
    return 0
