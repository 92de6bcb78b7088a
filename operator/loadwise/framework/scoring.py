"""Load scoring: lower weighted utilisation, higher score; then kube-scheduler's normalisation.

Utilisation of a node = its last fresh metrics sample, plus an estimate for the pods placed since
that sample (their requests over allocatable: metrics lag bindings, and without this a burst herds
onto whichever node looked idlest), plus the incoming pod's own requests. A node with no fresh
sample is scored by requested/allocatable instead, so a dead metrics source degrades to
request-based balancing rather than stopping scheduling. The policy's load_share blends the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..metrics.cache import NodeSample
from ..policy import Policy
from ..resources import CPU, MEMORY
from .types import NodeInfo, PodInfo
from .view import ClusterView

MAX_SCORE = 100
APPROACH_BAND = 0.10  # utilisation fraction below a hot threshold where the load score fades


@dataclass(frozen=True, slots=True)
class NodeScore:
    node: str
    score: float  # raw, 0..100
    cpu: float  # utilisation fraction used for the score (may exceed 1 when over-used)
    memory: float
    source: Literal["metrics", "requests"]
    sample_age: float | None  # seconds, when source == "metrics"
    hot: bool = False  # measured usage (with the estimate) above the policy's thresholds


def _weighted(policy: Policy, cpu: float, mem: float) -> float:
    weights = policy.spec.weights
    return (weights.cpu * cpu + weights.memory * mem) / (weights.cpu + weights.memory)


def score_node(
    pod: PodInfo,
    node: NodeInfo,
    state: ClusterView,
    policy: Policy,
    samples: Mapping[str, NodeSample],
    now: float,
) -> NodeScore:
    """score = load_share x (100 - weighted measured load) + rest x (100 - weighted requests).

    Measured load = the node's fresh sample + placement_estimate x (requests of the pods placed
    since that sample + the incoming pod's). Without a fresh sample (or with load_share 0) the
    node is scored by requests alone."""
    spec = policy.spec
    alloc_cpu = node.allocatable.get(CPU, 0)
    alloc_mem = node.allocatable.get(MEMORY, 0)
    requested = state.requested(node.name)
    req_cpu = _ratio(requested.get(CPU, 0) + pod.requests.get(CPU), alloc_cpu)
    req_mem = _ratio(requested.get(MEMORY, 0) + pod.requests.get(MEMORY), alloc_mem)
    by_requests = MAX_SCORE * _clamp(1.0 - _weighted(policy, req_cpu, req_mem))
    sample = samples.get(node.name)
    if (
        sample is None
        or now - sample.timestamp > spec.metrics.max_age_seconds
        or not spec.load_share
    ):
        return NodeScore(node.name, by_requests, req_cpu, req_mem, "requests", None)
    factor = spec.placement_estimate
    extra_cpu = extra_mem = 0
    if factor:
        extra_cpu, extra_mem = pod.requests.get(CPU), pod.requests.get(MEMORY)
        for placed in state.placed_since(node.name, sample.coverage):
            extra_cpu += placed.requests.get(CPU)
            extra_mem += placed.requests.get(MEMORY)
    cpu = sample.cpu + factor * _ratio(extra_cpu, alloc_cpu)
    mem = sample.memory + factor * _ratio(extra_mem, alloc_mem)
    cpu_limit, mem_limit = spec.hot_thresholds.cpu / 100, spec.hot_thresholds.memory / 100
    # Within APPROACH_BAND of a hot threshold the load score fades to 0: a node is filled up to
    # its threshold only when nothing cooler fits, since estimates near the edge tip it over.
    headroom = min(cpu_limit - cpu, mem_limit - mem) / APPROACH_BAND
    by_load = MAX_SCORE * _clamp(1.0 - _weighted(policy, cpu, mem)) * _clamp(headroom)
    share = spec.load_share / 100
    hot = cpu > cpu_limit or mem > mem_limit
    score = share * by_load + (1 - share) * by_requests
    return NodeScore(node.name, score, cpu, mem, "metrics", max(0.0, now - sample.timestamp), hot)


def weighted_load(policy: Policy, score: NodeScore) -> float:
    """The node's load (measured + estimate, or requests) under the policy's weights."""
    return _weighted(policy, score.cpu, score.memory)


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def normalize(scores: list[float]) -> list[float]:
    """DefaultNormalizeScore: scale so the best node scores 100."""
    top = max(scores, default=0.0)
    if top <= 0:
        return [0.0 for _ in scores]
    return [s * MAX_SCORE / top for s in scores]


def _ratio(used: int, total: int) -> float:
    return used / total if total > 0 else 1.0


# Weights of the combined score. Preference plugins use kube-scheduler's default weights; the
# load score outweighs any single one of them, since placing by real load is the point.
LOAD_WEIGHT = 4
TAINT_WEIGHT = 3
NODE_AFFINITY_WEIGHT = 2
SPREAD_WEIGHT = 2


def reverse_normalize(raw: list[float]) -> list[float]:
    """Lower raw is better: the lowest gets 100, the highest 0 (all equal: all 100)."""
    low, high = min(raw, default=0.0), max(raw, default=0.0)
    if high == low:
        return [float(MAX_SCORE) for _ in raw]
    return [MAX_SCORE * (high - r) / (high - low) for r in raw]


def combine(components: list[tuple[int, list[float]]]) -> list[float]:
    """Weighted mean of normalised plugin scores, per node."""
    total = sum(weight for weight, _ in components)
    size = len(components[0][1])
    return [sum(w * scores[i] for w, scores in components) / total for i in range(size)]
