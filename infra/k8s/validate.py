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
  (types, enums, required fields and bounds), and that package's TypeScript declarations,
  generated from the same CRDs, checked by a pinned npm `typescript` (`tsc --noEmit
  --strict`): each document becomes an object literal typed with its interface, so
  TypeScript's excess-property check makes unknown fields errors, nested ones too, except
  where the CRD preserves unknown fields (there the declarations have an index signature).
  The validators alone do not close objects, and Strimzi publishes its CRDs in no package.
  tsc may name only the first of several problems in one object; fixing it shows the next.

The manifests are rendered the way `kubectl apply -k` would for what kustomization.yaml
uses here (the resource list, a base directory among the resources, inline
strategic-merge `patches`, `namespace`, `labels`); every YAML file in DIR must be listed.
`infra/k8s/static-membership` is an overlay of that kind: validate it by naming it.
Exit status 0 when all is valid, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
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
# 7 is the native (Go) compiler: ~0.25 s a check here, where 5.9's JavaScript one takes ~1.1 s.
TYPESCRIPT_NPM = "typescript@7.0.2"
NPM_PACKAGES = (STRIMZI_NPM, TYPESCRIPT_NPM)
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
KUSTOMIZATION_KEYS = {
    "apiVersion", "kind", "namespace", "labels", "resources", "images", "patches"
}  # fmt: skip

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


def _npm_installed(prefix: Path, spec: str) -> bool:
    name, _, version = spec.rpartition("@")
    manifest = prefix / "node_modules" / name / "package.json"
    if not manifest.is_file():
        return False
    installed: object = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    return installed == version


