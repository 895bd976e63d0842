"""rewardbus as verl's code tool: cells a model runs during a multi-turn rollout.

verl 0.9.1's ``ToolAgentLoop`` loads it from a tools YAML
(``actor_rollout_ref.rollout.multi_turn.tool_config_path``; the README and
``examples/verl/tools/code_interpreter.yaml`` have one)::

    tools:
      - class_name: consumers.verl_tool.RewardbusCodeTool
        config: {type: native, bootstrap_servers: "kafka:9092", time_s: 5}

Sessions. verl creates and releases a tool instance around *every* call, so an
instance is no session: the session is the trajectory's. Its id is the
trajectory's ``request_id`` (from the ``agent_data`` verl passes to ``execute``)
plus a random suffix, kept on that ``agent_data``: verl's ``full_determinism``
request ids (``det-<priority>``) repeat from one step to the next, and a new
trajectory must never find an old one's variables. ``release`` leaves the session
alone; it ends when verl drops the trajectory's ``agent_data`` (verl has no
trajectory-end hook for tools; a finalizer on that object is the signal), and
otherwise by the worker's idle TTL (``idle_ttl_s``). A call without ``agent_data``
(another agent loop) gets a session of its own, ended at ``release``.

What the model sees: stdout, then stderr (the traceback of a cell that raised),
then one status line when the cell did not simply end (``[time limit exceeded:
5 s CPU]``, ``[memory limit exceeded: 512 MB]``, ...), cut to ``max_output_chars``
with the cut marked. An infrastructure failure (no result within ``timeout_s``, a
broker that refuses the call, ``sandbox_error``) is a ``[tool unavailable: ...]``
text the model can read and ``infra_failure: 1`` in the call's metrics; nothing
raises into verl's rollout, and a call that did not run never reads as one that
printed nothing. Every call is counted (``rewardbus.verl.tool_calls``, by status
and infra_failure): verl 0.9.1's ``ToolAgentLoop`` drops the metrics dict a tool
returns.

All tools of a process with the same settings share one client (one producer,
one reply reader per event loop): :func:`shared_clients`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import metrics
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from consumers.replies import process_clients
from consumers.tool_client import SharedToolClients, ToolClientConfig
from kafkaio import KafkaIOError
from producers import PublishError
from schemas import ENV_BOOTSTRAP, KafkaSettings, Topics, kafka_settings
from schemas.tools import ToolLimits, ToolResult

__all__ = [
    "CONFIG_KEYS",
    "LANGUAGES",
    "RewardbusCodeTool",
    "ToolSettings",
    "render_result",
    "shared_clients",
]

log = logging.getLogger(__name__)
_meter = metrics.get_meter(__name__)
_calls = _meter.create_counter(
    "rewardbus.verl.tool_calls", description="tool calls answered to verl, by status and failure"
)

LANGUAGES: tuple[str, ...] = (
    "python", "javascript", "c", "cpp", "go", "java", "rust", "bash", "sql", "perl",
)  # fmt: skip
"""Languages the worker's executor runs; python keeps a live session, the rest run stateless."""

STATEFUL_LANGUAGE = "python"

CONFIG_KEYS = frozenset(
    {
        "type",  # verl's own: "native"
        "bootstrap_servers",
        "topic_prefix",
        "security_protocol",
        "client_options",
        "time_s",
        "memory_mb",
        "output_kb",
        "idle_ttl_s",
        "lifetime_s",
        "timeout_s",
        "max_output_chars",
        "languages",
    }
)


