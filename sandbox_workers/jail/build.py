"""Compile the ``rbjail`` launcher and ``librbjail.so`` once, cached by source hash.

Built lazily on first use, or ahead of time with ``python -m sandbox_workers.jail build``.
The launcher is linked statically when the C library allows it: no dynamic
loader on the per-execution path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sandbox_workers.sandbox import SandboxFault

__all__ = ["Binaries", "BuildError", "build", "native_dir"]

_SOURCES = ("rbjail.c", "rbjail_layers.c", "rbjail_probe.c", "rbjail_warm.c", "rbjail_layers.h")
_CFLAGS = ("-O2", "-std=gnu11", "-Wall", "-Wextra", "-D_FORTIFY_SOURCE=2")


class BuildError(SandboxFault):
    """The launcher could not be compiled (no C compiler, or a compile error)."""

    retriable = False


@dataclass(frozen=True)
class Binaries:
    """Paths of the compiled launcher, the layer library and the warm-start library.

    ``warm`` is preloaded into the zygotes of interpreters other than Python
    (``native/rbjail_warm.c``).
    """

    launcher: Path
    library: Path
    warm: Path


def native_dir() -> Path:
    """Directory of the C sources (``sandbox_workers/native``)."""
    return Path(__file__).resolve().parent.parent / "native"


def _source_hash(src: Path) -> str:
    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update(name.encode())
        digest.update((src / name).read_bytes())
    digest.update(" ".join(_CFLAGS).encode())
    return digest.hexdigest()[:16]


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise BuildError("no C compiler found (install gcc) to build the rbjail launcher")
    return cc


def _compile(cc: str, args: list[str]) -> None:
    # S603: argv list of our own compiler and source paths, no shell.
    proc = subprocess.run(  # noqa: S603
        [cc, *_CFLAGS, *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise BuildError(f"{cc} failed: {proc.stderr.strip()[-2000:]}")


def _build_into(out_dir: Path, src: Path, tag: str) -> Binaries:
    cc = _compiler()
    launcher = out_dir / f"rbjail-{tag}"
    library = out_dir / f"librbjail-{tag}.so"
    warm = out_dir / f"librbjail-warm-{tag}.so"
    sources = [str(src / "rbjail.c"), str(src / "rbjail_layers.c"), str(src / "rbjail_probe.c")]
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        exe_tmp = Path(tmp) / "rbjail"
        try:
            _compile(cc, ["-static", "-o", str(exe_tmp), *sources])
        except BuildError:
            # No static libc installed: a dynamic launcher works, a little slower to start.
            _compile(cc, ["-o", str(exe_tmp), *sources])
        lib_tmp = Path(tmp) / "librbjail.so"
        _compile(cc, ["-fPIC", "-shared", "-o", str(lib_tmp), str(src / "rbjail_layers.c")])
        warm_tmp = Path(tmp) / "librbjail-warm.so"
        _compile(cc, ["-fPIC", "-shared", "-o", str(warm_tmp), str(src / "rbjail_warm.c"), "-ldl"])
        # rename() is atomic: concurrent workers never see a half-written binary.
        exe_tmp.chmod(0o755)
        os.replace(exe_tmp, launcher)
        os.replace(lib_tmp, library)
        os.replace(warm_tmp, warm)
    return Binaries(launcher=launcher, library=library, warm=warm)


def build(bin_dir: Path, *, force: bool = False) -> Binaries:
    """Return the compiled binaries for the current sources, compiling if needed."""
    src = native_dir()
    tag = _source_hash(src)
    launcher = bin_dir / f"rbjail-{tag}"
    library = bin_dir / f"librbjail-{tag}.so"
    warm = bin_dir / f"librbjail-warm-{tag}.so"
    if not force and launcher.is_file() and library.is_file() and warm.is_file():
        return Binaries(launcher=launcher, library=library, warm=warm)
    bin_dir.mkdir(parents=True, exist_ok=True)
    return _build_into(bin_dir, src, tag)
