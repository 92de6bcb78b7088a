"""Builders shared by the tests."""

from __future__ import annotations

import itertools
from typing import Any

from loadwise.framework.types import PodInfo, parse_pod
from loadwise.state import ClusterState
from loadwise_dev import manifests

_uids = itertools.count()


def pod_info(
    name: str = "p", cpu: str = "100m", memory: str = "128Mi", node: str = "", **kw: Any
) -> PodInfo:
    raw = manifests.pod(name, cpu=cpu, memory=memory, **kw)
    raw["metadata"]["uid"] = f"uid-{next(_uids)}"
    raw["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    raw["spec"]["nodeName"] = node
    return parse_pod(raw)


def state_with(*nodes: dict[str, Any]) -> ClusterState:
    state = ClusterState()
    for node in nodes:
        state.upsert_node(node)
    return state
