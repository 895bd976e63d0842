"""Validate the Kubernetes manifests offline: Kubernetes, Strimzi, KEDA and ServiceMonitor schemas.

    .venv/bin/python infra/k8s/validate.py [DIR]      # DIR defaults to infra/k8s

No cluster runs here, so every manifest is checked against schemas that ship in packages
from the reachable registries, fetched once into ~/.cache/rewardbus (or $REWARDBUS_CACHE):

- Kubernetes kinds: the JSON schemas inside PyPI's `kubernetes-validate` (strict: unknown
  fields are errors), for the oldest and the newest Kubernetes version named below;
- KEDA `ScaledObject` and Prometheus Operator `ServiceMonitor`: the CRDs' own
  openAPIV3Schema from the Go modules of those projects (`go mod download`), checked with
  `jsonschema`, unknown fields made errors the way the API server's strict field
  validation does (except where the CRD preserves unknown fields);
- Strimzi `Kafka`, `KafkaNodePool`, `KafkaTopic`: the validators that npm's
  `@kubernetes-models/strimzi-kafka-operator` generated from Strimzi's CRDs, run by node
  (types, enums, required fields and bounds; unknown fields are NOT errors there: that
  package's schemas do not close objects, and Strimzi publishes its CRDs in no package).

The manifests are rendered the way `kubectl apply -k` would for what kustomization.yaml
uses here (the resource list, `namespace`, `labels`); every YAML file in DIR must be listed.
Exit status 0 when all is valid, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import yaml  # type: ignore[import-untyped]

KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")  # appArmorProfile needs 1.30
KEDA_MODULE = "github.com/kedacore/keda/v2@v2.21.0"
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
STRIMZI_NPM = "@kubernetes-models/strimzi-kafka-operator@1.0.1"
CRD_FILES = {
    ("keda.sh", "ScaledObject"): (KEDA_MODULE, "config/crd/bases/keda.sh_scaledobjects.yaml"),
    ("monitoring.coreos.com", "ServiceMonitor"): (
        PROMETHEUS_OPERATOR_MODULE,
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
    ),
}
STRIMZI_GROUP = "kafka.strimzi.io"
# Kinds with no namespace (kustomize leaves them alone).
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "labels", "resources", "images"}

# Reads JSON [{apiVersion, kind, ...}] on stdin, prints JSON [error or null] per document.
_STRIMZI_JS = """
import { readFileSync } from "node:fs";
const docs = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const doc of docs) {
  const version = doc.apiVersion.split("/")[1];
  const path = `@kubernetes-models/strimzi-kafka-operator/kafka.strimzi.io/${version}/${doc.kind}`;
  try {
    const model = (await import(path))[doc.kind];
    new model(doc).validate();
    results.push(null);
  } catch (err) {
    results.push(String(err.message || err));
  }
}
console.log(JSON.stringify(results));
"""


def cache_dir() -> Path:
    """Where schemas are fetched to: $REWARDBUS_CACHE or ~/.cache/rewardbus, then k8s/."""
    root = os.environ.get("REWARDBUS_CACHE") or Path.home() / ".cache" / "rewardbus"
    return Path(root) / "k8s"


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, capture_output=True, **kwargs)  # noqa: S603


@functools.cache
def go_module_dir(module: str) -> Path:
    """The extracted module, downloaded through the Go module proxy on first use."""
    env = os.environ | {"GOMODCACHE": str(cache_dir() / "gomod"), "GOFLAGS": "-modcacherw"}
    go = shutil.which("go") or "/usr/local/go/bin/go"
    info = json.loads(_run([go, "mod", "download", "-json", module], env=env, cwd="/").stdout)
    if "Error" in info:
        raise RuntimeError(f"go mod download {module}: {info['Error']}")
    return Path(info["Dir"])


@functools.cache
def npm_dir() -> Path:
    """A private npm prefix holding the Strimzi models, installed on first use."""
    prefix = cache_dir() / "npm"
    marker = prefix / "node_modules" / "@kubernetes-models" / "strimzi-kafka-operator"
    if not marker.is_dir():
        prefix.mkdir(parents=True, exist_ok=True)
        (prefix / "package.json").write_text('{"private": true}\n', encoding="utf-8")
        _run(["npm", "install", "--no-audit", "--no-fund", "--silent", STRIMZI_NPM], cwd=prefix)
    return prefix


# --- rendering ------------------------------------------------------------------------


def render(directory: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The documents kustomization.yaml produces, each with its file name; and problems."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    problems = [f"kustomization.yaml: unsupported key {key!r}" for key in
                sorted(set(kustomization) - KUSTOMIZATION_KEYS)]  # fmt: skip
    listed = list(kustomization.get("resources", []))
    present = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    problems += [f"kustomization.yaml lists {name}, which does not exist" for name in listed
                 if name not in present]  # fmt: skip
    problems += [f"{name} is not listed in kustomization.yaml" for name in sorted(present)
                 if name not in listed]  # fmt: skip
    labels: dict[str, str] = {}
    for entry in kustomization.get("labels", []):
        labels |= entry.get("pairs", {})
    docs = []
    for name in (n for n in listed if n in present):
        for doc in yaml.safe_load_all((directory / name).read_text(encoding="utf-8")):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                problems.append(f"{name}: a document that is not a mapping")
                continue
            docs.append((name, _customize(doc, kustomization.get("namespace"), labels)))
    return docs, problems


def _customize(
    doc: dict[str, Any], namespace: str | None, labels: dict[str, str]
) -> dict[str, Any]:
    metadata = doc.setdefault("metadata", {})
    if isinstance(metadata, dict):
        if namespace and doc.get("kind") not in CLUSTER_SCOPED:
            metadata["namespace"] = namespace
        if labels:
            metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    return doc


# --- validation -----------------------------------------------------------------------


def _name(doc: dict[str, Any]) -> str:
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    return f"{doc.get('kind')}/{(metadata or {}).get('name')}"


def _group(doc: dict[str, Any]) -> str:
    api = str(doc.get("apiVersion", ""))
    return api.split("/", maxsplit=1)[0] if "/" in api else ""


def validate_kubernetes(doc: dict[str, Any]) -> Iterator[str]:
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = "/".join(str(p) for p in exc.path)
            yield f"Kubernetes {version}: {path}: {exc.message}"
        except kubernetes_validate.SchemaNotFoundError:
            yield f"Kubernetes {version} has no {doc.get('apiVersion')} {doc.get('kind')}"


def _closed(schema: Any) -> Any:
    """The schema with every object that lists its properties closed to others."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    if (
        "properties" in closed
        and "additionalProperties" not in closed
        and not closed.get("x-kubernetes-preserve-unknown-fields")
    ):
        closed["additionalProperties"] = False
    if closed.get("nullable") and isinstance(closed.get("type"), str):
        closed["type"] = [closed["type"], "null"]
    return closed