@dataclass(frozen=True)
class ToolSettings:
    """The tool's options, from the ``config:`` block of its entry in verl's tools YAML.

    Hashable: the process shares one client per distinct settings.
    """

    bootstrap_servers: str
    topic_prefix: str = ""
    security_protocol: str = "PLAINTEXT"
    # aiokafka keyword arguments (SASL and the like), as sorted pairs.
    client_options: tuple[tuple[str, Any], ...] = ()
    limits: ToolLimits = field(default_factory=ToolLimits)
    # No result within this long: an infrastructure failure for the model and the metrics.
    timeout_s: float = 60.0
    max_output_chars: int = 4096
    languages: tuple[str, ...] = LANGUAGES

    @classmethod
    def from_config(cls, config: Mapping[str, Any], env: Mapping[str, str]) -> ToolSettings:
        """Settings from the tool's config; raises ``ValueError`` naming what is wrong."""
        unknown = sorted(set(config) - CONFIG_KEYS)
        if unknown:
            raise ValueError(
                f"unknown rewardbus tool options {unknown} (known: {sorted(CONFIG_KEYS)})"
            )
        topic_prefix = config.get("topic_prefix")
        kafka = kafka_settings(
            env,
            bootstrap=config.get("bootstrap_servers"),
            topic_prefix=None if topic_prefix is None else str(topic_prefix),
            security_protocol=config.get("security_protocol"),
        )
        if kafka is None:
            raise ValueError(
                "the rewardbus tool needs a Kafka cluster: set bootstrap_servers in its "
                f"config or {ENV_BOOTSTRAP}"
            )
        defaults = ToolLimits()
        limits = ToolLimits(
            time_s=float(config.get("time_s", defaults.time_s)),
            memory_mb=int(config.get("memory_mb", defaults.memory_mb)),
            output_kb=int(config.get("output_kb", defaults.output_kb)),
            idle_ttl_s=float(config.get("idle_ttl_s", defaults.idle_ttl_s)),
            lifetime_s=float(config.get("lifetime_s", defaults.lifetime_s)),
        )
        languages = tuple(str(name).lower() for name in config.get("languages") or LANGUAGES)
        if STATEFUL_LANGUAGE not in languages:
            raise ValueError(f"languages {list(languages)} must include {STATEFUL_LANGUAGE!r}")
        return cls(
            bootstrap_servers=kafka.bootstrap_servers,
            topic_prefix=kafka.topics.prefix,
            security_protocol=kafka.security_protocol,
            client_options=tuple(sorted(dict(config.get("client_options") or {}).items())),
            limits=limits,
            timeout_s=float(config.get("timeout_s", 60.0)),
            max_output_chars=int(config.get("max_output_chars", 4096)),
            languages=languages,
        )

    def kafka(self) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=self.bootstrap_servers,
            topics=Topics(prefix=self.topic_prefix),
            client_id="rewardbus-verl-tool",
            security_protocol=self.security_protocol,
            client_options=dict(self.client_options),
        )


class ToolRunner(Protocol):
    """What the tool needs of a ``consumers.tool_client.ToolClient``."""

    async def run(
        self,
        session_id: str,
        code: str,
        *,
        language: str = "python",
        limits: ToolLimits | None = None,
        stateless: bool = False,
        timeout_s: float | None = None,
    ) -> ToolResult: ...

    async def end(self, session_id: str) -> None: ...


class SharedRunners(Protocol):
    """What the tool needs of a ``consumers.tool_client.SharedToolClients``."""

    async def get(self) -> ToolRunner: ...

    async def aclose(self) -> None: ...


def _make_clients(settings: ToolSettings) -> SharedRunners:
    config = ToolClientConfig(
        name="rewardbus-verl-tool", timeout_s=settings.timeout_s, limits=settings.limits
    )
    shared: SharedRunners = SharedToolClients(settings.kafka(), config)
    return shared


def shared_clients(
    settings: ToolSettings, make: Callable[[ToolSettings], SharedRunners] | None = None
) -> SharedRunners:
    """This process's clients for ``settings``, made (by ``make``) the first time.

    Process-wide, by design (as the reward manager's, in the same registry,
    :func:`consumers.replies.process_clients`): verl builds the tools once per
    agent-loop worker, and every tool with the same settings shares one client.
    """
    return process_clients(("verl-tool", settings), lambda: (make or _make_clients)(settings))


