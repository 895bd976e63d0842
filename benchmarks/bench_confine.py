"""CPU per execution of the confinement steps a jail's program takes, against a bare fork.

Issue 17 item 1 (the jail's share of a completion) and item 2 (a session pays these
at every test). A C driver (``benchmarks/native/bench_confine.c``, compiled here with
the jail's own ``rbjail_layers.c``) forks children that each take one step and exit,
the steps interleaved block by block; CPU time (the driver's and its children's),
medians over the blocks:

- ``seccomp``: loading the jail's filter (a binary search on the syscall number)
  against the same refusals tested one by one, as it was built before: the kernel
  runs the filter for every syscall number at each load to build its cache of
  always-allowed syscalls, so the comparisons per number count;
- ``bounding set``: emptying the capability bounding set in a child whose parent
  holds it (a cold jail's program) against one whose parent already emptied it
  (a session's init does, once per suite, and its programs then know it is empty);
- ``signals``: setting every signal's disposition back to the default (a cold
  jail's program) against only those its parent noted as not at their default
  (a session's init notes them once, as it works out the seccomp filter once).

Needs root (the bounding set) and gcc. Prints a table, then one JSON object.

    python benchmarks/bench_confine.py [--blocks 21] [--forks 300]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import emit_json, say

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "benchmarks/native/bench_confine.c"
NATIVE = ROOT / "sandbox_workers/native"


def build(out_dir: Path) -> Path:
    binary = out_dir / "bench_confine"
    cc = shutil.which("cc") or shutil.which("gcc") or "gcc"
    subprocess.run(
        [cc, "-O2", "-std=gnu11", f"-I{NATIVE}", "-o", str(binary), str(DRIVER)],
        check=True,
    )
    return binary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=21, help="default: %(default)s")
    parser.add_argument("--forks", type=int, default=300, help="per block; default: %(default)s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        binary = build(Path(tmp))
        say(f"{args.blocks} blocks of {args.forks} forks per step")
        done = subprocess.run(
            [str(binary), str(args.blocks), str(args.forks)],
            capture_output=True,
            text=True,
            check=True,
        )
    rows = {}
    for line in done.stdout.splitlines():
        name, length, median, q1, q3 = line.split()
        rows[name] = {
            "instructions": int(length),
            "ms": float(median),
            "q1": float(q1),
            "q3": float(q3),
        }
    fork = rows["fork"]["ms"]
    prepared_fork = rows["fork_prepared_parent"]["ms"]
    steps = {
        "seccomp_linear": round(rows["seccomp_linear"]["ms"] - fork, 4),
        "seccomp_tree": round(rows["seccomp_tree"]["ms"] - fork, 4),
        "bounding_set_full": round(rows["bounding_set_full"]["ms"] - fork, 4),
        "bounding_set_empty": round(rows["bounding_set_empty"]["ms"] - prepared_fork, 4),
        "signals_all": round(rows["signals_all"]["ms"] - fork, 4),
        "signals_noted": round(rows["signals_noted"]["ms"] - prepared_fork, 4),
    }
    print(f"{'step':<22}{'instructions':>13}{'ms per fork':>13}{'over a fork':>13}")
    for name, row in rows.items():
        over = steps.get(name)
        shown = f"{over:13.4f}" if over is not None else f"{'':>13}"
        print(f"{name:<22}{row['instructions'] or '':>13}{row['ms']:13.4f}{shown}")
    saved = {
        "seccomp": round(steps["seccomp_linear"] - steps["seccomp_tree"], 4),
        "bounding_set": round(steps["bounding_set_full"] - steps["bounding_set_empty"], 4),
        "signals": round(steps["signals_all"] - steps["signals_noted"], 4),
    }
    print(
        f"per test in a session: seccomp {saved['seccomp']:.4f} ms less than a linear filter,"
        f" bounding set {saved['bounding_set']:.4f} ms less than emptying it each time,"
        f" signals {saved['signals']:.4f} ms less than resetting every one"
    )
    emit_json(
        {
            "bench": "confine",
            "blocks": args.blocks,
            "forks": args.forks,
            "rows": rows,
            "over_fork_ms": steps,
            "saved_ms": saved,
        }
    )


if __name__ == "__main__":
    main()
