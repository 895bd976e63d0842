"""Reading a broker's log when it fails: the lines that say why, and whether a bind failed."""

from __future__ import annotations

from pathlib import Path

__all__ = ["bind_failed", "log_excerpt"]

_LOG_TAIL_LINES = 10
_LOG_CAUSE_LINES = 12


def log_excerpt(path: Path) -> str:
    """The broker log's distinct errors and causes, then its last lines without stack frames:
    the line that names the problem is rarely among the last ones of a Java log."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return f"(no broker log at {path})"
    lines = [line for line in lines if not _is_stack_frame(line)]
    causes = list(dict.fromkeys(line for line in lines if _is_cause(line)))[:_LOG_CAUSE_LINES]
    tail = lines[-_LOG_TAIL_LINES:]
    parts = [f"errors in {path}:", *causes] if causes else []
    parts += [f"last lines of {path}:", *tail] if tail else [f"{path} is empty"]
    return "\n".join(parts)


def bind_failed(log_text: str, host: str, port: int) -> bool:
    """True when the log says the broker could not bind host:port."""
    # Kafka: "Socket server failed to bind to 127.0.0.1:9092: Address already in use."
    return f"{host}:{port}: Address already in use" in log_text


def _is_cause(line: str) -> bool:
    return " ERROR " in line or line.startswith(("Caused by:", "Error:", "Exception in thread"))


def _is_stack_frame(line: str) -> bool:
    stripped = line.lstrip()
    return stripped.startswith("at ") or (stripped.startswith("... ") and line != stripped)
