"""Go, built in GOPATH mode (no modules, no network, no cgo)."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    WORKDIR,
    CompileStep,
    Language,
    Launch,
    Toolchain,
    byte_list,
    masked_marker,
    read_only,
    resolve_binary,
)
from sandbox_workers.sandbox import BindMount
from schemas import Limits

__all__ = ["Go"]

BINARY = "main"
# Where the build cache appears inside the jail. A fixed path rather than the
# host's: the host directory may live under /tmp, which the jail replaces with
# a private tmpfs (that would hide the mount).
GOCACHE = "/gocache"
# The Go runtime reserves its heap arenas' metadata up front (measured: a Go
# 1.26 binary does not start under RLIMIT_AS = 640 MB, does at 896 MB).
_GO_RESERVE_MB = 768
_TESTS_MAIN = re.compile(r"\bfunc\s+main\s*\(\s*\)")
_RENAMED_MAIN = "rewardbusTestsMain"


class Go(Language):
    """Go: ``go build`` with a persistent, shared build cache.

    The standard library is not shipped precompiled, so a cold ``go build`` of
    "hello world" compiles fmt and the runtime (seconds); with the cache it takes
    a few hundred milliseconds. The cache is the one writable host directory any
    execution sees, and only the compile step sees it: the Go compiler and linker
    (trusted code) write there, while user code never runs during ``go build``
    (CGO_ENABLED=0 and no ``go generate``), and entries are keyed by content
    hashes of their inputs, so a program's source cannot overwrite another
    program's artifact.
    """

    name = "go"
    aliases = frozenset({"go", "golang"})
    fence_tags = frozenset({"go", "golang"})
    extension = "go"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del fetched
        go = resolve_binary("go")
        if go is None:
            return None
        goroot = go.parent.parent
        version_file = goroot / "VERSION"
        if not version_file.is_file():
            return None
        version = version_file.read_text(encoding="utf-8").splitlines()[0].strip()
        cache = state_dir / "go-build"
        cache.mkdir(parents=True, exist_ok=True)
        # The jail runs compilers as an unprivileged uid; the directory's parent
        # (state_dir) stays private to the worker's user on the host.
        cache.chmod(0o777)
        return Toolchain(
            language=self.name,
            version=version,
            paths={"go": str(go), "goroot": str(goroot), "gocache": GOCACHE},
            mounts=read_only(goroot),
            compile_mounts=(BindMount(host=cache, target=GOCACHE, writable=True),),
        )

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        return CompileStep(
            argv=(toolchain.paths["go"], "build", "-o", BINARY, source_name),
            entry=BINARY,
            collect=(BINARY,),
            executables=frozenset({BINARY}),
            env={
                "GOROOT": toolchain.paths["goroot"],
                "GOCACHE": toolchain.paths["gocache"],
                "GOPATH": f"{WORKDIR}/.gopath",
                "GO111MODULE": "off",
                "GOFLAGS": "",
                "CGO_ENABLED": "0",
                # Never try to download a different toolchain.
                "GOTOOLCHAIN": "local",
                "GOENV": "off",
                "GOTELEMETRY": "off",
            },
            reserve_mb=_GO_RESERVE_MB,
        )

    def mark_tests_end(self, tests: str, marker: str) -> str | None:
        # os.Exit is a system call, not libc's exit: a program's `func init() { os.Exit(0) }`
        # cannot be linked away as in C. So the tests' main becomes a function that our
        # main calls, then prints the marker (builtin print: stderr, no import); any exit
        # before that leaves it out. Falling off the end of a Go function is fine. Test code
        # without a main of its own is left alone (the program's main runs the tests). The
        # marker is built from its mask and key (package variables: never folded into text).
        if len(_TESTS_MAIN.findall(tests)) != 1:
            return None
        renamed = _TESTS_MAIN.sub(f"func {_RENAMED_MAIN}()", tests)
        masked, key = masked_marker(marker)
        return (
            f"{renamed}\n"
            f"var rewardbusMasked = [...]byte{{{byte_list(masked)}}}\n"
            f"var rewardbusKey = [...]byte{{{byte_list(key)}}}\n\n"
            f"func main() {{\n\t{_RENAMED_MAIN}()\n"
            "\tvar text [len(rewardbusMasked)]byte\n"
            "\tfor i := range text {\n\t\ttext[i] = rewardbusMasked[i] ^ rewardbusKey[i]\n\t}\n"
            "\tprint(string(text[:]))\n}\n"
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del toolchain, limits
        return Launch(argv=(f"./{entry}",), reserve_mb=_GO_RESERVE_MB)
