"""Validate the Kubernetes manifests offline with kubeconform, against local schemas only.

    .venv/bin/python infra/k8s/validate.py [DIR]      # DIR defaults to infra/k8s

No cluster runs here. kubeconform (built once from the Go module proxy, like promtool:
rewardbus.observability.gotools) checks every rendered manifest with ``-strict`` (unknown
fields and duplicate keys are errors) for the oldest and the newest Kubernetes version
below. Its schemas are laid out once per version of their sources under
~/.cache/rewardbus/k8s (or $REWARDBUS_CACHE), one folder per Kubernetes version, named
the way kubeconform's ``{{ .ResourceKind }}{{ .KindSuffix }}.json`` template asks:

- Kubernetes kinds: the strict JSON schemas that PyPI's `kubernetes-validate` ships, with
  their references made relative (they name kubernetes.io, which kubeconform would fetch);
- KEDA `ScaledObject` and Prometheus Operator `ServiceMonitor`: the openAPIV3Schema of the
  CRDs in those projects' Go modules (`go mod download`);
- Strimzi `Kafka`, `KafkaNodePool`, `KafkaTopic`: the CRDs that Strimzi's own generator
  writes from its API model, both from Maven Central (strimzi-crds/pom.xml; Java 21+).

A CRD's schema becomes JSON schema as kubeconform's openapi2jsonschema does it, made strict
the way the API server's field validation is: an object that lists its properties admits no
others unless the CRD preserves unknown fields; `metadata` is Kubernetes' ObjectMeta.

kubeconform does not render kustomizations: `kustomize build DIR` does (kustomize from the
Go module proxy, built the same way), and every YAML file in DIR must be listed.
`infra/k8s-static-membership` is an overlay: validate it by naming it. Exit status 0 when
all is valid, 1 with one line per problem.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import yaml  # type: ignore[import-untyped]

from rewardbus.observability.gotools import KUBECONFORM, KUSTOMIZE, ensure
from schemas import cache_root

KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")  # appArmorProfile needs 1.30
KEDA_MODULE = "github.com/kedacore/keda/v2@v2.21.0"
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
CRD_FILES = (
    (KEDA_MODULE, "config/crd/bases/keda.sh_scaledobjects.yaml"),
    (PROMETHEUS_OPERATOR_MODULE, "example/prometheus-operator-crd/"
     "monitoring.coreos.com_servicemonitors.yaml"),
)  # fmt: skip
STRIMZI_POM = Path(__file__).resolve().parent / "strimzi-crds" / "pom.xml"
STRIMZI_VERSION = "1.2.0"  # the pom's strimzi.version; its v1 API is what the manifests use
STRIMZI_MODELS = ("kafka.Kafka", "nodepool.KafkaNodePool", "topic.KafkaTopic")
# crd-generator 1.x is built for Java 21+; the machines' default is 17, Temurin 25 beside it.
JAVA = os.environ.get("REWARDBUS_JAVA21", "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java")
OBJECT_META = "_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
SCHEMA_TEMPLATE = (
    "{{ .NormalizedKubernetesVersion }}-local-strict/{{ .ResourceKind }}{{ .KindSuffix }}.json"
)
_AT = re.compile(r"- at '(?P<path>[^']*)': (?P<what>.+?)(?=\s+- at '|$)")


def cache_dir() -> Path:
    return cache_root(os.environ) / "k8s"


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, capture_output=True, **kwargs)  # noqa: S603


def _go_module_dir(module: str) -> Path:
    """The extracted module, downloaded through the Go module proxy on first use."""
    env = os.environ | {"GOMODCACHE": str(cache_dir() / "gomod"), "GOFLAGS": "-modcacherw"}
    go = shutil.which("go") or "/usr/local/go/bin/go"
    info = json.loads(_run([go, "mod", "download", "-json", module], env=env, cwd="/").stdout)
    if "Error" in info:
        raise RuntimeError(f"go mod download {module}: {info['Error']}")
    return Path(info["Dir"])


def _strimzi_crds(out: Path) -> list[Path]:
    """Strimzi's CRDs for its v1 API, generated into `out` as Strimzi's build generates them."""
    lib = cache_dir() / f"strimzi-{STRIMZI_VERSION}"
    if not (lib / ".complete").exists():
        _run(["mvn", "-q", "-B", "-f", str(STRIMZI_POM), "dependency:copy-dependencies",
              f"-DoutputDirectory={lib}", "-DincludeScope=runtime"])  # fmt: skip
        (lib / ".complete").touch()
    crds = [out / f"{model}.yaml" for model in STRIMZI_MODELS]
    classes = [f"io.strimzi.api.kafka.model.{model}={out / model}.yaml" for model in STRIMZI_MODELS]
    _run([JAVA, "-cp", f"{lib}/*", "io.strimzi.crdgenerator.CrdGenerator", "--yaml",
          "--crd-api-version", "v1", "--api-versions", "v1", "--storage-version", "v1",
          *classes])  # fmt: skip
    return crds


def _strict(schema: Any) -> Any:
    """An openAPIV3Schema as JSON schema: objects that list their properties closed to others."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in strict
        and "additionalProperties" not in strict
        and not strict.get("x-kubernetes-preserve-unknown-fields")
    ):
        strict["additionalProperties"] = False
    if strict.get("nullable") and isinstance(strict.get("type"), str):
        strict["type"] = [strict["type"], "null"]
    return strict


