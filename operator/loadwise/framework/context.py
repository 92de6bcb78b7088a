"""CycleContext: one pod's scheduling cycle; PreFilter data is computed once, on first use."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from . import podaffinity, spread

if TYPE_CHECKING:
    from .types import PodInfo
    from .view import ClusterView


class CycleContext:
    def __init__(self, pod: PodInfo, state: ClusterView) -> None:
        self.pod = pod
        self.state = state

    @cached_property
    def affinity(self) -> podaffinity.AffinityCounts | None:
        """None when neither the pod nor any placed pod has required (anti-)affinity."""
        pod = self.pod
        if not (pod.affinity_terms or pod.anti_affinity_terms or self.state.anti_affinity_pods):
            return None
        return podaffinity.prefilter(pod, self.state)

    @cached_property
    def hard_spread(self) -> spread.SpreadCounts | None:
        hard = [c for c in self.pod.spread if c.hard]
        return spread.count(self.pod, self.state, hard) if hard else None

    @cached_property
    def soft_spread(self) -> spread.SpreadCounts | None:
        soft = [c for c in self.pod.spread if not c.hard]
        return spread.count(self.pod, self.state, soft) if soft else None
