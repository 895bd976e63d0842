"""The code tool through verl's own code: its tool loader and its ToolAgentLoop.

verl's ``initialize_tools_from_config`` builds :class:`RewardbusCodeTool` from the
example tools YAML; verl's ``ToolAgentLoop`` (instantiated as its
``AgentLoopWorker`` does, from the ``tool_agent`` registry entry) runs whole
trajectories against a scripted rollout server: ``generate`` returns fixed token ids
of hermes ``<tool_call>`` text, so verl's ToolParser, state machine, chat-template
merging and response assembly run for real. The assertions read what verl
produced: the decoded response ids and the tool messages of the trajectory.

The tool's backend is ONE fixture, ``tool_backend``: two real ``rewardbus worker``
processes on the real broker (sessions in the jail). Tests of infrastructure failures
and of what the model reads for each status give the tool a scripted client instead,
since real workers cannot be made to fail on demand.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import hydra
import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.tool_registry import initialize_tools_from_config
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

import consumers.replies as replies
import consumers.verl_tool as verl_tool
from benchmarks.verl_harness import GENERATED_CONFIG
from consumers.tool_client import SharedToolClients
from consumers.verl_tool import RewardbusCodeTool, ToolSettings, render_result
from kafkaio import KafkaIOError
from producers import PublishError
from rewardbus.tokenizer import build_tokenizer
from schemas import KafkaSettings, Topics
from schemas.tools import ToolLimits, ToolResult
from tests.support.poll import until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples/verl"
EXAMPLE_TOOLS_YAML = EXAMPLES / "tools/code_interpreter.yaml"

# A prefix-stable chat template for the character tokenizer (it has none): each
# message renders on its own, as verl's continuous-token merging needs.
CHAT_TEMPLATE = (
    "{%- if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>\n"
    "{% endif -%}"
    "{%- for m in messages -%}"
    "<{{ m.role }}>{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>"
    "{%- endfor %}</{{ m.role }}>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<assistant>{% endif -%}"
)


@pytest.fixture
async def tool_backend(verl_sandbox_workers: KafkaSettings) -> AsyncIterator[KafkaSettings]:
    """Where the tool's calls go: the settings its tools YAML gets, those of two real
    ``rewardbus worker`` processes on the real broker (they serve tool calls beside
    completions, sessions in the jail). The tool makes its real shared client."""
    yield verl_sandbox_workers
    for shared in list(replies._PROCESS_CLIENTS.values()):
        if isinstance(shared, SharedToolClients):
            await shared.aclose()
    replies._PROCESS_CLIENTS.clear()


def tools_yaml(directory: Path, kafka: KafkaSettings, **options: Any) -> Path:
    """The example tools YAML, pointed at ``kafka``, with ``options`` set in its config."""
    config = OmegaConf.load(EXAMPLE_TOOLS_YAML)
    tool_config = config.tools[0].config
    tool_config.bootstrap_servers = kafka.bootstrap_servers
    tool_config.topic_prefix = kafka.topics.prefix
    for key, value in options.items():
        tool_config[key] = value
    path = directory / "tools.yaml"
    OmegaConf.save(config, path)
    return path


@pytest.fixture
def code_tools(tool_backend: KafkaSettings, tmp_path: Path) -> list[BaseTool]:
    tools: list[BaseTool] = initialize_tools_from_config(
        tools_yaml(tmp_path, tool_backend, time_s=1, memory_mb=256, max_output_chars=2000)
    )
    return tools


def call(code: str, **arguments: Any) -> str:
    """A model turn that calls the tool, in hermes format."""
    payload = {"name": "code_interpreter", "arguments": {"code": code, **arguments}}
    return f"Let me run it.\n<tool_call>{json.dumps(payload)}</tool_call>"


class ScriptedServer:
    """verl's rollout server (``server_manager``), answering each turn from a script."""

    def __init__(self, turns: Sequence[str]) -> None:
        self.tokenizer = build_tokenizer()
        self.turns = list(turns)
        self.prompts: list[list[int]] = []

    async def generate(self, *, request_id: str, prompt_ids: list[int], **_: Any) -> TokenOutput:
        self.prompts.append(list(prompt_ids))
        text = self.turns.pop(0) if self.turns else "No more turns."
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return TokenOutput(token_ids=[*ids, self.tokenizer.eos_token_id], stop_reason="completed")


