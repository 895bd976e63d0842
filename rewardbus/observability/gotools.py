"""Jaeger, Prometheus, promtool, kubeconform and kustomize, built from the Go module proxy.

No image registry or download site is reachable on the machines this project runs
on, but the Go module proxy is: each tool is built from source into
``$REWARDBUS_CACHE/bin/<name>-<version>`` the first time it is needed and reused
after that. A build writes to a temporary name and renames it into place, so an
interrupted build never leaves a half-written binary that looks installed.

Jaeger's go.mod has replace directives, which ``go install pkg@version`` refuses;
building it as a tool dependency of a throwaway module works (DESIGN §8).

Prometheus and promtool are built with the build tags ``remove_all_sd,enable_dns_sd``:
every service discovery but file, HTTP and DNS (the compose scrape config's) is left
out. Scraping here is static or DNS; a Kubernetes deployment scrapes through the
Prometheus Operator's own image. The tags cut the non-standard Go files the build
compiles from 11,418 to 3,717 (``go list -deps``), Kubernetes' client and the cloud SDKs
among them: the slowest part of a fresh machine's first ``make test``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rewardbus.errors import Unavailable
from schemas import cache_root

__all__ = [
    "JAEGER",
    "KUBECONFORM",
    "KUSTOMIZE",
    "PROMETHEUS",
    "PROMTOOL",
    "GoTool",
    "ToolBuildError",
    "ensure",
]

GO_FLAGS = ("-trimpath", "-ldflags=-s -w")


class ToolBuildError(Unavailable):
    """A tool could not be built; the message names the command and its output."""


@dataclass(frozen=True, slots=True)
class GoTool:
    """One program built from a Go module at a pinned version."""

    name: str
    module: str
    package: str
    version: str
    as_tool: bool = False  # build through `go get -tool` in a throwaway module
    tags: tuple[str, ...] = ()  # go build -tags
    variant: str = ""  # names a build with tags in the binary's name, so caches never mix

    @property
    def binary_name(self) -> str:
        return f"{self.name}-{self.version}" + (f"-{self.variant}" if self.variant else "")

    @property
    def flags(self) -> tuple[str, ...]:
        return GO_FLAGS + ((f"-tags={','.join(self.tags)}",) if self.tags else ())


JAEGER = GoTool(
    "jaeger",
    "github.com/jaegertracing/jaeger",
    "github.com/jaegertracing/jaeger/cmd/jaeger",
    "v1.76.0",  # the v1-tagged twin of Jaeger v2.13.0
    as_tool=True,
)
# File, HTTP and DNS service discovery only (see the module docstring).
_PROMETHEUS_SD_TAGS = ("remove_all_sd", "enable_dns_sd")
PROMETHEUS = GoTool(
    "prometheus",
    "github.com/prometheus/prometheus",
    "github.com/prometheus/prometheus/cmd/prometheus",
    "v0.316.0",  # Prometheus 3.x
    tags=_PROMETHEUS_SD_TAGS,
    variant="dns-sd",
)
PROMTOOL = GoTool(
    "promtool",
    "github.com/prometheus/prometheus",
    "github.com/prometheus/prometheus/cmd/promtool",
    "v0.316.0",
    tags=_PROMETHEUS_SD_TAGS,
    variant="dns-sd",
)
# infra/k8s/validate.py renders the Kubernetes manifests with kustomize and checks them with
# kubeconform, against local schemas.
KUBECONFORM = GoTool(
    "kubeconform",
    "github.com/yannh/kubeconform",
    "github.com/yannh/kubeconform/cmd/kubeconform",
    "v0.8.0",
)
KUSTOMIZE = GoTool(
    "kustomize",
    "sigs.k8s.io/kustomize/kustomize/v5",
    "sigs.k8s.io/kustomize/kustomize/v5",
    "v5.8.1",  # builds with the machines' Go 1.26
)
TOOLS = {tool.name: tool for tool in (JAEGER, PROMETHEUS, PROMTOOL, KUBECONFORM, KUSTOMIZE)}


def ensure(tool: GoTool, env: Mapping[str, str], *, quiet: bool = False) -> Path:
    """The path of ``tool``'s binary, building it first if the cache has none."""
    bin_dir = cache_root(env) / "bin"
    target = bin_dir / tool.binary_name
    if target.is_file() and os.access(target, os.X_OK):
        return target
    go = shutil.which("go", path=env.get("PATH"))
    if go is None:
        raise ToolBuildError(f"building {tool.name} needs Go (https://go.dev/dl) on PATH")
    bin_dir.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(
            f"building {tool.name} {tool.version} from the Go module proxy (once) ...",
            file=sys.stderr,
            flush=True,
        )
    go_env = _go_env(env)
    with tempfile.TemporaryDirectory(prefix=f"build-{tool.name}-") as work:
        partial = bin_dir / f".{tool.binary_name}.partial"
        if tool.as_tool:
            _go(go, ["mod", "init", f"rewardbus-{tool.name}-build"], work, go_env)
            _go(go, ["get", "-tool", f"{tool.package}@{tool.version}"], work, go_env)
            _go(go, ["build", *tool.flags, "-o", str(partial), tool.package], work, go_env)
        else:
            go_env["GOBIN"] = work
            _go(go, ["install", *tool.flags, f"{tool.package}@{tool.version}"], work, go_env)
            shutil.move(str(Path(work) / _installed_name(tool.package)), partial)
        partial.rename(target)
    return target


def _installed_name(package: str) -> str:
    """The file ``go install`` writes: the package's last path element, less a ``/vN``."""
    parts = package.split("/")
    return parts[-2] if len(parts) > 1 and re.fullmatch(r"v[0-9]+", parts[-1]) else parts[-1]


def _go_env(env: Mapping[str, str]) -> dict[str, str]:
    """Module and build caches under the project cache, so clones and CI runs share them."""
    go_cache = cache_root(env) / "go"
    merged = dict(env)
    merged.setdefault("GOMODCACHE", str(go_cache / "mod"))
    merged.setdefault("GOCACHE", str(go_cache / "build"))
    merged.setdefault("GOFLAGS", "-modcacherw")
    return merged


def _go(go: str, args: list[str], cwd: str, env: Mapping[str, str]) -> None:
    done = subprocess.run(  # noqa: S603 -- argv list, no shell
        [go, *args], cwd=cwd, env=dict(env), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout)[-2000:]
        raise ToolBuildError(f"go {' '.join(args)} failed ({done.returncode}):\n{tail}")


def main(argv: list[str] | None = None) -> int:
    """``python -m rewardbus.observability.gotools [NAME ...]``: build (or find) the tools."""
    names = (argv if argv is not None else sys.argv[1:]) or list(TOOLS)
    for name in names:
        if name not in TOOLS:
            print(f"unknown tool {name!r}; known: {', '.join(TOOLS)}", file=sys.stderr)
            return 2
        print(ensure(TOOLS[name], os.environ))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
