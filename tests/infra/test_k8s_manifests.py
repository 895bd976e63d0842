"""The Kubernetes manifests validate offline, a broken one is caught, and they say what they must.

infra/k8s/validate.py checks every manifest against the Kubernetes schemas (PyPI
kubernetes-validate), the KEDA and ServiceMonitor CRDs (their Go modules) and the Strimzi
models (npm: their validators, and their TypeScript declarations under a pinned npm
typescript for unknown fields), all fetched into ~/.cache/rewardbus on first use.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # stubs: types-PyYAML, not installed

from schemas import Topics

K8S = Path(__file__).resolve().parents[2] / "infra" / "k8s"

# Fetching the schemas the first time (a Go module zip, an npm package) takes a while.
pytestmark = pytest.mark.timeout(600)


def _validator() -> Any:
    spec = importlib.util.spec_from_file_location("k8s_validate", K8S / "validate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VALIDATOR = _validator()


def _validate(directory: Path) -> subprocess.CompletedProcess[str]:
    """The command line, as CI and people run it."""
    return subprocess.run(
        [sys.executable, str(K8S / "validate.py"), str(directory)],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )


def _docs() -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if doc is not None
    ]


def _one(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in _docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_every_manifest_validates() -> None:
    result = _validate(K8S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 problems" in result.stderr
    kinds = Counter(doc["kind"] for doc in _docs())
    assert kinds == {
        "Namespace": 1,
        "KafkaNodePool": 1,
        "Kafka": 1,
        "KafkaTopic": 10,
        "Deployment": 2,
        "ScaledObject": 1,
        "PodDisruptionBudget": 2,
        "Service": 2,
        "ServiceMonitor": 1,
    }


BREAKAGES = {
    "kubernetes type": (
        "worker.yaml",
        "  replicas: 2\n",
        "  replicas: two\n",
        "'two' is not of type",
    ),
    "kubernetes unknown field": (
        "worker.yaml",
        "            privileged: false\n",
        "            privileged: false\n            privilegd: false\n",
        "'privilegd' was unexpected",
    ),
    "keda unknown field": (
        "worker-autoscaling.yaml",
        "  minReplicaCount: 1\n",
        "  minReplicaCont: 1\n",
        "'minReplicaCont' was unexpected",
    ),
    "servicemonitor unknown field": (
        "monitoring.yaml",
        "      interval: 15s\n",
        "      intervall: 15s\n",
        "'intervall' was unexpected",
    ),
    "strimzi enum": ("kafka.yaml", "    - broker\n", "    - brokr\n", "allowed values"),
    "strimzi bound": ("topics.yaml", "  partitions: 48\n", "  partitions: 0\n", "must be >= 1"),
    "strimzi unknown field": (
        "kafka.yaml",
        "    listeners:\n",
        "    listners:\n",
        "kafka.yaml: Kafka/rewardbus: Strimzi fields (tsc): spec/kafka/listners: "
        "unknown field 'listners'",
    ),
    "strimzi unknown field in a list item": (
        "kafka.yaml",
        "        tls: false\n",
        "        tls: false\n        tlss: true\n",
        "Kafka/rewardbus: Strimzi fields (tsc): spec/kafka/listeners/0/tlss: unknown field 'tlss'",
    ),
    "strimzi topic unknown field": (
        "topics.yaml",
        "  partitions: 48\n",
        "  partitions: 48\n  partitons: 48\n",
        "KafkaTopic/rollouts-completions: Strimzi fields (tsc): spec/partitons: unknown field",
    ),
    "unlisted file": ("stray.yaml", "", "kind: ConfigMap\n", "not listed in kustomization"),
}


def _edited_copy(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of infra/k8s with `old` (once in `name`) replaced, or `name` created as `new`."""
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    target = copy / name
    text = target.read_text(encoding="utf-8") if target.exists() else ""
    assert text.count(old) == 1 or not old
    target.write_text(text.replace(old, new) if old else new, encoding="utf-8")
    return copy


@pytest.mark.parametrize("breakage", list(BREAKAGES), ids=list(BREAKAGES))
def test_a_broken_copy_is_rejected(tmp_path: Path, breakage: str) -> None:
    copy = _edited_copy(tmp_path, *BREAKAGES[breakage][:3])
    problems = VALIDATOR.validate(copy)  # in-process: the schemas are loaded once
    expected = BREAKAGES[breakage][3]
    assert any(expected in problem for problem in problems), problems


def test_every_unknown_strimzi_field_in_one_object_is_named(tmp_path: Path) -> None:
    # tsc stops at the first unknown field of an object literal; the validator asks again.
    new = "    verson: 4.1.1\n    imagee: kafka:latest\n    listners: []\n"
    problems = VALIDATOR.validate(_edited_copy(tmp_path, "kafka.yaml", "    version: 4.1.1\n", new))
    for field in ("verson", "imagee", "listners"):
        assert any(f"spec/kafka/{field}: unknown field '{field}'" in p for p in problems), problems


def test_strimzi_fields_the_crd_leaves_open_are_accepted(tmp_path: Path) -> None:
    # spec.kafka.config preserves unknown fields (any broker setting): no index signature lost.
    old = "      group.initial.rebalance.delay.ms: 3000\n"
    new = old + "      log.cleaner.threads: 2\n"
    assert VALIDATOR.validate(_edited_copy(tmp_path, "kafka.yaml", old, new)) == []


