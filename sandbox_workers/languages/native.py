"""C and C++ with the host's GCC."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from sandbox_workers.languages.base import (
    CompileStep,
    Language,
    Launch,
    Toolchain,
    byte_list,
    discover_binary,
    masked_marker,
    read_only,
)
from schemas import Limits

__all__ = ["EXIT_CALLED_STATUS", "EXIT_GUARD_LINK_FLAGS", "C", "Cpp", "gcc_mounts"]

BINARY = "main"

# A compiled assert suite passes when its process exits 0, so a program calling exit(0)
# (in the function under test, a constructor, a static initialiser) before the asserts ran
# passed them all. Two guards:
# - The linker redirects every call to these functions in the program (and in Rust's std)
#   to __wrap_<name>, which says so on stderr and exits with this status; the tests' own
#   return from main still exits 0: libc's exit after main is called from inside libc,
#   which --wrap leaves alone. pthread_exit is on the list because the main thread
#   leaving through it ends the process with status 0 too.
# - It also redirects crt1's call of __libc_start_main, so that libc starts a function of
#   ours that calls the real main and prints the worker's secret marker once main has
#   returned (mark_tests_end). Every way out before that (a raw exit_group system call,
#   libc's exit reached by __real_exit or dlsym, an exec) leaves the marker out.
EXIT_CALLED_STATUS = 86
_EXITS = ("exit", "_exit", "_Exit", "quick_exit", "pthread_exit", "__libc_start_main")
EXIT_GUARD_LINK_FLAGS = "-Wl," + ",".join(f"--wrap={name}" for name in _EXITS)

# The wrappers, in C: libc's functions by asm labels (no header, so no clash with a
# program's own `write`), the real _exit as __real__exit (a plain _exit would be wrapped).
_EXIT_GUARD = (
    """#ifdef __cplusplus
extern "C" {
#endif
extern long __rewardbus_write(int, const void *, unsigned long) __asm__("write");
extern int __rewardbus_getpid(void) __asm__("getpid");
extern int __rewardbus_gettid(void) __asm__("gettid");
extern void __real__exit(int) __attribute__((noreturn));
extern void __real_pthread_exit(void *) __attribute__((noreturn));
__attribute__((noreturn)) static void __rewardbus_exit_called(void) {
  static const char message[] = "\\nexit called during the tests\\n";
  __rewardbus_write(2, message, sizeof message - 1);
"""
    f"  __real__exit({EXIT_CALLED_STATUS});\n}}\n"
    + "".join(
        f"__attribute__((noreturn)) void __wrap_{name}(int status) "
        "{ (void)status; __rewardbus_exit_called(); }\n"
        for name in ("exit", "_exit", "_Exit", "quick_exit")
    )
    + """__attribute__((noreturn)) void __wrap_pthread_exit(void *value) {
  /* Another thread may leave through pthread_exit; only the main thread ends the process. */
  if (__rewardbus_getpid() != __rewardbus_gettid()) __real_pthread_exit(value);
  __rewardbus_exit_called();
}
#ifdef __cplusplus
}
#endif
"""
)


# libc starts __rewardbus_after_main in place of main (see EXIT_CALLED_STATUS). The
# marker is built from its mask and key only then; the key is volatile, so the compiler
# cannot fold the two into the marker as text in the binary. The tests' main keeps its
# name, so falling off its end still returns 0. (str.format: double braces are C's.)
_AFTER_MAIN = """#ifdef __cplusplus
extern "C" {{
#endif
typedef int (*__rewardbus_main_t)(int, char **, char **);
extern int __real___libc_start_main(__rewardbus_main_t, int, char **, void (*)(void),
                                    void (*)(void), void (*)(void), void *);
static __rewardbus_main_t __rewardbus_tests_main;
static int __rewardbus_after_main(int argc, char **argv, char **envp) {{
  static const unsigned char masked[] = {{{masked}}};
  static const volatile unsigned char key[] = {{{key}}};
  char text[sizeof masked];
  int status = __rewardbus_tests_main(argc, argv, envp);
  for (unsigned long i = 0; i < sizeof masked; i++) text[i] = (char)(masked[i] ^ key[i]);
  __rewardbus_write(2, text, sizeof text);
  return status;
}}
int __wrap___libc_start_main(__rewardbus_main_t main_, int argc, char **argv,
                             void (*init)(void), void (*fini)(void),
                             void (*rtld_fini)(void), void *stack_end) {{
  __rewardbus_tests_main = main_;
  return __real___libc_start_main(__rewardbus_after_main, argc, argv, init, fini,
                                  rtld_fini, stack_end);
}}
#ifdef __cplusplus
}}
#endif
"""


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
    # A program that defines NDEBUG would make every assert of the tests after it a
    # no-op, a pass: undefine it and include assert.h again, which redefines assert
    # from scratch (its own assert macro goes too). Then the exit guard (see _EXIT_GUARD).
    test_prelude = "#undef NDEBUG\n#include <assert.h>\n" + _EXIT_GUARD
    test_compile_args = (EXIT_GUARD_LINK_FLAGS,)

    def mark_tests_end(self, tests: str, marker: str) -> str:
        masked, key = masked_marker(marker)
        return f"{tests}\n{_AFTER_MAIN.format(masked=byte_list(masked), key=byte_list(key))}"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
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
