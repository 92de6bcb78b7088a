"""When a node is hot, and when a sample counts: the one rule placement, rebalancing, the
policies' status and `explain` all apply.

A node's load on a resource is a share of its allocatable (1.0: all of it): CPU, memory, and
each extra dimension the policy declares, in the policy's order (a node its dimension's query
did not return counts 0 there). The node is hot on a resource whose share is above the policy's
hot threshold for it, and hot when it is hot on any. The thresholds are the policy's, unless the
node is in one of its pools (`spec.pools`: the first whose node selector matches) or carries its
own (the annotation `loadwise.io/hot-thresholds`, node_thresholds.py), which override them per
resource, the node's own first. A pod in one of the policy's priority bands is judged by the
band's thresholds where it gives them, and with `usage: BandAndAbove` by what the pods of its
priority or higher use on the node (`band_load`): placement, rebalancing (a pod moves only off a
node hot for its band) and `explain` alike. What a caller adds to the measured shares
(the scorer: estimates of pods placed since the sample and of the incoming pod) is its own; the
rule is the same. A sample counts while it is at most `metrics.maxAgeSeconds` old.

Rebalancing relieves only what it can attribute to pods: their CPU and memory are measured one
by one (`RELIEVABLE`); the extra dimensions are node figures only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..policies.policy import Policy
from ..policies.priority_bands import PriorityBand, band_of
from ..usage.cache import NodeSample

if TYPE_CHECKING:
    from .types import NodeInfo

RELIEVABLE = ("cpu", "memory")


def is_fresh(sample: NodeSample | None, policy: Policy, now: float) -> bool:
    """The sample counts: it exists and is at most the policy's maxAgeSeconds old."""
    return sample is not None and now - sample.timestamp <= policy.spec.metrics.max_age_seconds


def fresh_samples(
    samples: Mapping[str, NodeSample], nodes: Iterable[str], policy: Policy, now: float
) -> dict[str, NodeSample]:
    """The samples of `nodes` that count under `policy` now (the policies' status, and the
    dashboard's figures per source)."""
    return {n: s for n in nodes if is_fresh(s := samples.get(n), policy, now) and s is not None}


def expires_at(sample: NodeSample, policy: Policy) -> float:
    """The moment the sample stops counting."""
    return sample.timestamp + policy.spec.metrics.max_age_seconds


def dimensions_of(policy: Policy, sample: NodeSample) -> tuple[float, ...]:
    """The sample's shares of the policy's extra dimensions, in the policy's order."""
    return tuple(sample.extra.get(d.name, 0.0) for d in policy.spec.dimensions)


def thresholds_for(
    policy: Policy, node: NodeInfo | None, band: PriorityBand | None = None
) -> tuple[float, float, list[float], str]:
    """The node's hot thresholds under `policy` for a pod of `band` (None: no band), percent:
    (cpu, memory, each dimension's in the policy's order, where they come from: "" for the
    policy's own, else the band, the pool or the node's annotation)."""
    spec = policy.spec
    cpu, memory = spec.hot_thresholds.cpu, spec.hot_thresholds.memory
    dims = [d.hot_threshold for d in spec.dimensions]
    names = [d.name for d in spec.dimensions]
    source = ""
    if node is not None and (spec.pools or node.hot_thresholds):
        cpu, memory, dims, source = _node_thresholds(policy, node, cpu, memory, dims)
    if band is not None:
        given = band.hot_thresholds
        if given.cpu is not None or given.memory is not None or given.dimensions:
            cpu = given.cpu if given.cpu is not None else cpu
            memory = given.memory if given.memory is not None else memory
            dims = [given.dimensions.get(n, t) for n, t in zip(names, dims, strict=True)]
            source = f"band {band.name}" + (f" over {source}" if source else "")
    return cpu, memory, dims, source


def _node_thresholds(
    policy: Policy, node: NodeInfo, cpu: float, memory: float, dims: list[float]
) -> tuple[float, float, list[float], str]:
    """The pool's and the node's own annotation's overrides of the policy's thresholds."""
    spec = policy.spec
    names = [d.name for d in spec.dimensions]
    source = ""
    pool = next((p for p in spec.pools if p.node_selector.matches(node.labels)), None)
    if pool is not None:
        given = pool.hot_thresholds
        cpu = given.cpu if given.cpu is not None else cpu
        memory = given.memory if given.memory is not None else memory
        dims = [given.dimensions.get(n, t) for n, t in zip(names, dims, strict=True)]
        source = f"pool {pool.name}"
    own = node.hot_thresholds
    if own:
        cpu, memory = own.get("cpu", cpu), own.get("memory", memory)
        dims = [own.get(n, t) for n, t in zip(names, dims, strict=True)]
        source = f"node {node.name}'s annotation" + (f" over {source}" if source else "")
    return cpu, memory, dims, source


