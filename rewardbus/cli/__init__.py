"""The ``rewardbus`` command line: the only code that touches signals and the environment.

``core`` is the top-level parser, ``main`` and the exit statuses; ``shutdown`` the
signal handling; ``settings`` and ``common`` the flags several commands share (Kafka:
flags, then the environment, then defaults); every other module is one command, its
flags (``add_parser``) and its ``run(args, env)``.
"""

from rewardbus.cli.core import main, parser

__all__ = ["main", "parser"]
