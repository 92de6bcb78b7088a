"""Manifests for simulated nodes and sample pods."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from loadwise.kube.times import stamp


def marked_unschedulable(pod: Mapping[str, Any]) -> bool:
    """PodScheduled=False/Unschedulable: a scheduler (ours or kube-scheduler) gave up for now."""
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def node(
    name: str,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    extra: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as a kubelet would register it: capacity, allocatable, a Ready condition."""
    now = stamp()
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "loadwise.io/simulated": "true",
                **(labels or {}),
            },
        },
        "spec": {"unschedulable": unschedulable},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "simulated node",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def pod(
    name: str,
    namespace: str = "default",
    scheduler_name: str = "loadwise-scheduler",
    cpu: str = "100m",
    memory: str = "128Mi",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def policy(name: str, cpu: float = 1, memory: float = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "loadwise.io/v1alpha1",
        "kind": "SchedulingPolicy",
        "metadata": {"name": name},
        "spec": {"weights": {"cpu": cpu, "memory": memory}, **spec},
    }


# --- pod groups (docs/gangs.md) --------------------------------------------------------------
COSCHEDULING_CRD = Path(__file__).with_name("coscheduling-crd.yaml")


def pod_group(name: str, namespace: str, min_count: int, **spec: Any) -> dict[str, Any]:
    """Kubernetes' own PodGroup (scheduling.k8s.io/v1beta1) with a gang policy."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
    }


def coscheduling_group(name: str, namespace: str, min_member: int, **spec: Any) -> dict[str, Any]:
    """scheduler-plugins' coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1)."""
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, **spec},
    }


def coscheduling_crd() -> dict[str, Any]:
    """The coscheduling CRD as scheduler-plugins publishes it (the file says which release)."""
    crd: dict[str, Any] = yaml.safe_load(COSCHEDULING_CRD.read_text())
    return crd


def in_group(pod: dict[str, Any], group: str, coscheduling: bool = False) -> dict[str, Any]:
    """`pod` made a member of `group`: by its spec (Kubernetes' API) or by label."""
    if coscheduling:
        pod["metadata"].setdefault("labels", {})["scheduling.x-k8s.io/pod-group"] = group
    else:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod
