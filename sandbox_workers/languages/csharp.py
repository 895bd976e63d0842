"""C# on Mono: ``mcs`` compiles to a CIL assembly, the ``mono`` runtime runs it."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    CompileStep,
    Language,
    Launch,
    Toolchain,
    byte_list,
    masked_marker,
    probe_version,
    read_only,
    resolve_binary,
)
from schemas import Limits

__all__ = ["CSharp"]

ASSEMBLY = "main.exe"
# The runtime, its JIT'd code and the class library's metadata, outside the GC heap
# (measured: hello world peaks at 29 MB resident).
_MONO_OVERHEAD_MB = 64
# Thread stacks and the GC's heap sections, reserved up front (measured: a 128 MB
# heap runs to its OutOfMemoryException under RLIMIT_AS = 200 MB).
_MONO_RESERVE_MB = 256
# The runtime reads its DLL map (which native library System.Native is) and
# machine.config from /etc/mono; nothing there is host-specific or secret.
_MONO_CONFIG = Path("/etc/mono")
# The tests' `public static void Main(string[] args)` (or without parameters).
_TESTS_MAIN = re.compile(
    r"(?:\bpublic\s+)?\bstatic\s+void\s+Main\s*\(\s*(string\s*\[\s*\]\s*@?\w+)?\s*\)"
)
_RENAMED_MAIN = "rewardbusTestsMain"
# Every spelling of the tests' asserts: Debug.Assert (MultiPL-E's), Trace.Assert,
# qualified or not.
_ASSERT_CALL = re.compile(
    r"(?<![\w.:])(?:global\s*::\s*)?(?:System\s*\.\s*Diagnostics\s*\.\s*)?"
    r"(?:Debug|Trace)\s*\.\s*Assert\s*\("
)
_CHECKS = "RewardbusChecks"
# What the tests' asserts become. Debug.Assert cannot be trusted: a failed one only logs
# (Mono's default listener; a program may also clear the listeners), and a program can
# compile it out (`#undef DEBUG` before its first token), hide it (a nested class named
# Debug, `using Debug = ...`, its own System.Diagnostics.Debug) or replace it. A class of
# ours, named with global:: (no nested or aliased name can hide that), says so on stderr
# ("Assertion": a wrong answer) and exits 1, never reaching the marker.
_CHECKS_CLASS = f"""
static class {_CHECKS} {{
    public static void Assert(bool condition) {{ Assert(condition, "", ""); }}
    public static void Assert(bool condition, string message) {{ Assert(condition, message, ""); }}
    public static void Assert(bool condition, string message, string detail) {{
        if (condition) return;
        byte[] text = global::System.Text.Encoding.UTF8.GetBytes(
            "\\nAssertion failed " + message + " " + detail + "\\n");
        var error = global::System.Console.OpenStandardError();
        error.Write(text, 0, text.Length);
        error.Flush();
        global::System.Environment.Exit(1);
    }}
}}
"""
_MONO_ENV = {
    # No shared-memory area under /dev/shm (performance counters between processes).
    "MONO_DISABLE_SHARED_AREA": "1",
}


class CSharp(Language):
    """C# (mcs, the C# 7 compiler of Mono) with the GC heap capped at the memory limit."""

    name = "csharp"
    aliases = frozenset({"csharp", "cs", "c#"})
    fence_tags = frozenset({"csharp", "cs", "c#"})
    extension = "cs"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        mono = resolve_binary("mono")
        if mono is None:
            return None
        # /usr/bin/mcs is a shell script running this assembly on mono.
        library = mono.parent.parent / "lib" / "mono"
        mcs = library / "4.5" / "mcs.exe"
        banner = probe_version([str(mono), "--version"])
        if not mcs.is_file() or banner is None:
            return None
        return Toolchain(
            language=self.name,
            version=_mono_version(banner),
            paths={"mono": str(mono), "mcs": str(mcs)},
            mounts=read_only(mono, library, _MONO_CONFIG),
        )

    def mark_tests_end(self, tests: str, marker: str) -> str | None:
        # Environment.Exit, libc's exit by P/Invoke, an exec: any of them in the program (in
        # Add, a static constructor, a thread) ends the process with status 0 before the
        # asserts ran. As in java.py, the tests' Main becomes a method that a Main of ours,
        # declared in its place in the program's class, calls and then prints the marker;
        # an exit before that leaves it out. The marker is built at run time from its mask
        # and key (array initialisers, never one string in the assembly), inline in Main: a
        # method that printed it could be called by the program, then exit. Test code
        # without a Main of its own is left alone.
        if len(_TESTS_MAIN.findall(tests)) != 1:
            return None
        masked, key = masked_marker(marker)

        def ours(main: re.Match[str]) -> str:
            parameters = main.group(1) or ""
            call = f"{_RENAMED_MAIN}(rewardbusArgs)" if parameters else f"{_RENAMED_MAIN}()"
            return (
                "public static void Main(string[] rewardbusArgs) {"
                f" {call};"
                f" byte[] rewardbusText = {{{byte_list(masked)}}};"
                f" byte[] rewardbusKey = {{{byte_list(key)}}};"
                " for (int i = 0; i < rewardbusText.Length; i++)"
                " rewardbusText[i] ^= rewardbusKey[i];"
                " var rewardbusErr = global::System.Console.OpenStandardError();"
                " rewardbusErr.Write(rewardbusText, 0, rewardbusText.Length);"
                " rewardbusErr.Flush(); }\n"
                f"static void {_RENAMED_MAIN}({parameters})"
            )

        checked = _ASSERT_CALL.sub(f"global::{_CHECKS}.Assert(", tests)
        return _TESTS_MAIN.sub(ours, checked) + _CHECKS_CLASS

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        return CompileStep(
            argv=(
                toolchain.paths["mono"],
                toolchain.paths["mcs"],
                # MultiPL-E's tests are Debug.Asserts, compiled out without DEBUG.
                "-d:DEBUG",
                "-optimize+",
                "-warn:0",
                # Its prompts import System.Numerics; mcs.rsp references it already,
                # named here so that the build does not depend on that file.
                "-r:System.Numerics.dll",
                f"-out:{ASSEMBLY}",
                source_name,
            ),
            entry=ASSEMBLY,
            collect=(ASSEMBLY,),
            env=_MONO_ENV,
            reserve_mb=_MONO_RESERVE_MB,
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        return Launch(
            argv=(toolchain.paths["mono"], entry),
            env={**_MONO_ENV, "MONO_GC_PARAMS": f"max-heap-size={limits.memory_mb}m"},
            memory_overhead_mb=_MONO_OVERHEAD_MB,
            reserve_mb=_MONO_RESERVE_MB,
        )


def _mono_version(banner: str) -> str:
    match = re.search(r"version (\d+(?:\.\d+)+)", banner)
    return f"mono-{match.group(1)}" if match else banner
