"""One exit status per kind of failure, for every command (README: "Exit statuses")."""

from __future__ import annotations

import pytest

from rewardbus import cli
from rewardbus.canary import GoldenSetError
from rewardbus.errors import KINDS, CommandFailed, ShellError, Unavailable, UsageError
from rewardbus.observability.gotools import ToolBuildError
from rewardbus.observability.jaeger import JaegerError
from rewardbus.observability.jaeger_query import JaegerQueryError, TraceNotFound
from rewardbus.observability.prometheus import PrometheusError
from rewardbus.runtime.broker.errors import BrokerError, PortTaken
from rewardbus.train_demo.checkpoint import CheckpointError
from rewardbus.train_demo.devices import DeviceUnavailable
from rewardbus.wiring import SandboxUnavailable
from sandbox_workers.watchdog import EXIT_STALLED
from schemas import RewardbusError


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (BrokerError, Unavailable),
        (PortTaken, Unavailable),
        (JaegerError, Unavailable),
        (PrometheusError, Unavailable),
        (JaegerQueryError, Unavailable),
        (ToolBuildError, Unavailable),
        (SandboxUnavailable, Unavailable),
        (DeviceUnavailable, Unavailable),
        (GoldenSetError, UsageError),
        (CheckpointError, UsageError),
        (TraceNotFound, CommandFailed),
    ],
)
def test_each_shell_error_is_one_kind_with_its_exit_status(
    error: type[ShellError], kind: type[ShellError]
) -> None:
    assert issubclass(error, kind)
    assert issubclass(error, RewardbusError)
    assert error("x").exit_code == kind.exit_code


def test_the_kinds_exit_differently_and_not_as_success() -> None:
    assert [kind.exit_code for kind in KINDS] == [1, 2, 69]


def test_the_cli_prints_a_shell_error_and_exits_with_its_kinds_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["trace"]) == UsageError.exit_code
    assert "rewardbus trace: give a SAMPLE_ID or --batch BATCH_ID" in capsys.readouterr().err
    # Port 9 (discard) has no Jaeger: its query service is unavailable.
    nobody = ["trace", "s-1", "--jaeger-url", "http://127.0.0.1:9", "--wait", "0"]
    assert cli.main(nobody) == Unavailable.exit_code
    assert capsys.readouterr().err.startswith("rewardbus trace: ")


def test_the_top_level_help_lists_every_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for code in (0, 1, 2, 69, EXIT_STALLED, 130):
        assert f"\n  {code:>3}  " in out
    # The CLI spells the worker watchdog's status itself (importing the worker package
    # would slow every command's start): the two must agree.
    assert f"\n  {EXIT_STALLED:>3}  worker: the event loop stalled" in out


def test_a_host_without_the_sandbox_is_unavailable_to_judge(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def no_sandbox(*args: object, **kwargs: object) -> None:
        raise SandboxUnavailable("isolation layers unavailable: namespaces: EPERM")

    monkeypatch.setattr("rewardbus.wiring.start_executor", no_sandbox)
    assert cli.main(["judge", "-"]) == 69
    err = capsys.readouterr().err
    assert "rewardbus judge: isolation layers unavailable: namespaces: EPERM" in err


def test_a_broker_that_cannot_be_reached_is_unavailable_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Port 1 has no broker: the admin client's start fails (connection refused at once).
    assert cli.main(["topics", "--bootstrap", "127.0.0.1:1"], env={}) == Unavailable.exit_code
    err = capsys.readouterr().err
    assert "rewardbus topics: Kafka: admin start failed" in err
    assert "Traceback" not in err