def crd_schema(group: str, kind: str, version: str) -> dict[str, Any] | None:
    """The CRD's openAPIV3Schema for group/version kind, closed; None if it has none."""
    module, path = CRD_FILES[(group, kind)]
    crd = yaml.safe_load((go_module_dir(module) / path).read_text(encoding="utf-8"))
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            schema: dict[str, Any] = _closed(served["schema"]["openAPIV3Schema"])
            # The API server checks metadata itself (kubernetes-validate does it below).
            schema["properties"]["metadata"] = {"type": "object"}
            return schema
    return None


def validate_crd(doc: dict[str, Any]) -> Iterator[str]:
    group, _, version = str(doc["apiVersion"]).partition("/")
    schema = crd_schema(group, str(doc.get("kind")), version)
    if schema is None:
        yield f"the {doc.get('kind')} CRD serves no version {version}"
        return
    for error in jsonschema.Draft7Validator(schema).iter_errors(doc):
        path = "/".join(str(p) for p in error.absolute_path)
        yield f"{doc['kind']} CRD schema: {path}: {error.message}"


def validate_strimzi(docs: list[dict[str, Any]]) -> list[str | None]:
    """One error message (or None) per Strimzi document, from the npm models under node."""
    if not docs:
        return []
    prefix = npm_dir()
    script = prefix / "validate-strimzi.mjs"
    script.write_text(_STRIMZI_JS, encoding="utf-8")
    out = _run(["node", str(script)], cwd=prefix, input=json.dumps(docs)).stdout
    results: list[str | None] = json.loads(out)
    return results


def validate(directory: Path) -> list[str]:
    """Every problem with the manifests in `directory`, one line each."""
    docs, problems = render(directory)
    strimzi = [(name, doc) for name, doc in docs if _group(doc) == STRIMZI_GROUP]
    for (name, doc), error in zip(
        strimzi, validate_strimzi([doc for _, doc in strimzi]), strict=True
    ):
        if error is not None:
            problems.append(f"{name}: {_name(doc)}: Strimzi schema: {error}")
    for name, doc in docs:
        group = _group(doc)
        if group == STRIMZI_GROUP:
            found = list(_metadata_only(doc))
        elif (group, doc.get("kind")) in CRD_FILES:
            found = [*validate_crd(doc), *_metadata_only(doc)]
        else:
            found = list(validate_kubernetes(doc))
        problems += [f"{name}: {_name(doc)}: {problem}" for problem in found]
    return problems


def _metadata_only(doc: dict[str, Any]) -> Iterator[str]:
    """A custom resource's metadata, checked as the ObjectMeta of a ConfigMap would be."""
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc.get("metadata")}
    for problem in validate_kubernetes(probe):
        yield problem.replace("Kubernetes", "metadata (Kubernetes", 1).replace(":", "):", 1)


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
