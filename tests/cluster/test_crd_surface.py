"""What a user sees of the CRD through kubectl: explain's descriptions, the printer columns (READY
and METRICS-AVAILABLE apart while the metrics source is dead), and a policy without spec stored
with every default filled in by the API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadwise.policies.policy import SchedulingPolicySpec
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube

from .conftest import POLICIES, OperatorFactory
from .util import kubectl

pytestmark = pytest.mark.cluster


async def explain(kubeconfig: Path, field: str) -> str:
    """kubectl explain, once the CRD's OpenAPI is published (a few seconds after install)."""
    text = ""

    async def published() -> bool:
        nonlocal text
        try:
            text = await kubectl(kubeconfig, "explain", f"schedulingpolicies.{field}")
        except AssertionError:
            return False
        return True

    await wait_for(published, 30, what=f"kubectl explain {field}")
    return " ".join(text.split())


async def test_explain_describes_the_fields_as_they_are(
    kube: Kube, local_cluster: LocalCluster
) -> None:
    kubeconfig = local_cluster.cp.kubeconfig
    labels = await explain(kubeconfig, "spec.namespaceSelector.matchLabels")
    assert "for namespaceSelector its namespace" in labels
    assert "Labels the pod must carry" not in labels
    kind = await explain(kubeconfig, "status.conditions.type")
    assert "Ready" in kind and "MetricsAvailable" in kind and "Invalid" not in kind


def pruned(value: Any) -> Any:
    """The value without empty lists and objects, at any depth."""
    if isinstance(value, dict):
        kept = {k: pruned(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ({}, [])}
    return value


async def test_a_policy_without_spec_is_stored_with_every_default(kube: Kube, clean: None) -> None:
    bare = {"apiVersion": "loadwise.io/v1alpha1", "kind": "SchedulingPolicy"}
    await kube.create(POLICIES, {**bare, "metadata": {"name": "bare"}})
    stored = (await kube.get(f"{POLICIES}/bare"))["spec"]
    defaults = SchedulingPolicySpec().model_dump(mode="json", by_alias=True, exclude_none=True)
    # Empty lists and objects are left out (they add only noise); numbers compare by value.
    assert pruned(stored) == pruned(defaults)
    assert {"weights", "hotThresholds", "loadShare", "metrics", "strategy"} <= set(stored)
    assert SchedulingPolicySpec.model_validate(stored) == SchedulingPolicySpec()


async def test_get_shows_metrics_available_apart_from_ready(
    kube: Kube, local_cluster: LocalCluster, clean: None, operator: OperatorFactory
) -> None:
    kubeconfig = local_cluster.cp.kubeconfig
    await kube.create(POLICIES, manifests.policy("blind"))
    async with operator(metrics_sources=("prometheus",), prometheus_url="http://127.0.0.1:1"):

        async def columns() -> dict[str, str] | None:
            header, row = (await kubectl(kubeconfig, "get", "schedpol", "blind")).splitlines()
            names = header.split()
            starts = [header.index(name) for name in names]
            ends = [*starts[1:], None]
            got = {n: row[s:e].strip() for n, s, e in zip(names, starts, ends, strict=True)}
            return got if got["READY"] and got["METRICS-AVAILABLE"] else None

        async def reported() -> bool:
            return await columns() is not None

        await wait_for(reported, 30, what="both conditions reported")
        got = await columns()
        assert got is not None
        assert (got["READY"], got["METRICS-AVAILABLE"]) == ("True", "False")
