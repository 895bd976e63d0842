"""One settings path for every command: flags, then the environment, then defaults."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rewardbus import cli
from rewardbus.canary.command import CanaryOptions
from rewardbus.cli import canary
from rewardbus.cli.common import kafka_or_none
from schemas import kafka_settings

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    "REWARDBUS_BOOTSTRAP_SERVERS": "env:9092",
    "REWARDBUS_TOPIC_PREFIX": "env.",
    "REWARDBUS_SECURITY_PROTOCOL": "SSL",
}


def test_flags_win_over_the_environment_which_wins_over_defaults() -> None:
    flagged = kafka_settings(ENV, bootstrap="flag:9092", topic_prefix="flag.")
    assert flagged is not None
    assert (flagged.bootstrap_servers, flagged.topics.prefix) == ("flag:9092", "flag.")
    assert flagged.security_protocol == "SSL"
    from_env = kafka_settings(ENV)
    assert from_env is not None
    assert (from_env.bootstrap_servers, from_env.topics.prefix) == ("env:9092", "env.")
    bare = kafka_settings({"REWARDBUS_BOOTSTRAP_SERVERS": "b:1"})
    assert bare is not None
    assert (bare.topics.prefix, bare.security_protocol) == ("", "PLAINTEXT")
    assert kafka_settings({}) is None


@pytest.mark.parametrize("command", ["demo", "train-demo", "worker", "aggregator", "topics"])
def test_an_empty_topic_prefix_flag_means_no_prefix_for_every_command(command: str) -> None:
    args = cli.parser().parse_args([command, "--topic-prefix", ""])
    kafka = kafka_or_none(args, ENV, "test")
    assert kafka is not None
    assert kafka.topics.prefix == ""
    assert kafka.security_protocol == "SSL"  # the demos no longer drop it


def test_a_command_reads_the_environment_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["topics"], env={}) == 2
    assert "no Kafka cluster" in capsys.readouterr().err


def test_the_canary_gets_typed_options() -> None:
    args = cli.parser().parse_args(
        ["canary", "--once", "--languages", "python,,go", "--rate", "12/min", "--timeout", "9"]
    )
    assert canary.options(args) == CanaryOptions(
        languages=("python", "go"), rate_per_s=0.2, answer_timeout_s=9.0, rounds=1
    )
    assert canary.options(cli.parser().parse_args(["canary"])) == CanaryOptions()


def _writes_to_the_environment(tree: ast.AST) -> list[int]:
    """Lines that assign, delete or update an item of ``os.environ`` or call ``os.putenv``."""
    lines = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in {"update", "setdefault", "pop", "clear", "popitem"}:
                target = node.func.value
            elif ast.unparse(node.func) in {"os.putenv", "os.unsetenv"}:
                lines.append(node.lineno)
        if target is not None and ast.unparse(target) == "os.environ":
            lines.append(node.lineno)
    return lines


def test_nothing_in_the_app_shell_writes_to_the_environment() -> None:
    offenders = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "rewardbus").rglob("*.py"))
        if (lines := _writes_to_the_environment(ast.parse(path.read_text())))
    }
    assert offenders == {}
    assert _writes_to_the_environment(ast.parse("import os\nos.environ['A'] = 'b'\n")) == [2]