def tool_agent_loop(tools: list[BaseTool], server: ScriptedServer) -> ToolAgentLoop:
    """verl's ToolAgentLoop, made as AgentLoopWorker._run_agent_loop makes it, without Ray."""
    config = OmegaConf.load(GENERATED_CONFIG)
    rollout = config.actor_rollout_ref.rollout
    rollout.multi_turn.enable = True
    rollout.multi_turn.format = "hermes"
    rollout.multi_turn.max_assistant_turns = 8
    rollout.multi_turn.max_tool_response_length = 4096
    config.data.max_prompt_length = 1024
    config.data.max_response_length = 8192
    tokenizer = server.tokenizer
    tokenizer.chat_template = CHAT_TEMPLATE
    loop: ToolAgentLoop = hydra.utils.instantiate(
        config=_agent_loop_registry["tool_agent"],
        trainer_config=DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap(tools),
    )
    return loop


async def trajectory(tools: list[BaseTool], turns: Sequence[str]) -> tuple[AgentLoopOutput, str]:
    """One trajectory through verl's loop: its output and its decoded response."""
    server = ScriptedServer(turns)
    loop = tool_agent_loop(tools, server)
    output = await loop.run({}, raw_prompt=[{"role": "user", "content": "Compute it."}])
    return output, server.tokenizer.decode(output.response_ids, skip_special_tokens=True)


def tool_messages(response: str) -> list[str]:
    """The tool messages verl put into the trajectory's response tokens."""
    return re.findall(r"<tool>(.*?)</tool>", response, flags=re.DOTALL)


async def test_verl_loads_the_tool_from_the_example_yaml(code_tools: list[BaseTool]) -> None:
    [tool] = code_tools
    assert isinstance(tool, RewardbusCodeTool)
    assert tool.name == "code_interpreter"
    function = tool.tool_schema.function
    assert function.parameters.required == ["code"]
    languages = function.parameters.properties["language"].enum
    assert languages == ["python", "bash", "javascript", "cpp"]
    assert tool.settings.limits.time_s == 1


async def test_dependent_cells_share_the_trajectorys_session(code_tools: list[BaseTool]) -> None:
    output, response = await trajectory(
        code_tools,
        [
            call("import math\nx = 6"),
            call("def f(n):\n    return n * x\ny = f(7)"),
            call("print(y, math.factorial(4))"),
            "The answer is 42.",
        ],
    )
    assert tool_messages(response) == ["[no output]", "[no output]", "42 24"]
    assert response.endswith("The answer is 42.")
    assert output.num_turns == 8  # the user's, 4 assistant turns, 3 tool turns
    # The tool messages are context: verl masks them out of the loss.
    assert 0 in output.response_mask
    assert output.response_mask[-1] == 1


async def test_a_cell_that_raises_shows_its_traceback(code_tools: list[BaseTool]) -> None:
    _, response = await trajectory(
        code_tools, [call("a = 1\nprint('before')\nprint(1 / 0)"), call("print(a + 1)"), "Done."]
    )
    raised, after = tool_messages(response)
    assert raised.startswith("before\nTraceback (most recent call last):")
    assert raised.endswith("ZeroDivisionError: division by zero")
    assert after == "2"


async def test_an_infinite_loop_hits_the_time_limit(code_tools: list[BaseTool]) -> None:
    _, response = await trajectory(
        code_tools, [call("print('start', flush=True)\nwhile True:\n    pass"), "It timed out."]
    )
    [message] = tool_messages(response)
    assert message.endswith("[time limit exceeded: 1 s CPU]")


async def test_a_memory_hog_hits_the_memory_limit(code_tools: list[BaseTool]) -> None:
    # Written, not just reserved: a cgroup counts the pages a cell touches.
    hog = "hog = []\nwhile True:\n    hog.append(b'x' * (16 << 20))"
    _, response = await trajectory(code_tools, [call(hog), "Too big."])
    [message] = tool_messages(response)
    assert message.endswith("[memory limit exceeded: 256 MB]")


async def test_two_trajectories_at_once_do_not_share_state(code_tools: list[BaseTool]) -> None:
    (_, first), (_, second) = await asyncio.gather(
        trajectory(code_tools, [call("secret = 'A'"), call("print(secret)"), "A is done."]),
        trajectory(code_tools, [call("print(secret)"), call("secret = 'B'\nprint(secret)"), "B."]),
    )
    assert tool_messages(first) == ["[no output]", "A"]
    leaked, own = tool_messages(second)
    assert leaked.endswith("NameError: name 'secret' is not defined")
    assert own == "B"