def _write_crd_schemas(crd_file: Path, folder: Path) -> None:
    """One JSON schema per served version of the CRD, named as kubeconform's template asks."""
    crd = yaml.load(crd_file.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    group, kind = crd["spec"]["group"].split(".")[0], crd["spec"]["names"]["kind"].lower()
    for served in crd["spec"]["versions"]:
        schema = _strict(served["schema"]["openAPIV3Schema"])
        schema["properties"]["metadata"] = {"$ref": OBJECT_META}
        name = f"{kind}-{group}-{served['name']}.json"
        (folder / name).write_text(json.dumps(schema), encoding="utf-8")


def _write_kubernetes_schemas(version: str, folder: Path) -> None:
    """kubernetes-validate's strict schemas, referring to their definitions by relative path."""
    package = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    for path in (package / f"v{version}-local-strict").glob("*.json"):
        schema = json.loads(path.read_text(encoding="utf-8"))
        schema.pop("$id", None)
        text = json.dumps(schema).replace('"/api/_definitions.json#', '"_definitions.json#')
        (folder / path.name).write_text(text, encoding="utf-8")


@functools.cache
def schema_dir() -> Path:
    """The schema folders, made once per version of this file and kubernetes-validate."""
    source = Path(__file__).read_bytes() + STRIMZI_POM.read_bytes()
    key = hashlib.sha256(source + kubernetes_validate.__version__.encode()).hexdigest()[:16]
    target = cache_dir() / f"schemas-{key}"
    if target.is_dir():
        return target
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".schemas-") as work:
        crds = [_go_module_dir(module) / path for module, path in CRD_FILES]
        crds += _strimzi_crds(Path(work))
        for version in KUBERNETES_VERSIONS:
            folder = Path(work) / f"v{version}-local-strict"
            folder.mkdir()
            _write_kubernetes_schemas(version, folder)
            for crd in crds:
                _write_crd_schemas(crd, folder)
        # A first run beside another: whichever renames first wins, the same content.
        for crd in crds[len(CRD_FILES) :]:
            crd.unlink()
        if not target.exists():
            Path(work).rename(target)
            Path(work).mkdir()  # for the context manager's clean-up
    return target


# --- rendering ------------------------------------------------------------------------


def render(directory: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The documents `kustomize build` makes of `directory`; and problems.

    Problems: kustomize's own error, and YAML files beside kustomization.yaml that it
    does not list (kustomize ignores them; a manifest nobody applies is a mistake here).
    """
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    listed = set(kustomization.get("resources", []))
    problems = [f"{path.name} is not listed in kustomization.yaml"
                for path in sorted(directory.glob("*.yaml"))
                if path.name not in listed | {"kustomization.yaml"}]  # fmt: skip
    argv = [str(ensure(KUSTOMIZE, os.environ)), "build", str(directory)]
    done = subprocess.run(argv, text=True, capture_output=True, check=False)  # noqa: S603
    if done.returncode != 0:
        return [], [*problems, f"kustomize build: {done.stderr.strip()}"]
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None], problems


# --- validation -----------------------------------------------------------------------


def kubeconform(docs: list[dict[str, Any]], version: str) -> list[dict[str, Any]]:
    """kubeconform's report on each document that is not valid under Kubernetes `version`."""
    argv = [str(ensure(KUBECONFORM, os.environ)), "-strict", "-summary", "-output", "json",
            "-kubernetes-version", version,
            "-schema-location", f"{schema_dir()}/{SCHEMA_TEMPLATE}", "-"]  # fmt: skip
    stream = "".join(f"---\n{json.dumps(doc)}\n" for doc in docs)
    done = subprocess.run(argv, input=stream, text=True, capture_output=True, check=False)  # noqa: S603
    if done.returncode not in (0, 1):
        raise RuntimeError(f"kubeconform failed ({done.returncode}): {done.stderr}")
    resources: list[dict[str, Any]] = json.loads(done.stdout)["resources"]
    return resources


def _errors(message: str) -> list[str]:
    """The findings in kubeconform's message, each `path: what`.

    Its validationErrors stop at the first level, which for a Kubernetes kind is a
    reference ("/spec: validation failed"); the message holds the whole tree.
    """
    found = [f"{at['path']}: {at['what']}" for at in _AT.finditer(message)]
    return [line for line in found if not line.endswith(": validation failed")] or [message]


def validate(directory: Path) -> list[str]:
    """Every problem with the manifests in `directory`, one line each."""
    docs, problems = render(directory)
    for version in KUBERNETES_VERSIONS:
        for resource in kubeconform(docs, version) if docs else []:
            where = f"{resource['kind']}/{resource['name']}: Kubernetes {version}"
            problems += [f"{where}: {error}" for error in _errors(resource["msg"])]
    return problems


def main(argv: list[str]) -> int:
    directory = Path(argv[0]) if argv else Path(__file__).resolve().parent
    problems = validate(directory)
    for problem in problems:
        print(problem)
    docs, _ = render(directory)
    print(f"{len(docs)} manifests in {directory}: {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
