"""Kotlin's and Scala's class-data sharing archives: built at discovery, used in the jail,
skipped without a word when they no longer match the jars."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from sandbox_workers.languages import BASE_ENV, LANGUAGES, Toolchain, fetched_toolchains, jvm
from sandbox_workers.languages.jvm import COMPILER_ARCHIVE, JVM_FLAGS, RUNTIME_ARCHIVE
from sandbox_workers.sandbox import ExecRequest
from schemas import Limits, Verdict
from tests.sandbox.specs import all_specs

pytestmark = pytest.mark.sandbox

JVM_LANGUAGES = ("kotlin", "scala")
SUM = {spec.language: spec.programs[Verdict.ACCEPTED] for spec in all_specs()}
STDLIB = {"kotlin": "kotlin-stdlib", "scala": "scala-library"}


@pytest.fixture(scope="module")
def toolchains(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Toolchain]:
    state = tmp_path_factory.mktemp("state")
    found = {
        name: LANGUAGES[name].discover(state, fetched_toolchains(os.environ))
        for name in JVM_LANGUAGES
    }
    missing = [name for name, toolchain in found.items() if toolchain is None]
    assert not missing, f"not installed (make toolchains): {missing}"
    return {name: toolchain for name, toolchain in found.items() if toolchain is not None}


@pytest.fixture(scope="module")
def jail() -> Iterator[JailSandbox]:
    try:
        sandbox = JailSandbox(JailConfig(strict=False))
    except IsolationUnavailable as exc:
        pytest.fail(f"no jail on this host (see rewardbus doctor): {exc}")
    yield sandbox
    sandbox.close()


def _share_on(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The command with sharing required: the JVM then fails unless it maps the archive."""
    assert "-Xshare:auto" in argv
    return tuple("-Xshare:on" if arg == "-Xshare:auto" else arg for arg in argv)


async def _compiled(jail: JailSandbox, toolchain: Toolchain, share: str) -> tuple[bytes, str]:
    """The sum program's jar, compiled in the jail (``share``: -Xshare:on or auto), and its
    entry class."""
    language = LANGUAGES[toolchain.language]
    source = language.prepare_source(SUM[toolchain.language])
    name = language.source_name(source)
    step = language.compile_step(toolchain, name)
    assert step is not None
    argv = _share_on(step.argv) if share == "on" else step.argv
    result = await jail.execute(
        ExecRequest(
            argv=argv,
            files={name: source.encode()},
            env=BASE_ENV,
            time_s=120.0,
            memory_mb=2048,
            max_processes=step.max_processes,
            extra_mounts=toolchain.mounts + toolchain.compile_mounts,
            collect=step.collect,
        )
    )
    assert result.exit_code == 0, result.stderr[-2000:]
    return result.files["main.jar"], step.entry


@pytest.mark.parametrize("language", JVM_LANGUAGES)
def test_discovery_builds_read_only_archives(
    toolchains: dict[str, Toolchain], tmp_path: Path, language: str
) -> None:
    toolchain = toolchains[language]
    runtime, compiler = (Path(toolchain.paths[r]) for r in (RUNTIME_ARCHIVE, COMPILER_ARCHIVE))
    assert runtime.is_file() and compiler.is_file()
    assert runtime.parent.parent == fetched_toolchains(os.environ) / language / "cds"
    mounts = {Path(m.host): m for m in toolchain.mounts}
    compile_mounts = {Path(m.host): m for m in toolchain.compile_mounts}
    assert runtime in mounts and compiler in compile_mounts and compiler not in mounts
    assert not mounts[runtime].writable and not compile_mounts[compiler].writable
    assert mounts[runtime].target == str(runtime)
    # A second discovery finds them where the first left them.
    again = LANGUAGES[language].discover(tmp_path, fetched_toolchains(os.environ))
    assert again is not None and again.paths[RUNTIME_ARCHIVE] == str(runtime)


@pytest.mark.parametrize("language", JVM_LANGUAGES)
async def test_the_compiler_and_the_program_map_their_archives_in_the_jail(
    toolchains: dict[str, Toolchain], jail: JailSandbox, language: str
) -> None:
    toolchain = toolchains[language]
    jar, entry = await _compiled(jail, toolchain, "on")
    launch = LANGUAGES[language].launch(toolchain, entry, Limits())
    result = await jail.execute(
        ExecRequest(
            argv=_share_on(launch.argv),
            files={"main.jar": jar},
            stdin=b"1 2\n",
            env=BASE_ENV,
            time_s=20.0,
            memory_mb=1024,
            max_processes=launch.max_processes,
            extra_mounts=toolchain.mounts,
        )
    )
    assert (result.exit_code, result.stdout, result.stderr) == (0, b"3\n", b"")


