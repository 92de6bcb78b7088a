"""CycleContext: one pod's scheduling cycle, its inputs in one object, and the plugins' own
PreFilter data, each computed once, on first use, by the plugin that reads it."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from ..policies.policy import Policy
    from ..usage.cache import NodeSample
    from . import spread
    from .scoring import UsageProfiles
    from .types import PodInfo
    from .view import ClusterView

_NO_SAMPLES: Mapping[str, NodeSample] = {}
T = TypeVar("T")


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
        self._data: dict[Callable[[CycleContext], Any], Any] = {}

    @property
    def policy(self) -> Policy:
        if self._policy is None:
            raise RuntimeError("this context was made for filtering only: no policy")
        return self._policy

    @property
    def policy_if_any(self) -> Policy | None:
        """None for a context made for filtering only."""
        return self._policy

    def prefiltered(self, compute: Callable[[CycleContext], T]) -> T:
        """kube-scheduler's CycleState: what a plugin's PreFilter computes once per cycle
        (its `compute`, also the key), kept for its Filter and Score calls on every node."""
        data = self._data
        if compute in data:
            return cast(T, data[compute])
        value = data[compute] = compute(self)
        return value
