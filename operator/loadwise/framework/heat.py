"""When a node is hot, and when a sample counts: the one rule placement, rebalancing, the
policies' status and `explain` all apply.

A node's load on a resource is a share of its allocatable (1.0: all of it): CPU, memory, and
each extra dimension the policy declares, in the policy's order (a node its dimension's query
did not return counts 0 there). The node is hot on a resource whose share is above the policy's
hot threshold for it, and hot when it is hot on any. What a caller adds to the measured shares
(the scorer: estimates of pods placed since the sample and of the incoming pod) is its own; the
rule is the same. A sample counts while it is at most `metrics.maxAgeSeconds` old.

Rebalancing relieves only what it can attribute to pods: their CPU and memory are measured one
by one (`RELIEVABLE`); the extra dimensions are node figures only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..policies.policy import Policy
from ..usage.cache import NodeSample

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


def headrooms(
    policy: Policy, cpu: float, memory: float, dims: Sequence[float]
) -> list[tuple[str, float, float]]:
    """(resource, hot threshold minus load, weight in the score) for CPU, memory and the
    extra dimensions given (`dims` in the policy's order; a dimension without a figure, as in
    a score by requests, is left out). Negative: hot on it."""
    spec = policy.spec
    limits, weights = spec.hot_thresholds, spec.weights
    rooms = [
        ("cpu", limits.cpu / 100 - cpu, weights.cpu),
        ("memory", limits.memory / 100 - memory, weights.memory),
    ]
    rooms.extend(
        (d.name, d.hot_threshold / 100 - value, d.weight)
        for d, value in zip(spec.dimensions, dims, strict=False)
    )
    return rooms


def over(
    policy: Policy, cpu: float, memory: float, dims: Sequence[float], margin: float = 0.0
) -> dict[str, float]:
    """The resources whose load is above their hot threshold less `margin`, and by how much
    (a share of allocatable); empty when none is."""
    return {
        r: margin - room for r, room, _ in headrooms(policy, cpu, memory, dims) if room < margin
    }


def sample_over(policy: Policy, sample: NodeSample) -> dict[str, float]:
    """What the measured figures alone are over (no estimates: what a watcher of the node sees)."""
    return over(policy, sample.cpu, sample.memory, dimensions_of(policy, sample))


def hot_nodes(
    policy: Policy, samples: Mapping[str, NodeSample], nodes: Iterable[str], now: float
) -> dict[str, dict[str, float]]:
    """The nodes whose fresh sample is over a hot threshold, with what is over."""
    hot = {}
    for name in nodes:
        sample = samples.get(name)
        if sample is not None and is_fresh(sample, policy, now):
            excess = sample_over(policy, sample)
            if excess:
                hot[name] = excess
    return hot


def thresholds_text(policy: Policy) -> str:
    """The hot thresholds as people read them: `cpu 80%, memory 90%, gpu 85%`."""
    spec = policy.spec
    parts = [f"cpu {spec.hot_thresholds.cpu:g}%", f"memory {spec.hot_thresholds.memory:g}%"]
    parts.extend(f"{d.name} {d.hot_threshold:g}%" for d in spec.dimensions)
    return ", ".join(parts)