@functools.cache
def npm_dir() -> Path:
    """A private npm prefix holding the Strimzi models and TypeScript, installed on first use."""
    prefix = cache_dir() / "npm"
    if all(_npm_installed(prefix, spec) for spec in NPM_PACKAGES):
        return prefix
    prefix.mkdir(parents=True, exist_ok=True)
    # Two first runs at once (two validators, a test beside a make target) would run
    # npm install into one prefix together: one installs, the other waits and finds it.
    with (prefix.parent / "npm.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all(_npm_installed(prefix, spec) for spec in NPM_PACKAGES):
            package = prefix / "package.json"
            if not package.exists():  # npm records what it installs here: keep that record
                package.write_text('{"private": true}\n', encoding="utf-8")
            # Every package, not only the missing ones: npm prunes what package.json lacks.
            argv = ["npm", "install", "--no-audit", "--no-fund", "--silent", *NPM_PACKAGES]
            _run(argv, cwd=prefix)
    return prefix


# --- rendering ------------------------------------------------------------------------


def render(directory: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The documents kustomization.yaml produces, each with its file name; and problems.

    A resource that is a directory is an overlay's base, rendered the same way (its
    file names relative to ``directory``); ``patches`` are inline strategic-merge
    patches: ``$patch: delete`` removes the document they name, any other merges into
    it (mappings key by key, anything else replaced, which is all these patches need).
    """
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))
    problems = [f"kustomization.yaml: unsupported key {key!r}" for key in
                sorted(set(kustomization) - KUSTOMIZATION_KEYS)]  # fmt: skip
    listed = list(kustomization.get("resources", []))
    bases = [name for name in listed if (directory / name).is_dir()]
    files = [name for name in listed if name not in bases]
    present = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    problems += [f"kustomization.yaml lists {name}, which does not exist" for name in files
                 if name not in present]  # fmt: skip
    problems += [f"{name} is not listed in kustomization.yaml" for name in sorted(present)
                 if name not in files]  # fmt: skip
    labels: dict[str, str] = {}
    for entry in kustomization.get("labels", []):
        labels |= entry.get("pairs", {})
    docs: list[tuple[str, dict[str, Any]]] = []
    for base in bases:
        based, base_problems = render(directory / base)
        docs += [(f"{base.rstrip('/')}/{name}", doc) for name, doc in based]
        problems += [f"{base}: {problem}" for problem in base_problems]
    for name in (n for n in files if n in present):
        for doc in yaml.safe_load_all((directory / name).read_text(encoding="utf-8")):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                problems.append(f"{name}: a document that is not a mapping")
                continue
            docs.append((name, doc))
    for index, entry in enumerate(kustomization.get("patches", [])):
        problems += _apply_patch(docs, yaml.safe_load(entry.get("patch", "")), index)
    namespace = kustomization.get("namespace")
    return [(name, _customize(doc, namespace, labels)) for name, doc in docs], problems


def _apply_patch(docs: list[tuple[str, dict[str, Any]]], patch: Any, index: int) -> list[str]:
    """Apply one strategic-merge patch in place; a problem if it names no document."""
    if not isinstance(patch, dict):
        return [f"kustomization.yaml: patches[{index}] is not a mapping"]
    key = (patch.get("apiVersion"), patch.get("kind"), (patch.get("metadata") or {}).get("name"))
    for position, (name, doc) in enumerate(docs):
        if (doc.get("apiVersion"), doc.get("kind"), (doc.get("metadata") or {}).get("name")) == key:
            if patch.get("$patch") == "delete":
                del docs[position]
            else:
                docs[position] = (name, _merged(doc, patch))
            return []
    return [f"kustomization.yaml: patches[{index}] names no resource: {key[1]}/{key[2]}"]


def _merged(target: Any, patch: Any) -> Any:
    if not (isinstance(target, dict) and isinstance(patch, dict)):
        return patch
    return {**target, **{k: _merged(target.get(k), v) for k, v in patch.items()}}


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


# --- Strimzi fields, through TypeScript's excess-property check ---------------------------

STRIMZI_MODELS = "@kubernetes-models/strimzi-kafka-operator"
# module/moduleResolution: resolve through the package's `exports` as a bundler would;
# skipLibCheck: the package's own declarations are not ours to check (and cost time).
TSCONFIG = {
    "compilerOptions": {
        "strict": True,
        "noEmit": True,
        "skipLibCheck": True,
        "module": "preserve",
        "moduleResolution": "bundler",
        "types": [],
        "pretty": False,
    },
    "files": ["manifests.ts"],
}
_TSC_ERROR = re.compile(r"^manifests\.ts\((?P<line>\d+),\d+\): error TS\d+: (?P<message>.*)$")
_UNKNOWN = re.compile(
    r"^Object literal may only specify known properties, (?:and|but) '\"?(?P<field>.+?)\"?' "
    r"does not exist in type .*?(?:Did you mean to write '\"?(?P<hint>[^'\"]+)\"?'\?)?$"
)
_MISSING = re.compile(r"^Property '\"?(?P<field>.+?)\"?' is missing in type ")
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
# tsc names one unknown field per object; each round drops those and finds the next ones.
TSC_ROUNDS = 8

# A generated source line and what it holds: (document index, field path), or None.
_Line = tuple[str, tuple[int, tuple[str, ...]] | None]


def _literal(value: Any, where: tuple[int, tuple[str, ...]], depth: int) -> list[_Line]:
    """`value` as a TypeScript literal, one member a line, each line with the field it holds.

    tsc reports a problem with a field at that field's key, so the line it names is the path.
    """
    index, path = where
    pad, items = "  " * (depth + 1), None
    if isinstance(value, dict) and value:
        items = [(f"{json.dumps(str(k))}: ", str(k), v) for k, v in value.items()]
        brackets = "{}"
    elif isinstance(value, list) and value:
        items = [("", str(i), v) for i, v in enumerate(value)]
        brackets = "[]"
    if items is None:
        return [(json.dumps(value), where)]
    lines: list[_Line] = [(brackets[0], where)]
    for prefix, key, item in items:
        inner = _literal(item, (index, (*path, key)), depth + 1)
        lines.append((pad + prefix + inner[0][0], inner[0][1]))
        lines += inner[1:]
        lines[-1] = (lines[-1][0] + ",", lines[-1][1])
    lines.append(("  " * depth + brackets[1], where))
    return lines


def _declaration(prefix: Path, doc: dict[str, Any]) -> tuple[str, str] | None:
    """(version, kind) when the models declare that Strimzi kind; the node check covers others."""
    version = str(doc.get("apiVersion", "")).partition("/")[2]
    kind = str(doc.get("kind", ""))
    if not (_IDENTIFIER.match(version) and _IDENTIFIER.match(kind)):
        return None
    module = prefix / "node_modules" / STRIMZI_MODELS / STRIMZI_GROUP / version / f"{kind}.d.ts"
    return (version, kind) if module.is_file() else None


def typescript_module(prefix: Path, docs: list[dict[str, Any]]) -> list[_Line]:
    """One `const` per Strimzi document, typed with the interface the models declare for it."""
    imports: list[_Line] = []
    body: list[_Line] = []
    for index, doc in enumerate(docs):
        declared = _declaration(prefix, doc)
        if declared is None:
            continue
        version, kind = declared
        alias = f"I{kind}_{version}"
        module = f"{STRIMZI_MODELS}/{STRIMZI_GROUP}/{version}/{kind}"
        line = f'import type {{ I{kind} as {alias} }} from "{module}";'
        if (line, None) not in imports:
            imports.append((line, None))
        literal = _literal(doc, (index, ()), 0)
        literal[0] = (f"const doc{index}: {alias} = {literal[0][0]}", literal[0][1])
        literal[-1] = (literal[-1][0] + ";", literal[-1][1])
        body += literal
    return imports + body


def _tsc_message(message: str) -> tuple[str, str | None]:
    """The message said shortly (tsc spells out whole types), and the unknown field it names."""
    unknown = _UNKNOWN.match(message)
    if unknown:
        field, hint = unknown["field"], unknown["hint"]
        return f"unknown field {field!r}" + (f" (did you mean {hint!r}?)" if hint else ""), field
    missing = _MISSING.match(message)
    return (f"missing required field {missing['field']!r}" if missing else message), None


def validate_strimzi_fields(docs: list[dict[str, Any]]) -> tuple[list[list[str]], list[str]]:
    """tsc's problems per Strimzi document (`path: message`), and any it placed in none.

    tsc names one unknown field per object literal, so the named ones are dropped and the
    documents checked again, up to TSC_ROUNDS times, to name the rest too.
    """
    found: list[list[str]] = [[] for _ in docs]
    unplaced: list[str] = []
    pending = json.loads(json.dumps(docs))  # a copy, with keys as TypeScript sees them
    for _ in range(TSC_ROUNDS):
        placed, stray = _tsc_round(pending)
        unplaced += [line for line in stray if line not in unplaced]
        for index, path, message, _ in placed:
            problem = f"{'/'.join(path)}: {message}"
            if problem not in found[index]:
                found[index].append(problem)
        unknown = [(i, path) for i, path, _, field in placed if path and path[-1] == field]
        if not unknown:
            break
        for index, path in unknown:
            _drop(pending[index], path)
    return found, unplaced


_Placed = tuple[int, tuple[str, ...], str, str | None]


def _tsc_round(docs: list[dict[str, Any]]) -> tuple[list[_Placed], list[str]]:
    """One tsc check: (document, field path, message, unknown field) each; lines placed nowhere."""
    lines = typescript_module(npm_dir(), docs)
    if not any(where for _, where in lines):
        return [], []
    placed: list[_Placed] = []
    stray: list[str] = []
    for line in _tsc(npm_dir(), "\n".join(text for text, _ in lines) + "\n"):
        error = _TSC_ERROR.match(line)
        where = lines[int(error["line"]) - 1][1] if error else None
        if error and where:
            placed.append((where[0], where[1], *_tsc_message(error["message"])))
        elif not line.startswith(" "):  # indented lines elaborate the error above them
            stray.append(line)
    return placed, stray


def _drop(doc: dict[str, Any], path: tuple[str, ...]) -> None:
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[int(key)] if isinstance(parent, list) else parent[key]
    parent.pop(path[-1], None)


def _tsc(prefix: Path, source: str) -> list[str]:
    """tsc's output lines for `source` (compiled beside the models, so imports resolve)."""
    tsc = prefix / "node_modules" / "typescript" / "bin" / "tsc"
    with tempfile.TemporaryDirectory(dir=prefix, prefix="tsc-") as work:
        (Path(work) / "manifests.ts").write_text(source, encoding="utf-8")
        (Path(work) / "tsconfig.json").write_text(json.dumps(TSCONFIG), encoding="utf-8")
        result = subprocess.run(  # noqa: S603  # our argv, no shell
            ["node", str(tsc), "-p", work],  # noqa: S607  # node from PATH, as for the models
            cwd=work,
            text=True,
            capture_output=True,
            check=False,
        )
    output = (result.stdout + result.stderr).splitlines()
    # 0: clean; 1 or 2: problems found. Anything else is tsc failing, not the manifests.
    if result.returncode not in (0, 1, 2) or (result.returncode and not output):
        raise RuntimeError(f"tsc failed ({result.returncode}): {result.stderr}")
    return output


def _strimzi_problems(strimzi: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The Strimzi documents' problems: the models' validators, then tsc's field check."""
    docs = [doc for _, doc in strimzi]
    problems = [
        f"{name}: {_name(doc)}: Strimzi schema: {error}"
        for (name, doc), error in zip(strimzi, validate_strimzi(docs), strict=True)
        if error is not None
    ]
    fields, unplaced = validate_strimzi_fields(docs)
    for (name, doc), found in zip(strimzi, fields, strict=True):
        problems += [f"{name}: {_name(doc)}: Strimzi fields (tsc): {problem}" for problem in found]
    return problems + [f"Strimzi fields (tsc): {line}" for line in unplaced]


def validate(directory: Path) -> list[str]:
    """Every problem with the manifests in `directory`, one line each."""
    docs, problems = render(directory)
    problems += _strimzi_problems(
        [(name, doc) for name, doc in docs if _group(doc) == STRIMZI_GROUP]
    )
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
