"""CycleContext: one pod's scheduling cycle, its inputs in one object, and the plugins' own
PreFilter data, each computed once, on first use, by the plugin that reads it."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from ..policies.policy import Policy
    from ..policies.priority_bands import PriorityBand
    from ..usage.cache import NodeSample
    from . import spread
    from .scoring import UsageProfiles
    from .types import PodInfo
    from .view import ClusterView

_NO_SAMPLES: Mapping[str, NodeSample] = {}
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Basis:
    """What the decisions of one moment are judged against: the pod's policy, its metrics
    source's samples and learned usage (read without I/O), the wall clock (sample ages and
    placement times are wall-clock times) and the tie-break generator; for a pod in one of the
    policy's priority bands, the band (its samples are then what the band is judged by). The
    scheduler, explain and rebalancing's trial placements each make one and hand it down
    whole."""

    policy: Policy
    samples: Mapping[str, NodeSample] = field(default_factory=dict)
    now: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    learned: UsageProfiles | None = None
    band: PriorityBand | None = None


class CycleContext:
    def __init__(
        self,
        pod: PodInfo,
        state: ClusterView,
        basis: Basis | None = None,
        nominated: spread.NominatedHere | None = None,
    ) -> None:
        """`basis` None: a context for filtering only (no policy, no samples)."""
        self.pod = pod
        self.state = state
        self._basis = basis
        # Copied out of the basis: the plugins read them on every node.
        self._policy = basis.policy if basis is not None else None
        self.samples = basis.samples if basis is not None else _NO_SAMPLES
        self.now = basis.now if basis is not None else 0.0
        self.rng = basis.rng if basis is not None else random.Random(0)
        self.learned = basis.learned if basis is not None else None
        # a node with the pods nominated to it placed there in `state` for this context
        self.nominated = nominated
        self._data: dict[Callable[[CycleContext], Any], Any] = {}

    @property
    def basis(self) -> Basis:
        if self._basis is None:
            raise RuntimeError("this context was made for filtering only: no basis")
        return self._basis

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
