"""CycleContext: one pod's scheduling cycle, its inputs in one object; PreFilter data is
computed once, on first use."""

from __future__ import annotations

import random
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING

from . import podaffinity, spread

if TYPE_CHECKING:
    from ..metrics.cache import NodeSample
    from ..policy import Policy
    from .scoring import UsageProfiles
    from .types import PodInfo
    from .view import ClusterView

_NO_SAMPLES: Mapping[str, NodeSample] = {}


class CycleContext:
    def __init__(
        self,
        pod: PodInfo,
        state: ClusterView,
        policy: Policy | None = None,
        samples: Mapping[str, NodeSample] = _NO_SAMPLES,
        now: float = 0.0,
        rng: random.Random | None = None,
        learned: UsageProfiles | None = None,
        nominated: spread.NominatedHere | None = None,
    ) -> None:
        self.pod = pod
        self.state = state
        self._policy = policy
        self.samples = samples  # the policy's metrics source's, read without I/O
        self.now = now  # wall clock: sample ages and placement times are wall-clock times
        self.rng = rng or random.Random(0)  # tie-breaks
        self.learned = learned  # the policy's source's usage per workload (estimates)
        # a node with the pods nominated to it placed there in `state` for this context
        self.nominated = nominated

    @property
    def policy(self) -> Policy:
        if self._policy is None:
            raise RuntimeError("this context was made for filtering only: no policy")
        return self._policy

    @property
    def policy_if_any(self) -> Policy | None:
        """None for a context made for filtering only."""
        return self._policy

    @cached_property
    def affinity(self) -> podaffinity.AffinityCounts | None:
        """None when neither the pod nor any placed pod has required (anti-)affinity."""
        pod = self.pod
        if not (pod.affinity_terms or pod.anti_affinity_terms or self.state.anti_affinity_pods):
            return None
        return podaffinity.prefilter(pod, self.state)

    @cached_property
    def affinity_preference(self) -> podaffinity.TopologyScores | None:
        """InterPodAffinity's scores per topology value; None when no term applies."""
        pod = self.pod
        if not (
            pod.preferred_affinity_terms
            or pod.preferred_anti_affinity_terms
            or self.state.weighted_affinity_pods
        ):
            return None
        return podaffinity.preference_scores(pod, self.state)

    @cached_property
    def hard_spread(self) -> spread.SpreadCounts | None:
        hard = [c for c in self.pod.spread if c.hard]
        if not hard:
            return None
        counts = spread.count(self.pod, self.state, hard)
        if self.nominated is not None:
            counts = spread.with_nominated(counts, self.pod, self.nominated)
        return counts

    @cached_property
    def soft_spread(self) -> spread.SoftSpread | None:
        """ScheduleAnyway constraints: the pod's own, or kube-scheduler's system defaults
        (not under a Pack policy: spreading replicas would undo the packing, and kube-scheduler
        profiles that pack, with MostAllocated, turn the system defaults off too)."""
        soft = spread.soft_constraints(self.pod, self.state)
        packing = self._policy is not None and self._policy.spec.strategy == "Pack"
        return None if soft is not None and soft.system_default and packing else soft
