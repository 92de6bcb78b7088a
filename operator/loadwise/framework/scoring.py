"""Load scoring: how full each node is, by measured load and by requests, under the policy.

Utilisation of a node = its last fresh metrics sample, plus an estimate for the pods placed since
that sample and for the incoming pod (metrics lag bindings: without it a burst herds onto
whichever node looked idlest); a pod placed within the sample's rate window counts for the part
the window does not show yet. A pod's estimate is what running pods of its workload use (learned
from the metrics source), else placementEstimate x its CPU and memoryEstimate x its memory
requests, counted with kube-scheduler's non-zero defaults so a pod without requests is never
free. A node with no fresh sample is scored by requested/allocatable instead, so a dead metrics
source degrades to request-based balancing rather than stopping scheduling. The policy's
load_share blends the two; its strategy decides whether emptier (Spread) or fuller up to a
target (Pack) nodes score higher.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from ..policies.policy import Policy
from ..resources import CPU, MEMORY
from ..usage.cache import NodeSample
from .heat import dimensions_of, headrooms, is_fresh
from .types import NodeInfo, PodInfo
from .view import ClusterView

if TYPE_CHECKING:  # the context carries the basis; it imports this module's types
    from .context import Basis

MAX_SCORE = 100
APPROACH_BAND = 0.10  # utilisation fraction below a hot threshold where the load score fades


class UsageProfiles(Protocol):
    """Learned usage (usage/learned.py): per workload (cpu millicores, memory bytes), and per
    namespace the use per unit requested of its pods (cpu, memory)."""

    def estimate(self, workload: str) -> tuple[int, int] | None: ...

    def ratio(self, namespace: str) -> tuple[float, float] | None: ...


@dataclass(frozen=True, slots=True)
class NodeScore:
    node: str
    score: float  # raw, 0..100
    cpu: float  # utilisation fraction used for the score (may exceed 1 when over-used)
    memory: float
    source: Literal["metrics", "requests"]
    sample_age: float | None  # seconds, when source == "metrics"
    hot: bool = False  # measured usage (with the estimate) above the policy's thresholds
    extra: tuple[float, ...] = ()  # the policy's extra dimensions, in its order (metrics only)


def _weighted(policy: Policy, cpu: float, mem: float, extra: Sequence[float] = ()) -> float:
    spec = policy.spec
    weights = spec.weights
    total = weights.cpu * cpu + weights.memory * mem
    norm = weights.cpu + weights.memory
    for dimension, value in zip(spec.dimensions, extra, strict=False):
        total += dimension.weight * value
        norm += dimension.weight
    return total / norm


def pod_estimate(
    pod: PodInfo, factors: tuple[float, float], learned: UsageProfiles | None
) -> tuple[float, float]:
    """The usage expected of a pod not yet in a sample: its workload's learned usage, else its
    (non-zero) CPU and memory requests times its namespace's learned ratio of use to requests,
    else times the policy's factors."""
    cpu, memory = pod.requests.nonzero
    if learned is not None:
        if (workload := pod.workload) is not None:
            known = learned.estimate(workload)
            if known is not None:
                return known
        ratio = learned.ratio(pod.namespace)
        if ratio is not None:
            return ratio[0] * cpu, ratio[1] * memory
    return factors[0] * cpu, factors[1] * memory


def unmeasured(
    node_name: str,
    sample: NodeSample,
    state: ClusterView,
    factors: tuple[float, float],
    learned: UsageProfiles | None,
    skip: Collection[str] = (),
) -> tuple[float, float]:
    """The estimated use (cpu millicores, memory bytes) of the pods placed on the node that its
    sample does not show yet, but those in `skip` (UIDs)."""
    cpu = memory = 0.0
    coverage, window = sample.coverage, sample.timestamp - sample.coverage
    for placed in state.placed_since(node_name, coverage):
        if placed.uid in skip:
            continue
        cpu_est, mem_est = pod_estimate(placed, factors, learned)
        # A rate window shows a pod's use gradually: placed halfway through the window, it
        # is about half in the sample already. Counting it fully as well would count that
        # half twice and push a burst off the nodes it just started filling. (A pod slow to
        # start shows later than this assumes: the metrics lag setting should cover it.)
        unseen = 1.0 - (sample.shows(placed.placed_at) if window > 0 else 0.0)
        cpu += unseen * cpu_est
        memory += unseen * mem_est
    return cpu, memory