def _stale_by_touch(archive: Path, jar: Path) -> None:
    del archive
    stat = jar.stat()
    os.utime(jar, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def _stale_by_garbage(archive: Path, jar: Path) -> None:
    """An archive the JVM cannot read (as one of another JDK's build)."""
    del jar
    data = bytearray(archive.read_bytes())
    data[:64] = bytes(64)
    archive.write_bytes(bytes(data))


@pytest.mark.parametrize("language", JVM_LANGUAGES)
@pytest.mark.parametrize("stale", [_stale_by_touch, _stale_by_garbage], ids=["touched", "garbage"])
async def test_a_stale_archive_is_skipped_without_a_word(
    toolchains: dict[str, Toolchain],
    jail: JailSandbox,
    tmp_path: Path,
    language: str,
    stale: Callable[[Path, Path], None],
) -> None:
    toolchain = toolchains[language]
    jar, entry = await _compiled(jail, toolchain, "auto")
    argv = _stale_launch(toolchain, entry, tmp_path, stale)
    (tmp_path / "main.jar").write_bytes(jar)
    assert _host_run(argv, tmp_path)[0] != 0  # the archive is unusable indeed
    assert _host_run(_share_auto(argv), tmp_path) == (0, b"3\n", b"")


def _stale_launch(
    toolchain: Toolchain, entry: str, workdir: Path, stale: Callable[[Path, Path], None]
) -> tuple[str, ...]:
    """The program's launch, -Xshare:on, with a copy of the library and an archive of a few
    of its classes (dumped as discovery does) that ``stale`` then spoils."""
    library = workdir / "library.jar"
    library.write_bytes(Path(toolchain.paths[STDLIB[toolchain.language]]).read_bytes())
    archive = workdir / "runtime.jsa"
    classes = workdir / "classes"
    classes.write_text(f"java/lang/Object\n{toolchain.language}/Unit\n", encoding="utf-8")
    dump = (
        toolchain.paths["java"],
        *(flag for flag in JVM_FLAGS if not flag.startswith("-Xshare")),
        "-Xshare:dump",
        f"-XX:SharedClassListFile={classes}",
        f"-XX:SharedArchiveFile={archive}",
        "-cp",
        str(library),
    )
    subprocess.run(dump, check=True, capture_output=True, timeout=120)
    stale(archive, library)
    paths = {STDLIB[toolchain.language]: str(library), RUNTIME_ARCHIVE: str(archive)}
    copy = dataclasses.replace(toolchain, paths={**toolchain.paths, **paths})
    return _share_on(LANGUAGES[toolchain.language].launch(copy, entry, Limits()).argv)


def _share_auto(argv: tuple[str, ...]) -> tuple[str, ...]:
    return tuple("-Xshare:auto" if arg == "-Xshare:on" else arg for arg in argv)


def _host_run(argv: tuple[str, ...], workdir: Path) -> tuple[int, bytes, bytes]:
    """Our own program on the host's java: exit status, stdout, stderr."""
    done = subprocess.run(
        argv, cwd=workdir, input=b"1 2\n", capture_output=True, timeout=60, check=False
    )
    return done.returncode, done.stdout, done.stderr


def _no_jvm(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"a JVM was started: {args}")


def test_a_second_start_on_the_same_files_runs_no_jvm(
    toolchains: dict[str, Toolchain], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archives' key and the JVM's yes to each archive are remembered against the
    files' identities: a worker start on unchanged files starts no JVM and hashes no jar
    (it took ~0.4 s of CPU per start for Kotlin and Scala)."""
    toolchain = toolchains["kotlin"]
    cds = tmp_path / "cds"
    jars = toolchain.paths["lib-jars"]
    key = jvm._archive_key(cds, toolchain.paths["java"], jars, "training")
    monkeypatch.setattr(subprocess, "run", _no_jvm)
    monkeypatch.setattr(hashlib, "file_digest", _no_jvm)
    assert jvm._archive_key(cds, toolchain.paths["java"], jars, "training") == key
    again = LANGUAGES["kotlin"].discover(tmp_path, fetched_toolchains(os.environ))
    assert again is not None
    assert again.paths[RUNTIME_ARCHIVE] == toolchain.paths[RUNTIME_ARCHIVE]
    assert again.paths[COMPILER_ARCHIVE] == toolchain.paths[COMPILER_ARCHIVE]


def test_a_changed_jar_or_archive_is_checked_again(
    toolchains: dict[str, Toolchain], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toolchain = toolchains["kotlin"]
    java, cds = toolchain.paths["java"], tmp_path / "cds"
    library = tmp_path / "library.jar"
    library.write_bytes(Path(toolchain.paths[STDLIB["kotlin"]]).read_bytes())
    key = jvm._archive_key(cds, java, str(library), "training")
    stat = library.stat()
    os.utime(library, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert jvm._archive_key(cds, java, str(library), "training") != key  # the JVM checks mtime

    # The runtime archive holds the standard library's classes: it is usable with it.
    archive = Path(toolchain.paths[RUNTIME_ARCHIVE])
    copy = tmp_path / "runtime.jsa"
    copy.write_bytes(archive.read_bytes())
    classpath = toolchain.paths[STDLIB["kotlin"]]
    runs: list[object] = []
    real_run = subprocess.run

    def counted(*args: object, **kwargs: object) -> object:
        runs.append(args)
        return real_run(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", counted)
    assert jvm._usable(java, copy, classpath, RUNTIME_ARCHIVE) is True
    assert jvm._usable(java, copy, classpath, RUNTIME_ARCHIVE) is True
    assert len(runs) == 1  # the yes was remembered
    data = bytearray(copy.read_bytes())
    data[:64] = bytes(64)
    copy.write_bytes(bytes(data))  # spoiled after it was accepted: asked again, refused
    assert jvm._usable(java, copy, classpath, RUNTIME_ARCHIVE) is False
    assert jvm._usable(java, copy, classpath, RUNTIME_ARCHIVE) is False
    assert len(runs) == 3  # a no is not remembered