def headrooms(
    policy: Policy,
    cpu: float,
    memory: float,
    dims: Sequence[float],
    node: NodeInfo | None = None,
    band: PriorityBand | None = None,
) -> list[tuple[str, float, float]]:
    """(resource, hot threshold minus load, weight in the score) for CPU, memory and the
    extra dimensions given (`dims` in the policy's order; a dimension without a figure, as in
    a score by requests, is left out), with `node`'s thresholds for `band`. Negative: hot."""
    spec = policy.spec
    weights = spec.weights
    cpu_limit, memory_limit, dim_limits, _ = thresholds_for(policy, node, band)
    rooms = [
        ("cpu", cpu_limit / 100 - cpu, weights.cpu),
        ("memory", memory_limit / 100 - memory, weights.memory),
    ]
    rooms.extend(
        (d.name, limit / 100 - value, d.weight)
        for d, limit, value in zip(spec.dimensions, dim_limits, dims, strict=False)
    )
    return rooms


def over(
    policy: Policy,
    cpu: float,
    memory: float,
    dims: Sequence[float],
    margin: float = 0.0,
    node: NodeInfo | None = None,
    band: PriorityBand | None = None,
) -> dict[str, float]:
    """The resources whose load is above their hot threshold (`node`'s, for `band`) less
    `margin`, and by how much (a share of allocatable); empty when none is."""
    rooms = headrooms(policy, cpu, memory, dims, node, band)
    return {r: margin - room for r, room, _ in rooms if room < margin}


def sample_over(
    policy: Policy, sample: NodeSample, node: NodeInfo | None = None
) -> dict[str, float]:
    """What the measured figures alone are over (no estimates: what a watcher of the node sees)."""
    return over(policy, sample.cpu, sample.memory, dimensions_of(policy, sample), node=node)


def hot_for(
    policy: Policy,
    sample: NodeSample,
    node: NodeInfo | None,
    band: PriorityBand | None,
    pods: Iterable[tuple[int, float, float]] | None,
) -> dict[str, float]:
    """What a node is over for a pod of `band`, by its measured figures (`pods`: its pods'
    (priority, cpu, memory) shares, for a band judged by its own use). Rebalancing moves a pod
    only off a node hot for the pod's band, the rule placement judged it by."""
    cpu, memory = band_load(band, (sample.cpu, sample.memory), pods)
    return over(policy, cpu, memory, dimensions_of(policy, sample), node=node, band=band)


def hot_nodes(
    policy: Policy, samples: Mapping[str, NodeSample], nodes: Mapping[str, NodeInfo], now: float
) -> dict[str, dict[str, float]]:
    """The nodes whose fresh sample is over a hot threshold (theirs), with what is over."""
    hot = {}
    for name, node in nodes.items():
        sample = samples.get(name)
        if sample is not None and is_fresh(sample, policy, now):
            excess = sample_over(policy, sample, node)
            if excess:
                hot[name] = excess
    return hot


def thresholds_text(
    policy: Policy, node: NodeInfo | None = None, band: PriorityBand | None = None
) -> str:
    """The hot thresholds as people read them: `cpu 80%, memory 90%, gpu 85%`, and where
    they come from when not the policy's own (`(pool gpu)`)."""
    cpu, memory, dims, source = thresholds_for(policy, node, band)
    parts = [f"cpu {cpu:g}%", f"memory {memory:g}%"]
    parts.extend(f"{d.name} {t:g}%" for d, t in zip(policy.spec.dimensions, dims, strict=True))
    return ", ".join(parts) + (f" ({source})" if source else "")


def band_load(
    band: PriorityBand | None,
    node_figures: tuple[float, float],
    pods: Iterable[tuple[int, float, float]] | None,
) -> tuple[float, float]:
    """The (cpu, memory) shares a pod of `band` is judged by on a node: the node's figures,
    or with `usage: BandAndAbove` the sum of the shares of its pods (priority, cpu, memory) of
    the band's priority or higher (None: per-pod usage unknown, the node's figures)."""
    if band is None or band.usage != "BandAndAbove" or pods is None:
        return node_figures
    cpu = memory = 0.0
    for priority, pod_cpu, pod_memory in pods:
        if priority >= band.min_priority:
            cpu += pod_cpu
            memory += pod_memory
    return cpu, memory


def thresholds_problems(
    policy: Policy, nodes: Mapping[str, NodeInfo], priorities: Iterable[int] = ()
) -> list[str]:
    """What the status says of the thresholds by pool, band and node: pools that select no
    node, bands no placed pod (`priorities`) is in, and nodes whose annotation is refused (they
    keep the policy's or their pool's)."""
    bands = policy.spec.priority_bands
    present = {b.name for p in set(priorities) if (b := band_of(bands, p)) is not None}
    problems = [
        f"priority band {band.name} has no placed pod" for band in bands if band.name not in present
    ]
    problems += [
        f"pool {pool.name} selects no node"
        for pool in policy.spec.pools
        if not any(pool.node_selector.matches(n.labels) for n in nodes.values())
    ]
    problems.extend(
        f"node {name}: {node.hot_thresholds_error} (ignored)"
        for name, node in sorted(nodes.items())
        if node.hot_thresholds_error
    )
    return problems