async def test_an_invalid_language_is_told_to_the_model(code_tools: list[BaseTool]) -> None:
    _, response = await trajectory(code_tools, [call("print(1)", language="cobol"), "Oh."])
    [message] = tool_messages(response)
    assert message.startswith("[invalid call: language 'cobol' is not one of")


class ScriptedRunner:
    """A client that answers every call with one result or exception, and records the
    calls and ends (a unit double of the seam, for what the backend cannot be made to do)."""

    def __init__(self, answer: BaseException | ToolResult) -> None:
        self.answer = answer
        self.calls: list[dict[str, Any]] = []
        self.ended: list[str] = []

    async def get(self) -> ScriptedRunner:
        return self

    async def aclose(self) -> None:
        pass

    async def run(self, session_id: str, code: str, **options: Any) -> ToolResult:
        self.calls.append({"session_id": session_id, "code": code, **options})
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    async def end(self, session_id: str) -> None:
        self.ended.append(session_id)
        if isinstance(self.answer, BaseException):
            raise self.answer


def _sandbox_error() -> ToolResult:
    return ToolResult(call_id="c", session_id="s", seq=1, status="sandbox_error", message="boom")


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        (TimeoutError(), "timeout"),
        (PublishError("broker down"), "sandbox_error"),
        (KafkaIOError("no reply topic"), "sandbox_error"),
        (RuntimeError("a bug"), "sandbox_error"),
        (_sandbox_error(), "sandbox_error"),
    ],
)
async def test_an_infrastructure_failure_is_text_and_a_flag_never_an_exception(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: BaseException | ToolResult,
    status: str,
) -> None:
    runner = ScriptedRunner(failure)
    monkeypatch.setattr(replies, "_PROCESS_CLIENTS", {})
    monkeypatch.setattr(verl_tool, "_make_clients", lambda _: runner)
    kafka = KafkaSettings("127.0.0.1:9", topics=Topics(prefix="unit."))
    [tool] = initialize_tools_from_config(tools_yaml(tmp_path, kafka))
    instance_id, _ = await tool.create()
    response, reward, metrics = await tool.execute(instance_id, {"code": "print(1)"})
    await tool.release(instance_id)
    assert response.text is not None
    assert response.text.startswith("[tool unavailable:")
    assert "the code may not have run" in response.text
    assert reward == 0.0
    assert metrics["infra_failure"] == 1
    assert metrics["status"] == status
    # Without agent_data (not verl's ToolAgentLoop) the session was this call's alone.
    assert runner.ended == [instance_id]


async def test_a_trajectorys_session_ends_when_verl_drops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = ToolResult(call_id="c", session_id="s", seq=1, status="ok", stdout="1\n")
    runner = ScriptedRunner(result)
    monkeypatch.setattr(replies, "_PROCESS_CLIENTS", {})
    monkeypatch.setattr(verl_tool, "_make_clients", lambda _: runner)
    kafka = KafkaSettings("127.0.0.1:9", topics=Topics(prefix="unit."))
    tools = initialize_tools_from_config(tools_yaml(tmp_path, kafka))
    _, response = await trajectory(tools, [call("print(1)"), call("print(1)"), "Done."])
    assert tool_messages(response) == ["1", "1"]
    assert runner.ended == []  # release() after each call left the session alone
    gc.collect()
    await until(lambda: runner.ended != [], "the session's end")
    [ended] = runner.ended
    assert re.fullmatch(r"[0-9a-f]{32}-[0-9a-f]{12}", ended)


def test_the_retool_example_sets_only_keys_verl_has() -> None:
    """Every override of the ReTool script is a key of verl's trainer config (a typo
    would stop verl at start-up); its tools YAML is the one tested above."""
    script = (EXAMPLES / "retool/run_retool_rewardbus.sh").read_text()
    overrides = dict(re.findall(r"^\s+([a-z_.]+)=(\S+) \\$", script, flags=re.MULTILINE))
    assert overrides["actor_rollout_ref.rollout.multi_turn.enable"] == "True"
    assert overrides["actor_rollout_ref.rollout.multi_turn.format"] == "hermes"
    assert overrides["actor_rollout_ref.rollout.agent.default_agent_loop"] == "tool_agent"
    assert "tool_agent" in _agent_loop_registry
    assert "TOOLS=${TOOLS:-$HERE/../tools/code_interpreter.yaml}" in script
    config = OmegaConf.load(GENERATED_CONFIG)
    unknown = [k for k in overrides if not _has_key(config, k)]
    assert unknown == []
    assert len(overrides) > 20