_STATUS_LINES: Mapping[str, str] = {
    "time_limit": "[time limit exceeded: {time_s:g} s CPU]",
    "memory_limit": "[memory limit exceeded: {memory_mb} MB]",
    "output_limit": "[output limit exceeded: output cut at {output_kb} KB]",
    "session_lost": "[session lost: {message}]",
}
# Statuses that say the infrastructure, not the code, failed.
_INFRA_STATUSES = frozenset({"sandbox_error", "rejected", "replay_needed"})


def render_result(result: ToolResult, limits: ToolLimits, max_chars: int) -> str:
    """The text the model reads for a cell that ran (any status but an infra one).

    stdout, then stderr, each cut to its share of ``max_chars`` (stdout keeps its
    head, stderr its tail, where a traceback ends), then the status line.
    """
    template = _STATUS_LINES.get(result.status)
    status_line = ""
    if template is not None:
        message = result.message or "the interpreter exited"
        status_line = template.format(
            time_s=limits.time_s,
            memory_mb=limits.memory_mb,
            output_kb=limits.output_kb,
            message=message,
        )
    elif result.truncated:
        status_line = f"[output truncated at {limits.output_kb} KB]"
    if not (result.stdout or result.stderr or status_line):
        return "[no output]"
    # stderr gets up to half when both are long; either gets all the room the other leaves.
    stdout_room = max(0, max_chars - min(len(result.stderr), max_chars // 2))
    stderr_room = max(0, max_chars - min(len(result.stdout), stdout_room))
    stdout = _head(result.stdout, stdout_room)
    stderr = _tail(result.stderr, stderr_room)
    return "\n".join(_lines(part) for part in (stdout, stderr, status_line) if part)


def _head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} characters cut]"


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"[{len(text) - limit} characters cut ...]\n{text[len(text) - limit :]}"


