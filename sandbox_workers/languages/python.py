"""Python 3: the interpreter the worker itself was built on (``sys.base_prefix``).

The worker's virtual environment is never used: the sandbox gets the base
installation, read-only, so nothing installed for the worker leaks in.
"""

from __future__ import annotations

import marshal
import platform
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from sandbox_workers.languages.base import Language, Launch, Toolchain, read_only
from schemas import Limits

__all__ = ["BOOTSTRAPS", "Checked", "Python", "check_program"]


# Runs the program as __main__ with site's exit()/quit() but without the rest of
# site: the base installation's .pth files are host configuration (and cost
# ~35 ms per start), and its site-packages are the host's, not the sandbox's.
# A fixed string of ours, never built from user input.
_BOOTSTRAP = (
    "import site, sys; site.setquit(); del sys.argv[0]; __file__ = sys.argv[0]; "
    "del site, sys; exec(compile(open(__file__, 'rb').read(), __file__, 'exec'))"
)
# The same for an entry that is a marshalled code object made by this interpreter
# (the worker's own harness, never user input: see judging.harness). A warm zygote
# that keeps the same file's module loaded and run (PoolConfig.keep_code,
# pool.zygote_main's _keep_code) hands over a line that calls its main(): loading
# and running a copy of the module in a forked interpreter costs 2-3 ms, mostly
# copy-on-write faults.
_BOOTSTRAP_COMPILED = (
    "import site, sys; site.setquit(); del sys.argv[0], site; __file__ = sys.argv[0]; "
    "exec((lambda data: getattr(sys.modules.get('_rewardbus_kept'), 'code', {}).get(data) "
    "or __import__('marshal').loads(data))(open(__file__, 'rb').read()))"
)
_COMPILED_SUFFIX = ".marshal"
# The -c commands of every Python launch: a warm zygote compiles them before it
# forks (PoolConfig.precompile), so an execution does not.
BOOTSTRAPS = (_BOOTSTRAP, _BOOTSTRAP_COMPILED)


class Python(Language):
    """CPython 3 (standard library only), run as ``python -S -B -c <bootstrap> main.py``."""

    name = "python"
    aliases = frozenset({"python", "python3", "py", "py3"})
    fence_tags = frozenset({"python", "python3", "py", "py3"})
    extension = "py"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        prefix = Path(sys.base_prefix).resolve()
        major, minor = sys.version_info[:2]
        interpreter = prefix / "bin" / f"python{major}.{minor}"
        if not interpreter.is_file():
            return None
        return Toolchain(
            language=self.name,
            version=f"cpython-{platform.python_version()}",
            paths={"python": str(interpreter)},
            mounts=read_only(prefix),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        bootstrap = _BOOTSTRAP_COMPILED if entry.endswith(_COMPILED_SUFFIX) else _BOOTSTRAP
        # -S: no site (see _BOOTSTRAP); -B: the work dir is scratch, no .pyc writes.
        return Launch(
            argv=(toolchain.paths["python"], "-S", "-B", "-c", bootstrap, entry),
            env={
                # Deterministic set/dict-of-str iteration across runs and retries.
                "PYTHONHASHSEED": "0",
                # 3.11 refuses int<->str conversions past 4300 digits; contest
                # problems print big integers.
                "PYTHONINTMAXSTRDIGITS": "0",
                "PYTHONIOENCODING": "utf-8",
            },
        )


@dataclass(frozen=True)
class Checked:
    """The worker's compile of a Python program (:func:`check_program`)."""

    error: str | None = None  # its SyntaxError message: the program does not compile
    # The marshalled code object, for the harness to load instead of compiling the
    # source again; None when the compile warned (the harness's own compile then
    # writes the warnings to the program's stderr, as `python solution.py` does).
    code: bytes | None = None


def check_program(source: str) -> Checked:
    """Compile ``source`` as the harness would (``solution.py``).

    ``compile()`` only parses and generates bytecode: it runs nothing, so it is
    safe (and ~100x cheaper than a sandbox round trip) in the worker process.
    The sandbox runs this very interpreter (``_same_python`` in the executor), so
    the harness can load the code object; in a freshly forked process that costs
    ~0.17 ms where compiling the source again cost ~0.6 ms (HumanEval's programs).
    """
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            code = compile(source, "solution.py", "exec", dont_inherit=True)
        except SyntaxError as exc:
            where = f" (line {exc.lineno})" if exc.lineno else ""
            text = f"\n    {exc.text.strip()}" if exc.text and exc.text.strip() else ""
            return Checked(error=f"{type(exc).__name__}: {exc.msg}{where}{text}")
        except (ValueError, RecursionError, MemoryError) as exc:
            # Null bytes, or nesting too deep for the compiler.
            return Checked(error=f"{type(exc).__name__}: {exc}")
    return Checked(code=None if warned else marshal.dumps(code))