def _has_key(config: Any, dotted: str) -> bool:
    parent, _, leaf = dotted.rpartition(".")
    node = OmegaConf.select(config, parent)
    # keys(), not "in node": a DictConfig hides a key whose value is "???" from "in".
    return node is not None and leaf in node.keys()  # noqa: SIM118


def _unit_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: ScriptedRunner) -> BaseTool:
    monkeypatch.setattr(replies, "_PROCESS_CLIENTS", {})
    monkeypatch.setattr(verl_tool, "_make_clients", lambda _: runner)
    kafka = KafkaSettings("127.0.0.1:9", topics=Topics(prefix="unit."))
    [tool] = initialize_tools_from_config(tools_yaml(tmp_path, kafka, time_s=2))
    return tool


async def test_other_languages_run_stateless_with_the_configured_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = ToolResult(call_id="c", session_id="s", seq=1, status="ok", stdout="hi\n")
    runner = ScriptedRunner(result)
    tool = _unit_tool(tmp_path, monkeypatch, runner)
    response, _, metrics = await tool.execute("i", {"code": "echo hi", "language": "BASH"})
    assert response.text == "hi"
    assert metrics == {
        "status": "ok", "exec_ms": 0.0, "queue_ms": 0.0, "rebuilt": 0, "infra_failure": 0
    }  # fmt: skip
    [sent] = runner.calls
    assert sent["language"] == "bash"
    assert sent["stateless"] is True
    assert sent["limits"].time_s == 2
    assert sent["timeout_s"] == 60


def _result(status: str, stdout: str = "", stderr: str = "", **fields: Any) -> ToolResult:
    return ToolResult(
        call_id="c", session_id="s", seq=1, status=status, stdout=stdout, stderr=stderr, **fields
    )


LIMITS = ToolLimits(time_s=5, memory_mb=512, output_kb=64)


@pytest.mark.parametrize(
    ("result", "text"),
    [
        (_result("ok"), "[no output]"),
        (_result("ok", "a\nb\n"), "a\nb"),
        (
            _result("error", "x\n", "Traceback ...\nValueError: v\n"),
            "x\nTraceback ...\nValueError: v",
        ),
        (_result("time_limit", "tick\n"), "tick\n[time limit exceeded: 5 s CPU]"),
        (_result("memory_limit"), "[memory limit exceeded: 512 MB]"),
        (
            _result("output_limit", "yyy", truncated=True),
            "yyy\n[output limit exceeded: output cut at 64 KB]",
        ),
        (
            _result("session_lost", message="the cell called os._exit"),
            "[session lost: the cell called os._exit]",
        ),
        (_result("session_lost"), "[session lost: the interpreter exited]"),
    ],
)
def test_what_the_model_reads(result: ToolResult, text: str) -> None:
    assert render_result(result, LIMITS, max_chars=100) == text


def test_long_output_is_cut_and_the_cut_is_marked() -> None:
    both = render_result(_result("error", "o" * 300, "e" * 300), LIMITS, max_chars=100)
    assert both == "o" * 50 + "\n[... 250 characters cut]\n[250 characters cut ...]\n" + "e" * 50
    only_stdout = render_result(_result("time_limit", "o" * 300), LIMITS, max_chars=100)
    assert only_stdout == "o" * 100 + "\n[... 200 characters cut]\n[time limit exceeded: 5 s CPU]"
    short_stdout = render_result(_result("error", "o" * 10, "e" * 300), LIMITS, max_chars=100)
    assert short_stdout == "o" * 10 + "\n[210 characters cut ...]\n" + "e" * 90


def test_the_tool_reads_the_environment_as_the_cli_does() -> None:
    env = {
        "REWARDBUS_BOOTSTRAP_SERVERS": "env:9092",
        "REWARDBUS_TOPIC_PREFIX": "env.",
        "REWARDBUS_SECURITY_PROTOCOL": "SSL",
    }
    kafka = ToolSettings.from_config({}, env).kafka()
    assert (kafka.bootstrap_servers, kafka.topics.prefix, kafka.security_protocol) == (
        "env:9092",
        "env.",
        "SSL",
    )
    given = ToolSettings.from_config({"topic_prefix": "", "security_protocol": "SSL"}, env)
    assert (given.topic_prefix, given.security_protocol) == ("", "SSL")
    with pytest.raises(ValueError, match="REWARDBUS_BOOTSTRAP_SERVERS"):
        ToolSettings.from_config({}, {})
