"""The import rules of DESIGN §3 and the error model, checked on the source (no imports run)."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ("producers", "sandbox_workers", "consumers")
# Kept reproduction script of the faust failure (DESIGN §8), not part of the service.
EXEMPT = ROOT / "consumers" / "faust_repro"
# Package roots of the error tree: every other exception of a package descends from one.
ROOTS = {
    "schemas": "RewardbusError",
    "kafkaio": "KafkaIOError",
    "producers": "ProducerError",
    "sandbox_workers": "SandboxWorkerError",
    "consumers": "ConsumerError",
}
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def sources(package: str) -> Iterator[Path]:
    for path in sorted((ROOT / package).rglob("*.py")):
        if EXEMPT not in path.parents:
            yield path


def imported(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", COMPONENTS)
def test_components_reach_kafka_only_through_the_seam(package: str) -> None:
    offenders = [str(p.relative_to(ROOT)) for p in sources(package) if "aiokafka" in imported(p)]
    assert offenders == []


@pytest.mark.parametrize("package", COMPONENTS)
def test_components_import_neither_each_other_nor_the_app_shell(package: str) -> None:
    forbidden = {*COMPONENTS, "rewardbus"} - {package}
    offenders = {
        str(p.relative_to(ROOT)): sorted(imported(p) & forbidden)
        for p in sources(package)
        if imported(p) & forbidden
    }
    assert offenders == {}


def test_the_seam_imports_only_schemas_of_ours() -> None:
    ours = {"kafkaio", "schemas", *COMPONENTS, "rewardbus"}
    offenders = {
        str(p.relative_to(ROOT)): sorted(imported(p) & ours - {"kafkaio", "schemas"})
        for p in sources("kafkaio")
        if imported(p) & ours - {"kafkaio", "schemas"}
    }
    assert offenders == {}


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