def test_tsc_messages_are_said_shortly() -> None:
    long_type = "{ version?: string | undefined; ... }"
    unknown = (
        "Object literal may only specify known properties, "
        f"and '\"tlss\"' does not exist in type '{long_type}'."
    )
    hinted = (
        "Object literal may only specify known properties, but 'tlss' does not exist in type "
        "'GenericListener'. Did you mean to write 'tls'?"
    )
    missing = (
        f"Property '\"tls\"' is missing in type '{long_type}' but required in type '{long_type}'."
    )
    assert VALIDATOR._tsc_message(unknown) == ("unknown field 'tlss'", "tlss")
    assert VALIDATOR._tsc_message(hinted) == ("unknown field 'tlss' (did you mean 'tls'?)", "tlss")
    assert VALIDATOR._tsc_message(missing) == ("missing required field 'tls'", None)


def test_the_command_fails_on_a_broken_copy(tmp_path: Path) -> None:
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    worker = copy / "worker.yaml"
    worker.write_text(worker.read_text(encoding="utf-8").replace('cpu: "3"', "cpu: [3]"))
    result = _validate(copy)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "resources/limits/cpu" in result.stdout, result.stdout


def test_topics_match_rewardbus_with_replication_and_co_partitioning() -> None:
    specs = {d["spec"]["topicName"]: d["spec"] for d in _docs() if d["kind"] == "KafkaTopic"}
    assert set(specs) == set(Topics().all())
    assert all(
        s["replicas"] == 3 and s["config"]["min.insync.replicas"] == 2 for s in specs.values()
    )
    t = Topics()
    co_partitioned = {t.rewards, t.manifests, t.scored, t.aggregator_state}
    assert len({specs[name]["partitions"] for name in co_partitioned}) == 1
    scaled = _one("ScaledObject", "rewardbus-worker")["spec"]
    # More workers than completion partitions would sit idle.
    assert scaled["maxReplicaCount"] <= specs[t.completions]["partitions"]
    assert scaled["triggers"][0]["metadata"]["topic"] == t.completions


def test_worker_runs_the_strict_sandbox_unprivileged_within_limits() -> None:
    pod = _one("Deployment", "rewardbus-worker")["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    context = worker["securityContext"]
    assert context["privileged"] is False
    assert "SYS_ADMIN" in context["capabilities"]["add"]
    assert "drop" not in context["capabilities"]  # the jail drops to uid 65534 itself
    assert context["seccompProfile"]["type"] in {"Localhost", "Unconfined"}
    assert context["appArmorProfile"]["type"] == "Unconfined"
    # Kubernetes refuses allowPrivilegeEscalation=false together with SYS_ADMIN.
    assert "allowPrivilegeEscalation" not in context
    assert {"cpu", "memory"} <= set(worker["resources"]["limits"])
    assert "infra/compose" in (K8S / "worker.yaml").read_text(encoding="utf-8")


def test_worker_privileges_match_the_compose_worker() -> None:
    compose = yaml.safe_load((K8S.parent / "compose" / "docker-compose.yml").read_text())
    service = compose["services"]["worker"]
    pod = _one("Deployment", "rewardbus-worker")["spec"]["template"]["spec"]
    context = pod["containers"][0]["securityContext"]
    assert set(context["capabilities"]["add"]) == set(service["cap_add"])
    assert "apparmor=unconfined" in service["security_opt"]
    assert any(opt.startswith("seccomp=") for opt in service["security_opt"])
    assert not service.get("privileged", False)


STATIC = K8S / "static-membership"


def test_the_static_membership_overlay_validates_and_swaps_the_workers() -> None:
    result = _validate(STATIC)
    assert result.returncode == 0, result.stdout + result.stderr
    docs, problems = VALIDATOR.render(STATIC)
    assert problems == []
    kinds = {(doc["kind"], doc["metadata"]["name"]) for _, doc in docs}
    assert ("StatefulSet", "rewardbus-worker") in kinds
    assert ("Deployment", "rewardbus-worker") not in kinds  # no second, dynamic set
    assert ("Deployment", "rewardbus-aggregator") in kinds  # the rest of the base stays
    (scaled,) = [doc for _, doc in docs if doc["kind"] == "ScaledObject"]
    assert scaled["spec"]["scaleTargetRef"]["kind"] == "StatefulSet"
    assert scaled["spec"]["minReplicaCount"] == 1  # merged into, not replaced
    assert {doc["metadata"].get("namespace") for _, doc in docs} - {None} == {"rewardbus"}


def test_the_static_workers_run_the_base_pod_with_their_names_as_instance_ids() -> None:
    (statefulset,) = [
        doc
        for doc in yaml.safe_load_all((STATIC / "worker-statefulset.yaml").read_text())
        if doc and doc["kind"] == "StatefulSet"
    ]
    static = statefulset["spec"]["template"]
    base = _one("Deployment", "rewardbus-worker")["spec"]["template"]
    args = static["spec"]["containers"][0]["args"]
    assert "--instance-id=$(POD_NAME)" in args
    args.remove("--instance-id=$(POD_NAME)")
    assert static == base  # the same pod, privileges and limits included
    # Pod names are stable only under a StatefulSet; the headless Service names them.
    assert statefulset["spec"]["serviceName"] == "rewardbus-worker-metrics"


def test_a_patch_that_names_no_resource_is_a_problem(tmp_path: Path) -> None:
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    overlay = copy / "static-membership" / "kustomization.yaml"
    text = overlay.read_text(encoding="utf-8")
    assert text.count("kind: ScaledObject") == 1
    overlay.write_text(text.replace("kind: ScaledObject", "kind: ScaledObjekt"))
    problems = VALIDATOR.validate(copy / "static-membership")
    assert any("names no resource: ScaledObjekt/rewardbus-worker" in p for p in problems), problems
