"""The metrics caches by source name, read as each policy asks: its source, and its
aggregation over a window (spec.metrics), or the latest figures."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from ..framework.context import Basis
from ..policies.policy import Policy
from ..usage.cache import MetricsCache, NodeSample
from ..usage.learned import LearnedUsage, WindowedEstimates

NO_SAMPLES: Mapping[str, NodeSample] = MappingProxyType({})


class UsageSources:
    def __init__(self, caches: Mapping[str, MetricsCache]) -> None:
        self.caches = dict(caches)  # metrics source name -> its cache; policies pick one

    def cache_for(self, policy: Policy) -> MetricsCache | None:
        return self.caches.get(policy.spec.metrics.source)

    def samples_for(self, policy: Policy) -> Mapping[str, NodeSample]:
        """The node samples the policy judges load by: its source's latest, or an aggregate
        over a window of them (spec.metrics.aggregation)."""
        metrics = policy.spec.metrics
        cache = self.caches.get(metrics.source)
        if cache is None:
            return NO_SAMPLES  # one object: the score index keys its heaps on it
        if metrics.aggregation == "latest":
            return cache.samples
        return cache.history.aggregated(metrics.aggregation, metrics.window_seconds, cache.samples)

    def learned_for(self, policy: Policy) -> LearnedUsage | WindowedEstimates | None:
        """The usage learned per workload by the policy's source. It changes only with a
        refresh, which also replaces the source's samples mapping (the score index's key)."""
        metrics = policy.spec.metrics
        cache = self.caches.get(metrics.source)
        if cache is None:
            return None
        if metrics.aggregation == "latest":
            return cache.learned
        return cache.learned.over(metrics.aggregation, metrics.window_seconds)

    def basis(self, policy: Policy, now: float, rng: random.Random) -> Basis:
        """What a decision for a pod of `policy` is judged against at `now`."""
        return Basis(policy, self.samples_for(policy), now, rng, self.learned_for(policy))

    def keep_history(self, policies: Iterable[Policy]) -> None:
        """Each source keeps the history its policies' longest window needs (none: none)."""
        policies = list(policies)
        for name, cache in self.caches.items():
            cache.history.keep = cache.learned.keep = max(
                (
                    float(p.spec.metrics.window_seconds)
                    for p in policies
                    if p.spec.metrics.source == name and p.spec.metrics.aggregation != "latest"
                ),
                default=0.0,
            )
