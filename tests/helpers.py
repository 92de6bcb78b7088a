"""Builders shared by the tests."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

from aiohttp import web

from loadwise.framework.podaffinity import weighted_terms
from loadwise.framework.types import PodInfo, parse_pod
from loadwise.scheduler.state import ClusterState
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


def owned_by_replicaset(raw: dict[str, Any], name: str = "rs") -> dict[str, Any]:
    """Give a raw pod a ReplicaSet as its controller (system default spreading, learning)."""
    raw["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": name,
            "uid": name,
            "controller": True,
        }
    ]
    return raw


def recount_anti_terms(state: ClusterState) -> dict[Any, Counter[str]]:
    """Placed pods' anti-affinity terms, each with its pods per value of its key, from scratch."""
    return {
        term: counts
        for (term, _), counts in _recount(
            state, lambda p: ((t, 1) for t in p.anti_affinity_terms)
        ).items()
    }


def recount_weighted_terms(state: ClusterState) -> list[tuple[Any, int, Counter[str]]]:
    """Placed pods' scoring affinity terms, each with its weight and its pods per value of its
    key, from scratch."""
    return [(t, w, counts) for (t, w), counts in _recount(state, weighted_terms).items()]


def _recount(
    state: ClusterState, terms_of: Callable[[Any], Iterable[tuple[Any, int]]]
) -> dict[tuple[Any, int], Counter[str]]:
    out: dict[tuple[Any, int], Counter[str]] = {}
    for pod in state.pods.values():
        node = state.nodes.get(pod.node_name)
        for term, weight in terms_of(pod):
            per_value = out.setdefault((term, weight), Counter())
            if node is not None and term.topology_key in node.labels:
                per_value[node.labels[term.topology_key]] += 1
    return out


def load_bench(name: str) -> ModuleType:
    """A benchmark's module (loadwise_dev/benches/NAME.py)."""
    return importlib.import_module(f"loadwise_dev.benches.{name}")


@contextlib.asynccontextmanager
async def prometheus_answering(
    query: Callable[[web.Request], Awaitable[web.Response]],
    gets: Mapping[str, Callable[[web.Request], Awaitable[web.Response]]] | None = None,
) -> AsyncIterator[str]:
    """A stand-in Prometheus on loopback whose /api/v1/query is `query` and whose `gets` answer
    GETs of their paths (e.g. /api/v1/targets); yields its URL."""
    app = web.Application()
    app.router.add_post("/api/v1/query", query)
    for path, handler in (gets or {}).items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
