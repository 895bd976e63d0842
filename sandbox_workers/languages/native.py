"""C and C++ with the host's GCC."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from sandbox_workers.languages.base import (
    CompileStep,
    Language,
    Launch,
    Toolchain,
    discover_binary,
    read_only,
)
from schemas import Limits

__all__ = ["C", "Cpp", "gcc_mounts"]

BINARY = "main"


def gcc_mounts(driver: Path) -> tuple[Path, ...]:
    """What a GCC compile-and-link needs beyond the driver itself.

    cc1/cc1plus live under libexec, the assembler and linker beside the driver,
    headers and crt objects under include and lib.
    """
    usr = driver.parent.parent
    return (
        driver.parent,
        usr / "lib" / "gcc",
        usr / "libexec" / "gcc",
        usr / "include",
        usr / "lib" / "x86_64-linux-gnu",
    )


class _Gcc(Language):
    driver: ClassVar[str]
    flags: ClassVar[tuple[str, ...]]

    def discover(self, state_dir: Path) -> Toolchain | None:
        del state_dir
        return discover_binary(
            self.name,
            self.driver,
            ["-dumpfullversion"],
            version=lambda v: f"gcc-{v}",
            key="cc",
            mounts=lambda driver: read_only(driver, *gcc_mounts(driver)),
        )

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        return CompileStep(
            argv=(toolchain.paths["cc"], *self.flags, "-o", BINARY, source_name, "-lm"),
            entry=BINARY,
            collect=(BINARY,),
            executables=frozenset({BINARY}),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del toolchain, limits
        return Launch(argv=(f"./{entry}",))


class C(_Gcc):
    """C (GNU C17, -O2)."""

    name = "c"
    aliases = frozenset({"c", "gcc", "c17", "c11"})
    fence_tags = frozenset({"c", "h"})
    extension = "c"
    driver = "gcc"
    # -pipe: no temporary files between compiler stages.
    flags = ("-O2", "-std=gnu17", "-pipe", "-w")


class Cpp(_Gcc):
    """C++ (GNU C++17, -O2)."""

    name = "cpp"
    aliases = frozenset({"cpp", "c++", "cxx", "cc", "g++", "cpp17"})
    fence_tags = frozenset({"cpp", "c++", "cxx", "cc", "hpp"})
    extension = "cpp"
    driver = "g++"
    flags = ("-O2", "-std=gnu++17", "-pipe", "-w")
