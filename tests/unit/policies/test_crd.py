"""The committed CRD files must be exactly what the pydantic model generates."""

import re
from pathlib import Path

import pytest

from loadwise.policies import policy_reference
from loadwise.policies.crd import TARGETS, render
from loadwise.policies.crd_schema import build_crd

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("target", TARGETS)
def test_committed_crd_matches_model(target: str) -> None:
    committed = (ROOT / target).read_text()
    assert committed == render(), f"{target} drifted: run `python -m loadwise.policies.crd --write`"


def test_schema_is_structural_and_documented() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    weights = spec["properties"]["weights"]
    assert weights["properties"]["cpu"]["minimum"] == 0
    assert weights["properties"]["cpu"]["description"]
    assert weights["x-kubernetes-validations"]

    def walk(node: dict[str, object]) -> None:
        assert "$ref" not in node and "anyOf" not in node and "title" not in node
        assert node.get("additionalProperties") is not False
        for sub in (node.get("properties") or {}).values():  # type: ignore[attr-defined]
            walk(sub)
        if isinstance(node.get("items"), dict):
            walk(node["items"])  # type: ignore[arg-type]

    walk(spec)


def test_go_module_pins_the_same_kubernetes_version() -> None:
    from loadwise_dev.controlplane import pinned_versions

    version = pinned_versions()["K8S_VERSION"]
    go_mod = (ROOT / "hack" / "k8s" / "go.mod").read_text()
    assert re.search(rf"^\s*k8s\.io/kubernetes {re.escape(version)}\b", go_mod, re.M)
    staging = "v0." + version.removeprefix("v1.")
    replaces = [line for line in go_mod.splitlines() if "=> k8s.io/" in line]
    assert replaces and all(line.endswith(staging) for line in replaces)


def test_etcd_module_pins_the_same_etcd_version() -> None:
    from loadwise_dev.controlplane import pinned_versions

    version = pinned_versions()["ETCD_VERSION"]
    go_mod = (ROOT / "hack" / "etcd" / "go.mod").read_text()
    line = rf"^(require)?\s*go\.etcd\.io/etcd/server/v3 {re.escape(version)}\b"
    assert re.search(line, go_mod, re.M)


def test_committed_policy_reference_matches_model() -> None:
    committed = (ROOT / policy_reference.TARGET).read_text()
    assert committed == policy_reference.render(), (
        f"{policy_reference.TARGET} drifted: run `python -m loadwise.policies.crd --write`"
    )
    for field in ("spec.weights.cpu", "spec.hotThresholds.memory", "status.conditions"):
        assert f"| `{field}` |" in committed  # nested fields are listed, by their API names