def _lines(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


def _metrics(result: ToolResult | None, status: str, *, infra_failure: bool) -> dict[str, Any]:
    _calls.add(1, {"status": status, "infra_failure": int(infra_failure)})
    return {
        "status": status,
        "exec_ms": result.exec_ms if result else 0.0,
        "queue_ms": result.queue_ms if result else 0.0,
        "rebuilt": int(result.rebuilt) if result else 0,
        "infra_failure": int(infra_failure),
    }


def _infra_failure(reason: str, status: str, result: ToolResult | None = None) -> _Outcome:
    text = f"[tool unavailable: {reason}; the code may not have run. Try again later.]"
    return ToolResponse(text=text), 0.0, _metrics(result, status, infra_failure=True)


_Outcome = tuple[ToolResponse, float, dict[str, Any]]


@dataclass
class _Session:
    """A trajectory's session: its id, and a lock so its cells run one at a time."""

    session_id: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


# Where a trajectory's session lives: on verl's AgentData, which lives as long as it.
_SESSION_ATTRIBUTE = "_rewardbus_tool_session"


class RewardbusCodeTool(BaseTool):
    """A code interpreter whose cells run in rewardbus's sandbox workers, over Kafka.

    verl builds it as ``cls(config=<the YAML's config block>, tool_schema=<its
    tool_schema or None>)``; without a ``tool_schema`` it offers
    :meth:`default_schema` (``code_interpreter``: ``code``, optional ``language``).
    """

    def __init__(
        self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None
    ) -> None:
        self.settings = ToolSettings.from_config(config, os.environ)
        super().__init__(config, tool_schema or self.default_schema(self.settings.languages))
        self._ephemeral: set[str] = set()
        self._ending: set[asyncio.Task[None]] = set()

    @staticmethod
    def default_schema(languages: tuple[str, ...] = LANGUAGES) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "code_interpreter",
                    "description": (
                        "Run code and see its output. Python cells share one live session "
                        "for the whole conversation (variables, imports, functions and "
                        "files persist); other languages run as a fresh program each call."
                    ),
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "code": {"type": "string", "description": "The code to run."},
                            "language": {
                                "type": "string",
                                "description": "The code's language (default python).",
                                "enum": list(languages),
                            },
                        },
                        "required": ["code"],
                    },
                },
            }
        )

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Run one cell; returns ``(response, 0.0, metrics)`` and never raises."""
        code = parameters.get("code")
        language = str(parameters.get("language") or STATEFUL_LANGUAGE).lower()
        if not isinstance(code, str) or not code.strip():
            text = "[invalid call: `code` must be a non-empty string]"
            return ToolResponse(text=text), 0.0, _metrics(None, "invalid", infra_failure=False)
        if language not in self.settings.languages:
            known = list(self.settings.languages)
            text = f"[invalid call: language {language!r} is not one of {known}]"
            return ToolResponse(text=text), 0.0, _metrics(None, "invalid", infra_failure=False)
        session = self._session(kwargs.get("agent_data"), instance_id)
        async with session.lock:
            return await self._run(session.session_id, code, language)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Ends only a session of one call (no ``agent_data``); a trajectory's outlives it."""
        if instance_id in self._ephemeral:
            self._ephemeral.discard(instance_id)
            await self._end(instance_id)

    async def _run(self, session_id: str, code: str, language: str) -> _Outcome:
        settings = self.settings
        try:
            client = await shared_clients(settings).get()
            result = await client.run(
                session_id,
                code,
                language=language,
                limits=settings.limits,
                stateless=language != STATEFUL_LANGUAGE,
                timeout_s=settings.timeout_s,
            )
        except TimeoutError:
            log.warning(
                "tool call of session %s: no result in %.0f s", session_id, settings.timeout_s
            )
            return _infra_failure(f"no result within {settings.timeout_s:g} s", "timeout")
        except (PublishError, KafkaIOError) as exc:
            log.warning("tool call of session %s not sent: %s", session_id, exc.reason)
            return _infra_failure("the code service could not be reached", "sandbox_error")
        # Whatever else fails, verl must not see it raise: it would hand the model its
        # error text unflagged, indistinguishable from a cell's own error.
        except Exception:
            log.exception("tool call of session %s failed", session_id)
            return _infra_failure("the code service failed", "sandbox_error")
        if result.status in _INFRA_STATUSES:
            log.warning("tool call of session %s: %s %s", session_id, result.status, result.message)
            return _infra_failure(f"the sandbox failed ({result.status})", result.status, result)
        text = render_result(result, settings.limits, settings.max_output_chars)
        return ToolResponse(text=text), 0.0, _metrics(result, result.status, infra_failure=False)

    def _session(self, agent_data: Any, instance_id: str) -> _Session:
        """The trajectory's session (made on its first call), or one for this call alone."""
        if agent_data is None:
            self._ephemeral.add(instance_id)
            return _Session(instance_id)
        session: _Session | None = getattr(agent_data, _SESSION_ATTRIBUTE, None)
        if session is None:
            request_id = str(getattr(agent_data, "request_id", "") or "trajectory")
            session = _Session(f"{request_id}-{uuid.uuid4().hex[:12]}")
            setattr(agent_data, _SESSION_ATTRIBUTE, session)
            ended = weakref.finalize(
                agent_data, self._trajectory_ended, session.session_id, asyncio.get_running_loop()
            )
            ended.atexit = False
        return session

    def _trajectory_ended(self, session_id: str, loop: asyncio.AbstractEventLoop) -> None:
        """verl dropped the trajectory's state (any thread, at garbage collection)."""
        with contextlib.suppress(RuntimeError):  # the loop closed: the idle TTL ends it
            loop.call_soon_threadsafe(self._spawn_end, session_id)

    def _spawn_end(self, session_id: str) -> None:
        task = asyncio.ensure_future(self._end(session_id))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _end(self, session_id: str) -> None:
        try:
            client = await shared_clients(self.settings).get()
            await client.end(session_id)
        # Best effort, and never into verl: release() runs in its call's `finally`, where
        # an exception would end the rollout. The worker's idle TTL ends the session anyway.
        except Exception as exc:  # noqa: BLE001
            log.info("session %s not ended now (%r); its idle TTL will", session_id, exc)
