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
    byte_list,
    masked_marker,
    probe_version,
    read_only,
    resolve_binary,
)
from sandbox_workers.languages.native import (
    EXIT_CALLED_STATUS,
    EXIT_GUARD_LINK_FLAGS,
    gcc_mounts,
)
from schemas import Limits

__all__ = ["Rust"]

BINARY = "main"


# The exit guard of native.py in Rust: std::process::exit calls libc's exit, which the
# linker redirects here. In a module of its own, so no name clashes with the program's.
_EXIT_GUARD = (
    """#[allow(non_snake_case, dead_code)]
mod __rewardbus_exit_guard {
    extern "C" {
        fn write(fd: i32, buf: *const u8, count: usize) -> isize;
        fn getpid() -> i32;
        fn gettid() -> i32;
        fn __real__exit(status: i32) -> !;
        fn __real_pthread_exit(value: *mut u8) -> !;
    }
    fn exit_called() -> ! {
        let message = b"\\nexit called during the tests\\n";
        unsafe {
            write(2, message.as_ptr(), message.len());
"""
    f"            __real__exit({EXIT_CALLED_STATUS})\n        }}\n    }}\n"
    + "".join(
        "    #[no_mangle]\n"
        f'    pub extern "C" fn __wrap_{name}(_status: i32) -> ! {{ exit_called() }}\n'
        for name in ("exit", "_exit", "_Exit", "quick_exit")
    )
    + """    #[no_mangle]
    pub unsafe extern "C" fn __wrap_pthread_exit(value: *mut u8) -> ! {
        if getpid() != gettid() {
            __real_pthread_exit(value)
        }
        exit_called()
    }
}
"""
)

# The marker of native.py's __libc_start_main guard in Rust: libc starts after_main in
# place of the C main that rustc generates (which runs the tests' fn main and returns its
# exit code: 101 after a panic), and the marker is printed once it has returned. The key
# is read volatile, so the compiler cannot fold mask and key into the marker as text.
# (str.format: double braces are Rust's.)
_AFTER_MAIN = """#[allow(non_snake_case, dead_code)]
mod __rewardbus_tests_end {{
    type Main = extern "C" fn(i32, *const *const u8, *const *const u8) -> i32;
    extern "C" {{
        fn write(fd: i32, buf: *const u8, count: usize) -> isize;
        fn __real___libc_start_main(
            main: Main, argc: i32, argv: *const *const u8, init: usize, fini: usize,
            rtld_fini: usize, stack_end: usize,
        ) -> i32;
    }}
    static MAIN: ::core::sync::atomic::AtomicUsize = ::core::sync::atomic::AtomicUsize::new(0);
    static MASKED: [u8; {size}] = [{masked}];
    static KEY: [u8; {size}] = [{key}];
    extern "C" fn after_main(argc: i32, argv: *const *const u8, envp: *const *const u8) -> i32 {{
        let address = MAIN.load(::core::sync::atomic::Ordering::SeqCst);
        let main: Main = unsafe {{ ::core::mem::transmute::<usize, Main>(address) }};
        let status = main(argc, argv, envp);
        let mut text = [0u8; {size}];
        for i in 0..{size} {{
            text[i] = MASKED[i] ^ unsafe {{ ::core::ptr::read_volatile(&KEY[i]) }};
        }}
        unsafe {{
            write(2, text.as_ptr(), text.len());
        }}
        status
    }}
    #[no_mangle]
    pub unsafe extern "C" fn __wrap___libc_start_main(
        main: Main, argc: i32, argv: *const *const u8, init: usize, fini: usize,
        rtld_fini: usize, stack_end: usize,
    ) -> i32 {{
        MAIN.store(main as usize, ::core::sync::atomic::Ordering::SeqCst);
        __real___libc_start_main(after_main, argc, argv, init, fini, rtld_fini, stack_end)
    }}
}}
"""

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
    # A program's own `macro_rules! assert_eq { ... => {} }` would shadow the standard
    # macro for the tests after it (textual scope beats the prelude): every assert a
    # pass. Defined again here, last, each forwards to the real one by its path.
    test_prelude = (
        "".join(
            "#[allow(unused_macros)]\n"
            f"macro_rules! {name} {{ ($($t:tt)*) => {{ ::core::{name}!($($t)*) }} }}\n"
            for name in ("assert", "assert_eq", "assert_ne")
        )
        + _EXIT_GUARD
    )
    test_compile_args = ("-C", f"link-arg={EXIT_GUARD_LINK_FLAGS}")

    def mark_tests_end(self, tests: str, marker: str) -> str:
        masked, key = masked_marker(marker)
        after_main = _AFTER_MAIN.format(
            size=len(masked), masked=byte_list(masked), key=byte_list(key)
        )
        return f"{tests}\n{after_main}"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
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
