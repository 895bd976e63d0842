"""``rewardbus doctor``: which sandbox isolation layers work on this host."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from rewardbus.cli.common import Subcommands

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command (no flags)."""
    doctor = sub.add_parser(
        "doctor", help="report which sandbox isolation layers work on this host"
    )
    doctor.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """The report on stdout; 0 when strict mode can start here."""
    from rewardbus.doctor import report

    del args, env
    return report(sys.stdout)
