"""The metrics caches by source name, read as each policy asks: its source, and its
aggregation over a window (spec.metrics), or the latest figures; for a pod in one of the
policy's priority bands, those figures as its band is judged by them (band_samples.py); for a
pod group's member under a policy judging by the latest sample, each node's peak over the last
GROUP_PEAK seconds: a gang runs for minutes at the pace of its slowest member, and a node whose
background swings looks cool by a sample taken in a trough (bench/gang: the heat left once no
member was placed on a hot node); each past sample as if the node had had its pods of now
(departures.py)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from ..framework.context import Basis
from ..framework.scoring import pod_estimate
from ..framework.types import PodInfo
from ..framework.view import ClusterView
from ..policies.policy import Policy
from ..policies.priority_bands import band_of
from ..usage.cache import MetricsCache, NodeSample
from ..usage.learned import LearnedUsage, WindowedEstimates
from .band_samples import BandSamples
from .departures import Departures, peaks

NO_SAMPLES: Mapping[str, NodeSample] = MappingProxyType({})
# (history and departures versions, the latest samples, policy and learned use), the peaks
PeakMemo = tuple[tuple[int, int], tuple[object, ...], dict[str, NodeSample]]
GROUP_PEAK = 120.0  # seconds over which a pod group's member judges a node by its peak


class UsageSources:
    def __init__(
        self, caches: Mapping[str, MetricsCache], state: ClusterView | None = None
    ) -> None:
        """`state`: the placed pods a band's use is summed from (None: bands are judged by
        their nodes' whole use)."""
        self.caches = dict(caches)  # metrics source name -> its cache; policies pick one
        self.state = state
        self.departures = Departures()  # pods that left their nodes lately (the watch tells it)
        # (source, policy) -> (what they were computed from, the peaks): one mapping until
        # that changes (the score index keys on it)
        self._peak_memo: dict[tuple[str, str], PeakMemo] = {}
        self._bands = BandSamples()
        self._policies: list[Policy] = []
        self._peaks = False  # a pod group's member asked for peaks: history is kept for them

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

    def basis(
        self,
        policy: Policy,
        now: float,
        rng: random.Random,
        priority: int | None = None,
        group: bool = False,
    ) -> Basis:
        """What a decision for a pod of `policy` (and of `priority`: its band's view; `group`:
        a pod group's member) is judged against at `now`."""
        samples, learned = self.samples_for(policy), self.learned_for(policy)
        cache = self.cache_for(policy)
        if group and cache is not None and policy.spec.metrics.aggregation == "latest":
            if not self._peaks:  # the first member: from now on history is kept for peaks
                self._peaks = True
                self.keep_history(self._policies)
            samples = self._peak_samples(policy, cache, samples, learned)
        band = band_of(policy.spec.priority_bands, priority) if priority is not None else None
        if band is None:
            return Basis(policy, samples, now, rng, learned)
        state = self.state
        if cache is not None and state is not None:
            samples = self._bands.judged(band, samples, cache, state.pods, state.nodes)
        return Basis(policy, samples, now, rng, learned, band)

    def _peak_samples(
        self,
        policy: Policy,
        cache: MetricsCache,
        latest: Mapping[str, NodeSample],
        learned: LearnedUsage | WindowedEstimates | None,
    ) -> Mapping[str, NodeSample]:
        """Each node's peak over GROUP_PEAK seconds, with the pods it has now."""
        if self.state is None:
            return cache.history.aggregated("max", GROUP_PEAK, latest)
        key = (policy.spec.metrics.source, policy.name)
        versions = (cache.history.version, self.departures.version)
        objects = (latest, policy, learned)
        memo = self._peak_memo.get(key)
        if memo is not None and memo[0] == versions and _same(memo[1], objects):
            return memo[2]
        spec = policy.spec
        factors = (spec.placement_estimate, spec.memory_estimate)
        use = learned if spec.learned_estimate else None

        def estimate(pod: PodInfo) -> tuple[float, float]:
            return pod_estimate(pod, factors, use)

        out = peaks(cache.history.since, latest, GROUP_PEAK, self.state, self.departures, estimate)
        self._peak_memo[key] = (versions, objects, out)
        return out

    def keep_history(self, policies: Iterable[Policy]) -> None:
        """Each source keeps the history its policies' longest window needs (none: none), and
        GROUP_PEAK seconds of node samples once a pod group's member asked for peaks."""
        policies = self._policies = list(policies)
        for name, cache in self.caches.items():
            cache.history.keep = cache.learned.keep = max(
                (
                    float(p.spec.metrics.window_seconds)
                    for p in policies
                    if p.spec.metrics.source == name and p.spec.metrics.aggregation != "latest"
                ),
                default=0.0,
            )
            if self._peaks:
                cache.history.keep = max(cache.history.keep, GROUP_PEAK)


def _same(these: tuple[object, ...], those: tuple[object, ...]) -> bool:
    return all(a is b for a, b in zip(these, those, strict=True))
