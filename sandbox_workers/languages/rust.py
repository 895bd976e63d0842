"""Rust with the host's stable toolchain, called directly (not through rustup)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sandbox_workers.languages.base import (
    CompileStep,
    Language,
    Launch,
    Toolchain,
    probe_version,
    read_only,
    resolve_binary,
)
from sandbox_workers.languages.native import gcc_mounts
from schemas import Limits

__all__ = ["Rust"]

BINARY = "main"


# What the rustup proxy reads to pick a toolchain.
_RUSTUP_ENV = ("HOME", "RUSTUP_HOME", "CARGO_HOME", "RUSTUP_TOOLCHAIN")


def _sysroot() -> Path | None:
    # ~/.cargo/bin/rustc is the rustup proxy (a symlink to rustup that dispatches
    # on argv[0], so it must not be resolved); it needs ~/.rustup and its
    # settings. Ask it once, on the host, where the real toolchain lives.
    rustc = shutil.which("rustc")
    if rustc is None:
        return None
    env = {name: os.environ[name] for name in _RUSTUP_ENV if name in os.environ}
    printed = probe_version([rustc, "--print", "sysroot"], env=env)
    if printed is None:
        return None
    sysroot = Path(printed).resolve()
    return sysroot if (sysroot / "bin" / "rustc").is_file() else None


class Rust(Language):
    """Rust 2021 edition, ``rustc -O``; linked by the system C compiler."""

    name = "rust"
    aliases = frozenset({"rust", "rs"})
    fence_tags = frozenset({"rust", "rs"})
    extension = "rs"

    def discover(self, state_dir: Path) -> Toolchain | None:
        del state_dir
        sysroot = _sysroot()
        linker = resolve_binary("cc")
        if sysroot is None or linker is None:
            return None
        rustc = sysroot / "bin" / "rustc"
        version = probe_version([str(rustc), "--version"])
        if version is None:
            return None
        return Toolchain(
            language=self.name,
            version=version.replace(" ", "-"),
            paths={"rustc": str(rustc), "linker": str(linker)},
            mounts=read_only(sysroot, linker, *gcc_mounts(linker)),
        )

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        return CompileStep(
            argv=(
                toolchain.paths["rustc"],
                "-O",
                "--edition",
                "2021",
                "-C",
                f"linker={toolchain.paths['linker']}",
                "-o",
                BINARY,
                source_name,
            ),
            entry=BINARY,
            collect=(BINARY,),
            executables=frozenset({BINARY}),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del toolchain, limits
        return Launch(argv=(f"./{entry}",))
