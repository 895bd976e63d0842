"""The import rules of DESIGN §3 and the error model, checked on the source (no imports run)."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ("producers", "sandbox_workers", "consumers")
# The components each one may import besides schemas and kafkaio (DESIGN §3).
BELOW: dict[str, set[str]] = {
    "producers": set(),
    "sandbox_workers": set(),
    "consumers": {"producers"},
}
# Package roots of the error tree: every other exception of a package descends from one.
ROOTS = {
    "schemas": "RewardbusError",
    "kafkaio": "KafkaIOError",
    "producers": "ProducerError",
    "sandbox_workers": "SandboxWorkerError",
    "consumers": "ConsumerError",
    "rewardbus": "ShellError",
}
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def sources(package: str) -> Iterator[Path]:
    yield from sorted((ROOT / package).rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Dotted names of every module ``path`` imports, anywhere in it.

    ``from a.b import c`` counts ``a.b`` and ``a.b.c`` (``c`` may be a module);
    relative imports are resolved against ``path``'s package.
    """
    package = list(path.relative_to(ROOT).parent.parts)
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module:
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def imported(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports."""
    return {name.split(".")[0] for name in imported_modules(path)}


@pytest.mark.parametrize("package", COMPONENTS)
def test_components_reach_kafka_only_through_the_seam(package: str) -> None:
    offenders = [str(p.relative_to(ROOT)) for p in sources(package) if "aiokafka" in imported(p)]
    assert offenders == []


@pytest.mark.parametrize("package", COMPONENTS)
def test_components_import_only_the_components_below_them_never_the_app_shell(
    package: str,
) -> None:
    """consumers may import producers (the learner side drives the trainer-side
    publisher); producers never import consumers; sandbox_workers imports neither."""
    forbidden = {*COMPONENTS, "rewardbus"} - {package} - BELOW[package]
    offenders = {
        str(p.relative_to(ROOT)): sorted(imported(p) & forbidden)
        for p in sources(package)
        if imported(p) & forbidden
    }
    assert offenders == {}


def test_the_learner_side_publishes_completions_and_problems_only_through_producers() -> None:
    """One publisher: no consumers module names the completions or problems topic itself
    (the reward client hands its records to ``producers.RolloutProducer``)."""
    named = {
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in sources("consumers")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr in {"completions", "problems"}
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "topics"
    }
    assert named == set()
    publishers = {
        str(p.relative_to(ROOT)) for p in sources("consumers") if "producers" in imported(p)
    }
    assert "consumers/reward_client.py" in publishers


def test_the_seam_imports_only_schemas_of_ours() -> None:
    ours = {"kafkaio", "schemas", *COMPONENTS, "rewardbus"}
    offenders = {
        str(p.relative_to(ROOT)): sorted(imported(p) & ours - {"kafkaio", "schemas"})
        for p in sources("kafkaio")
        if imported(p) & ours - {"kafkaio", "schemas"}
    }
    assert offenders == {}


def test_only_the_seam_imports_aiokafka() -> None:
    """Not the app shell either: its topic creation and group waits go through kafkaio."""
    offenders = [
        str(p.relative_to(ROOT))
        for package in ROOTS
        if package != "kafkaio"
        for p in sources(package)
        if "aiokafka" in imported(p)
    ]
    assert offenders == []


def test_schemas_import_nothing_of_ours() -> None:
    ours = set(ROOTS) - {"schemas"}
    offenders = {
        str(p.relative_to(ROOT)): sorted(imported(p) & ours)
        for p in sources("schemas")
        if imported(p) & ours
    }
    assert offenders == {}


def test_only_the_telemetry_module_configures_the_opentelemetry_sdk() -> None:
    """Components ask the API for tracers and meters; one module sets up the SDK."""
    configuring = {
        str(p.relative_to(ROOT))
        for package in ROOTS
        for p in sources(package)
        if any(name.startswith("opentelemetry.sdk") for name in imported_modules(p))
    }
    assert configuring == {"rewardbus/telemetry.py"}


def test_the_warm_pool_never_imports_the_jail() -> None:
    """One way only: the jail wires the pool in (``sandbox_workers.jail.zygotes``).

    The pool names what it needs of a jail slot as protocols (``pool/slot.py``);
    an import of the jail from the pool would bring the jail <-> pool cycle back.
    """
    pool = ROOT / "sandbox_workers" / "pool"
    offenders = {
        str(p.relative_to(ROOT)): sorted(
            name
            for name in imported_modules(p)
            if name == "sandbox_workers.jail" or name.startswith("sandbox_workers.jail.")
        )
        for p in sorted(pool.rglob("*.py"))
    }
    assert {path: names for path, names in offenders.items() if names} == {}
    assert len(offenders) >= 5  # the pool's modules were read


def test_integration_tests_never_use_the_fake_broker() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "tests" / "integration").rglob("*.py"))
        if "FakeBroker" in p.read_text() or "kafkaio.fake" in p.read_text()
    ]
    assert offenders == []


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_public_exception_descends_from_its_package_root(package: str) -> None:
    """A class deriving straight from a builtin exception would be a second root."""
    second_roots = [
        f"{p.relative_to(ROOT)}:{node.name}"
        for p in sources(package)
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ClassDef)
        and not node.name.startswith("_")  # private signals inside the sandboxed harness
        and node.name != ROOTS[package]
        and any(isinstance(base, ast.Name) and base.id in BUILTIN_ERRORS for base in node.bases)
    ]
    assert second_roots == []
