"""The language tags verl's SandboxFusion client sends name our languages (any case)."""

from __future__ import annotations

import pytest

from sandbox_workers.languages import LANGUAGES, lookup

# verl's sandbox_fusion client's SUPPORTED_LANGUAGES, each with the language it means here.
SANDBOX_FUSION = {
    "python": "python", "cpp": "cpp", "nodejs": "javascript", "go": "go", "java": "java",
    "php": "php", "csharp": "csharp", "bash": "bash", "typescript": "typescript", "sql": "sql",
    "rust": "rust", "lua": "lua", "R": "r", "perl": "perl", "D_ut": "d", "ruby": "ruby",
    "scala": "scala", "kotlin_script": "kotlin", "racket": "racket",
}  # fmt: skip
# Test-framework modes (go test, pytest, JUnit, Jest), GPU runs, and toolchains no package
# source this project installs from has (Julia, Swift, Lean, Verilog): docs/languages.md.
NOT_SERVED = (
    "go_test", "pytest", "junit", "jest", "cuda", "python_gpu", "julia", "swift", "lean", "verilog",
)  # fmt: skip


@pytest.mark.parametrize(("tag", "name"), SANDBOX_FUSION.items())
def test_a_sandbox_fusion_tag_names_our_language(tag: str, name: str) -> None:
    language = lookup(tag)
    assert language is not None and language.name == name


@pytest.mark.parametrize("tag", NOT_SERVED)
def test_tags_we_do_not_serve_name_no_language(tag: str) -> None:
    assert lookup(tag) is None


def test_twenty_languages_or_more() -> None:
    assert len(LANGUAGES) >= 20
    assert all(lookup(name) is LANGUAGES[name] for name in LANGUAGES)
