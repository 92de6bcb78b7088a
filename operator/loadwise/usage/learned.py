"""LearnedUsage: what a workload's pods really use, as an estimate for its next pod.

Requests are often far from use (set once, never revisited); the pods a workload already runs
say better what the next one will need. Per workload, each pod's latest usage is kept; the
estimate is, per resource, the 80th percentile across those pods (nearest rank, so an observed
value). Why a percentile across pods and no smoothing over time: each figure is already a
windowed average (a rate over a minute, a working set), the spread across replicas is what varies,
and an upper percentile errs towards over-estimating, the safe side for placement, while one
runaway or idle pod moves it little; a workload whose use changes shows it at the next refresh.

Memory is bounded: a pod not reported for FORGET_REFRESHES refreshes is forgotten (it ended, or
moved out of view); a workload with no pod left keeps its estimate (scaled to zero, it will want
the same again) for WORKLOAD_TTL seconds, and at most MAX_WORKLOADS are kept (least recently
seen go first).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# (namespace, pod name) -> (workload key, wall time the pod was placed), or None (no controller,
# unknown pod).
WorkloadOf = Callable[[str, str], tuple[str, float] | None]

PERCENTILE = 0.8
FORGET_REFRESHES = 6
WORKLOAD_TTL = 3600.0
MAX_WORKLOADS = 10_000


@dataclass(slots=True)
class _Workload:
    # (namespace, pod) -> (cpu millicores, memory bytes, refresh it was last seen in)
    pods: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)
    estimate: tuple[int, int] | None = None
    seen: float = 0.0  # wall time one of its pods was last observed


class LearnedUsage:
    def __init__(self) -> None:
        self._workloads: dict[str, _Workload] = {}
        self._round = 0

    @property
    def workloads(self) -> int:
        """How many workloads have an estimate."""
        return sum(1 for w in self._workloads.values() if w.estimate is not None)

    def estimate(self, workload: str) -> tuple[int, int] | None:
        """(cpu millicores, memory bytes) for the workload's next pod; None if nothing known."""
        known = self._workloads.get(workload)
        return known.estimate if known is not None else None

    def observe(
        self,
        usage: Mapping[tuple[str, str], tuple[int, int]],
        workload_of: WorkloadOf,
        now: float,
        min_age: float,
    ) -> None:
        """One refresh's per-pod usage. Pods placed less than `min_age` seconds before `now`
        are skipped: a rate window shows a new pod only partly, and would under-estimate."""
        self._round += 1
        current = self._round
        workloads = self._workloads
        for pod, (cpu, memory) in usage.items():
            found = workload_of(*pod)
            if found is None or cpu < 0 or memory < 0:
                continue
            key, placed_at = found
            if now - placed_at < min_age:
                continue
            workload = workloads.get(key)
            if workload is None:
                workload = workloads[key] = _Workload()
            workload.pods[pod] = (cpu, memory, current)
            workload.seen = now
        for key, workload in list(workloads.items()):
            pods = workload.pods
            for pod in [
                p for p, (_, _, seen) in pods.items() if current - seen >= FORGET_REFRESHES
            ]:
                del pods[pod]
            if pods:
                workload.estimate = (
                    _percentile([cpu for cpu, _, _ in pods.values()]),
                    _percentile([memory for _, memory, _ in pods.values()]),
                )
            elif now - workload.seen > WORKLOAD_TTL:
                del workloads[key]
        if len(workloads) > MAX_WORKLOADS:
            by_age = sorted(workloads, key=lambda k: workloads[k].seen)
            for key in by_age[: len(workloads) - MAX_WORKLOADS]:
                del workloads[key]


def _percentile(values: list[int]) -> int:
    values.sort()
    return values[max(0, math.ceil(PERCENTILE * len(values)) - 1)]