def score_node(
    pod: PodInfo,
    node: NodeInfo,
    state: ClusterView,
    basis: Basis,
) -> NodeScore:
    """score = load_share x load score + rest x requests score, each 0..100 (see module doc).

    Measured load = the node's fresh sample + the estimates of the pods placed since that sample
    and of the incoming pod. Without a fresh sample (or with load_share 0) the node is scored by
    requests alone."""
    policy, samples, now, learned = basis.policy, basis.samples, basis.now, basis.learned
    spec = policy.spec
    pack = spec.strategy == "Pack"
    alloc_cpu = node.allocatable.get(CPU, 0)
    alloc_mem = node.allocatable.get(MEMORY, 0)
    scored_cpu, scored_mem = state.scored_requests(node.name)
    req_cpu = _ratio(scored_cpu + pod.requests.nonzero[0], alloc_cpu)
    req_mem = _ratio(scored_mem + pod.requests.nonzero[1], alloc_mem)
    by_requests = _requests_score(policy, req_cpu, req_mem, pack)
    sample = samples.get(node.name)
    if sample is None or not is_fresh(sample, policy, now) or not spec.load_share:
        return NodeScore(node.name, by_requests, req_cpu, req_mem, "requests", None)
    factors = (spec.placement_estimate, spec.memory_estimate)
    extra_cpu = extra_mem = 0.0
    if factors != (0, 0):
        use = learned if spec.learned_estimate else None
        extra_cpu, extra_mem = pod_estimate(pod, factors, use)
        unseen_cpu, unseen_mem = unmeasured(node.name, sample, state, factors, use)
        extra_cpu += unseen_cpu
        extra_mem += unseen_mem
    cpu = sample.cpu + _ratio(extra_cpu, alloc_cpu)
    mem = sample.memory + _ratio(extra_mem, alloc_mem)
    dims = dimensions_of(policy, sample)
    rooms = headrooms(policy, cpu, mem, dims, node, basis.band)
    hot = any(room < 0 for _, room, _ in rooms)
    if pack:
        by_load = _pack_score(policy, cpu, mem, dims)
    else:
        # Within APPROACH_BAND of a hot threshold the load score fades to 0: a node is filled
        # up to its threshold only when nothing cooler fits, since estimates near the edge tip
        # it over. Only for the dimensions the score weights: one weighted 0 is no part of the
        # load score, and its threshold is kept by the hot pass-over alone.
        fade = min((room for _, room, weight in rooms if weight > 0), default=1.0)
        by_load = (
            MAX_SCORE
            * _clamp(1.0 - _weighted(policy, cpu, mem, dims))
            * _clamp(fade / APPROACH_BAND)
        )
    share = spec.load_share / 100
    score = share * by_load + (1 - share) * by_requests
    age = max(0.0, now - sample.timestamp)
    return NodeScore(node.name, score, cpu, mem, "metrics", age, hot, dims)


def _requests_score(policy: Policy, cpu: float, mem: float, pack: bool) -> float:
    """kube-scheduler's LeastAllocated (Spread) or MostAllocated (Pack) on requests."""
    used = _weighted(policy, cpu, mem)
    return MAX_SCORE * _clamp(used if pack else 1.0 - used)


def _pack_score(policy: Policy, cpu: float, mem: float, dims: Sequence[float]) -> float:
    """Pack: a node under its target scores 50..100, fuller higher (TargetLoadPacking's
    shape, for CPU and memory); over the target 0..50, emptier higher, so a pod spills over
    to the least loaded node only when no node stays under the target."""
    target = policy.spec.target_utilization
    t_cpu, t_mem = target.cpu / 100, target.memory / 100
    if cpu <= t_cpu and mem <= t_mem:
        fullness = _weighted(policy, cpu / t_cpu, mem / t_mem)
        return MAX_SCORE / 2 * (1 + _clamp(fullness))
    return MAX_SCORE / 2 * _clamp(1.0 - _weighted(policy, cpu, mem, dims))


def weighted_load(policy: Policy, score: NodeScore) -> float:
    """The node's load (measured + estimate, or requests) under the policy's weights."""
    return _weighted(policy, score.cpu, score.memory, score.extra)


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def normalize(scores: list[float]) -> list[float]:
    """DefaultNormalizeScore: scale so the best node scores 100."""
    top = max(scores, default=0.0)
    if top <= 0:
        return [0.0 for _ in scores]
    return [s * MAX_SCORE / top for s in scores]


def _ratio(used: float, total: int) -> float:
    return used / total if total > 0 else 1.0


# Weights of the combined score. Preference plugins use kube-scheduler's default weights; the
# load score outweighs any single one of them, since placing by real load is the point.
LOAD_WEIGHT = 4
TAINT_WEIGHT = 3
NODE_AFFINITY_WEIGHT = 2
SPREAD_WEIGHT = 2
INTER_POD_AFFINITY_WEIGHT = 2


def reverse_normalize(raw: list[float]) -> list[float]:
    """Lower raw is better: the lowest gets 100, the highest 0 (all equal: all 100)."""
    low, high = min(raw, default=0.0), max(raw, default=0.0)
    if high == low:
        return [float(MAX_SCORE) for _ in raw]
    return [MAX_SCORE * (high - r) / (high - low) for r in raw]


def combine(components: Sequence[tuple[float, Sequence[float]]]) -> list[float]:
    """Weighted mean of normalised plugin scores, per node."""
    total = sum(weight for weight, _ in components)
    size = len(components[0][1])
    return [sum(w * scores[i] for w, scores in components) / total for i in range(size)]
