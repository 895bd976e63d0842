"""R scripts, run by the system's Rscript."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    byte_list,
    discover_binary,
    masked_marker,
    read_only,
)
from schemas import Limits

__all__ = ["R"]

# The interpreter's own heap and base packages (measured: 51 MB resident for a script
# that prints one number), outside the program's share of the memory limit. R's own heap
# cap (R_MAX_VSIZE) is left unset: what it reports ("vector memory limit ... reached")
# reads as a crash, while the cgroup's limit is reported as the memory limit it is.
_R_OVERHEAD_MB = 64
# Debian links R_HOME/etc/{Renviron,ldpaths...} to this directory: without it R stops.
_R_CONFIG = "/etc/R"

# Put between the program and the tests (R evaluates the file top to bottom, all in the
# global environment). MultiPL-E's tests call stopifnot(isTRUE(all.equal(...))): a program
# that defined its own stopifnot, isTRUE, all.equal or identical (one that always passes)
# would fake every assert after it, so the base functions are bound again here. quit and
# q become an exit guard: leaving during the tests says so and fails. A failed stopifnot
# stops the script with status 1; the error option says that it was an assertion (a wrong
# answer, not a crash) and makes sure the status is not 0.
_PRELUDE = """
stopifnot <- base::stopifnot
isTRUE <- base::isTRUE
isFALSE <- base::isFALSE
all.equal <- base::all.equal
identical <- base::identical
quit <- q <- function(...) {
  base::cat("\\nexit called during the tests\\n", file = base::stderr())
  base::quit(save = "no", status = 86L, runLast = FALSE)
}
base::options(error = function() {
  if (base::grepl("not (all )?TRUE", base::geterrmessage())) {
    base::cat("assertion failed\\n", file = base::stderr())
  }
  base::quit(save = "no", status = 1L, runLast = FALSE)
})
"""


class R(Language):
    """R: ``Rscript --vanilla`` (no profile, environ or saved workspace is read)."""

    name = "r"
    aliases = frozenset({"r", "rscript"})
    fence_tags = frozenset({"r", "R", "rscript"})
    extension = "R"
    test_prelude = _PRELUDE

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        # Rscript runs R_HOME/bin/R (a shell script) and the interpreter under /usr/lib/R,
        # which the jail's read-only /usr shows; their configuration lives in /etc/R.
        return discover_binary(
            self.name,
            "Rscript",
            ["--version"],
            version=_r_version,
            mounts=lambda rscript: read_only(rscript.parent, _R_CONFIG),
        )

    def mark_tests_end(self, tests: str, marker: str) -> str:
        # The tests and the marker are one top-level block: whatever ends them early (an
        # error, quit(), a jump to the top level by invokeRestart("abort"), after which
        # R's script loop goes on with the next expression once an error option is set)
        # skips the rest of the block, the marker with it. The marker is built from its
        # mask and key at run time, never as text in the source a program could read.
        masked, key = masked_marker(marker)
        return (
            f"{{\n{tests}\n"
            "base::cat(base::rawToChar(base::xor("
            f"base::as.raw(base::c({byte_list(masked)})), "
            f"base::as.raw(base::c({byte_list(key)})))), file = base::stderr())\n}}\n"
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        return Launch(
            argv=(toolchain.paths["Rscript"], "--vanilla", entry),
            memory_overhead_mb=_R_OVERHEAD_MB,
            # R opens the script before it loads its packages, and reads it after.
            warm_after=entry,
            warm_on_read=True,
        )


def _r_version(banner: str) -> str:
    match = re.search(r"version (\d+\.\d+\.\d+)", banner)
    return f"r-{match.group(1)}" if match else banner
