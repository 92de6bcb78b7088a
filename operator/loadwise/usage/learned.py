"""LearnedUsage: what a workload's pods really use, as an estimate for its next pod.

Requests are often far from use (set once, never revisited); the pods a workload already runs
say better what the next one will need. Per workload, each pod's latest usage is kept; the
estimate is, per resource, the 80th percentile across those pods (nearest rank, so an observed
value). Why a percentile across pods and no smoothing over time: each figure is already a
windowed average (a rate over a minute, a working set), the spread across replicas is what varies,
and an upper percentile errs towards over-estimating, the safe side for placement, while one
runaway or idle pod moves it little; a workload whose use changes shows it at the next refresh.

A policy that judges nodes over a window (`spec.metrics.aggregation` p95 over 600 s, say)
judges pods the same way: its estimates take each pod's aggregate of its figures over that
window (`over`), then the percentile across pods, so a TaskManager that idles between bursts
is estimated by its bursts. Per-pod history is kept only as long as the longest such window
(`keep`; none asked: only the latest figure).

A pod whose workload has no estimate yet (its first pods, or no controller: a pod group's
members, bare pods) is estimated by its namespace's ratio of use to requests, the mean across
the namespace's measured pods (`ratio`, at least MIN_RATIO_PODS of them): a team sets its
requests alike, and what its pods use of them says more than one fixed factor for every
cluster. The mean, not an upper percentile as for a workload: a namespace mixes workloads, so
its spread is their difference, not noise, and an upper percentile of it over-estimates every
pod (bench/shadow, pods using 0.2-2.5 times their requests: estimated at 2.4 times, the shadow
trial judged nodes hot that were not). Like a workload's estimate it outlives the pods it came
from: a batch tenant's jobs come one after another, and the next one's first pods are judged
by what the last one's used, not by placementEstimate (bench/gang: groups in namespaces with no
ratio took half the cool room in their first 12 s, judged at 1.5 times their requests). Fewer
than MIN_RATIO_PODS measured pods keep the ratio from the last time there were enough.

Memory is bounded: a pod not reported for FORGET_REFRESHES refreshes is forgotten (it ended, or
moved out of view); a workload with no pod left keeps its estimate (scaled to zero, it will want
the same again) for WORKLOAD_TTL seconds, and at most MAX_WORKLOADS are kept (least recently
seen go first).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from .history import Aggregation, aggregate


class PodFacts(NamedTuple):
    """What learning needs of a pod on a node besides its usage."""

    workload: str | None  # its controller's key; None: no controller
    placed_at: float  # wall time
    cpu: int  # requested millicores (kube-scheduler's non-zero default when unset)
    memory: int  # requested bytes (likewise)


# (namespace, pod name) -> the pod's facts, or None (unknown pod).
WorkloadOf = Callable[[str, str], PodFacts | None]

PERCENTILE = 0.8
FORGET_REFRESHES = 6
WORKLOAD_TTL = 3600.0
MAX_WORKLOADS = 10_000
MIN_RATIO_PODS = 5  # measured pods a namespace needs for its ratio of use to requests
RATIO = "{namespace}/ratio"  # a namespace's ratios are kept as a workload of this key (x 1000)
POD_STEP, WORKLOAD_STEP = 500, 125  # between two yields of observe_steps (a few ms)


@dataclass(slots=True)
class _Workload:
    # (namespace, pod) -> (cpu millicores, memory bytes, refresh it was last seen in)
    pods: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)
    # (namespace, pod) -> its figures over time (wall time, cpu, memory), while `keep` > 0
    past: dict[tuple[str, str], deque[tuple[float, int, int]]] = field(default_factory=dict)
    estimate: tuple[int, int] | None = None
    seen: float = 0.0  # wall time one of its pods was last observed


class LearnedUsage:
    def __init__(self) -> None:
        self._workloads: dict[str, _Workload] = {}
        self._round = 0
        self.keep = 0.0  # seconds of each pod's figures kept: the longest window in use
        self._views: dict[tuple[Aggregation, float], WindowedEstimates] = {}

    def over(self, how: Aggregation, window: float) -> WindowedEstimates:
        """Estimates from each pod's `how` over the last `window` seconds (this refresh's;
        the same object until the next refresh)."""
        key = (how, window)
        view = self._views.get(key)
        if view is None or view.round != self._round:
            view = self._views[key] = WindowedEstimates(self, how, window, self._round)
        return view

    @property
    def workloads(self) -> int:
        """How many workloads have an estimate (namespaces' ratios are not workloads)."""
        return sum(
            1
            for key, w in self._workloads.items()
            if w.estimate is not None and key.count("/") > 1  # ns/Kind/name, not ns/ratio
        )

    def estimate(self, workload: str) -> tuple[int, int] | None:
        """(cpu millicores, memory bytes) for the workload's next pod; None if nothing known."""
        known = self._workloads.get(workload)
        return known.estimate if known is not None else None

    def ratio(self, namespace: str) -> tuple[float, float] | None:
        """(cpu, memory) use per unit requested by the namespace's pods (kept after they go);
        None if never MIN_RATIO_PODS of them were measured, or not for WORKLOAD_TTL."""
        known = self._workloads.get(RATIO.format(namespace=namespace))
        if known is None or known.estimate is None:  # set from MIN_RATIO_PODS pods or more
            return None
        return known.estimate[0] / 1000, known.estimate[1] / 1000

    def observe(
        self,
        usage: Mapping[tuple[str, str], tuple[int, int]],
        workload_of: WorkloadOf,
        now: float,
        min_age: float,
    ) -> None:
        """One refresh's per-pod usage, in one call (`observe_steps` says what is learned)."""
        for _ in self.observe_steps(usage, workload_of, now, min_age):
            pass

    def observe_steps(
        self,
        usage: Mapping[tuple[str, str], tuple[int, int]],
        workload_of: WorkloadOf,
        now: float,
        min_age: float,
    ) -> Iterator[None]:
        """One refresh's per-pod usage, yielding every few hundred pods or workloads
        so that the caller can let the event loop run (150,000 pods take a tenth of a second
        or more). Pods placed less than `min_age` seconds before `now` are skipped: a rate
        window shows a new pod only partly, and would under-estimate. Estimates may be read
        meanwhile: each workload's changes at once, and windowed views are renewed at the
        end."""
        current = self._round + 1
        workloads = self._workloads
        for done, (pod, (cpu, memory)) in enumerate(usage.items(), 1):
            if done % POD_STEP == 0:
                yield
            found = workload_of(*pod)
            if found is None or cpu < 0 or memory < 0 or now - found.placed_at < min_age:
                continue
            if found.cpu > 0 and found.memory > 0:
                ratios = workloads.get(key := RATIO.format(namespace=pod[0]))
                if ratios is None:
                    ratios = workloads[key] = _Workload()
                ratio = (cpu * 1000 // found.cpu, memory * 1000 // found.memory, current)
                ratios.pods[pod] = ratio
                ratios.seen = now
            if found.workload is None:
                continue
            workload = workloads.get(found.workload)
            if workload is None:
                workload = workloads[found.workload] = _Workload()
            workload.pods[pod] = (cpu, memory, current)
            workload.seen = now
            if self.keep > 0:
                past = workload.past.get(pod)
                if past is None:
                    past = workload.past[pod] = deque()
                past.append((now, cpu, memory))
        for done, (key, workload) in enumerate(list(workloads.items()), 1):
            if done % WORKLOAD_STEP == 0:
                yield
            pods = workload.pods
            for pod in [
                p for p, (_, _, seen) in pods.items() if current - seen >= FORGET_REFRESHES
            ]:
                del pods[pod]
            for pod, past in list(workload.past.items()):
                while past and past[0][0] < now - self.keep:
                    past.popleft()
                if not past or pod not in pods:
                    del workload.past[pod]
            of_namespace = key.count("/") == 1  # ns/ratio: a mean, of MIN_RATIO_PODS or more
            if len(pods) >= (MIN_RATIO_PODS if of_namespace else 1):
                summary = _mean if of_namespace else _percentile
                workload.estimate = (
                    summary([cpu for cpu, _, _ in pods.values()]),
                    summary([memory for _, memory, _ in pods.values()]),
                )
            elif not pods and now - workload.seen > WORKLOAD_TTL:
                del workloads[key]
        if len(workloads) > MAX_WORKLOADS:
            by_age = sorted(workloads, key=lambda k: workloads[k].seen)
            for key in by_age[: len(workloads) - MAX_WORKLOADS]:
                del workloads[key]
        self._round = current


def _percentile(values: list[int], quantile: float = PERCENTILE) -> int:
    values.sort()
    return values[max(0, math.ceil(quantile * len(values)) - 1)]


def _mean(values: list[int]) -> int:
    return round(sum(values) / len(values))


class WindowedEstimates:
    """A workload's estimate from each of its pods' figures aggregated over a window (the
    policy's aggregation), then the percentile across pods; a pod with no history yet counts
    by its latest figure."""

    def __init__(self, learned: LearnedUsage, how: Aggregation, window: float, round_: int):
        self.learned = learned
        self.how = how
        self.window = window
        self.round = round_
        self._memo: dict[str, tuple[int, int] | None] = {}

    def estimate(self, workload: str) -> tuple[int, int] | None:
        if workload in self._memo:
            return self._memo[workload]
        known = self.learned._workloads.get(workload)
        found: tuple[int, int] | None = None
        if known is not None and known.pods:
            cpus, memories = [], []
            for pod, (cpu, memory, _) in known.pods.items():
                past = known.past.get(pod)
                if not past:
                    cpus.append(cpu)
                    memories.append(memory)
                    continue
                since = past[-1][0] - self.window
                points = [(c, m) for t, c, m in past if t >= since]
                cpus.append(int(aggregate(self.how, [float(c) for c, _ in points])))
                memories.append(int(aggregate(self.how, [float(m) for _, m in points])))
            found = (_percentile(cpus), _percentile(memories))
        elif known is not None:
            found = known.estimate
        self._memo[workload] = found
        return found

    def ratio(self, namespace: str) -> tuple[float, float] | None:
        return self.learned.ratio(namespace)  # by each pod's latest figure
