"""Departures: the pods that left each node in the last few minutes, and each node's peak
with the pods it has now.

A pod group's member judges a node by its peak over GROUP_PEAK seconds (usage_sources.py). A
sample shows the pods that ran then, not the node as it is now. Each past sample is judged as
if the node had had its pods of now: less the estimated use of the pods in it that have left
since (their use is not coming back: a peak that still counts them judges a node busy for two
minutes after a gang finished there), plus that of the pods placed since (a node that took
members in a trough is as hot at its next crest as at its last, with them on it). bench/gang:
docs/gangs.md. The counterpart of `unmeasured`, which adds the pods placed since the latest
sample.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from ..framework.types import PodInfo
from ..framework.view import ClusterView
from ..resources import CPU, MEMORY
from ..usage.cache import NodeSample

KEEP = 180.0  # seconds a departure is remembered: longer than any peak window in use

Estimate = Callable[[PodInfo], tuple[float, float]]  # (cpu millicores, memory bytes)


class Departures:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        """`clock`: wall-clock seconds, as samples are stamped."""
        self.clock = clock
        self._left: dict[str, deque[tuple[float, PodInfo]]] = {}
        self.version = 0  # changes with every departure: a peak memoised before it is stale

    def left(self, pod: PodInfo) -> None:
        """A pod that ran on its node left it (deleted or finished)."""
        if not pod.node_name or pod.assumed:
            return
        now = self.clock()
        gone = self._left.setdefault(pod.node_name, deque())
        gone.append((now, pod))
        while gone and gone[0][0] < now - KEEP:
            gone.popleft()
        self.version += 1

    def on(self, node: str) -> Iterable[tuple[float, PodInfo]]:
        """(when it left, the pod) of the pods that left `node` in the last KEEP seconds."""
        gone = self._left.get(node)
        if not gone:
            return ()
        horizon = self.clock() - KEEP
        while gone and gone[0][0] < horizon:
            gone.popleft()
        if not gone:
            del self._left[node]
        return tuple(gone)


def as_now(
    points: Iterable[NodeSample],
    node: str,
    until: float,
    state: ClusterView,
    departures: Departures,
    estimate: Estimate,
) -> Iterable[NodeSample]:
    """The node's samples, each as if the node had had the pods it has now: less the estimated
    use of the pods in it that have left since, plus that of the pods placed since, up to
    `until` (the latest sample's coverage: later ones the scorer adds itself, `unmeasured`),
    each by the share of it the sample shows (`NodeSample.shows`: judged by the window's
    middle alone, a pod counted in none of a sample taken half a window after it left, which
    still showed up to half of its use)."""
    info = state.nodes.get(node)
    cpu_alloc = info.allocatable.get(CPU, 0) if info is not None else 0
    mem_alloc = info.allocatable.get(MEMORY, 0) if info is not None else 0
    points = list(points)
    if cpu_alloc <= 0 or mem_alloc <= 0 or not points:
        yield from points
        return
    oldest = min(p.coverage for p in points)
    uses = [(left_at, pod.placed_at, estimate(pod)) for left_at, pod in departures.on(node)]
    uses += [
        (math.inf, pod.placed_at, estimate(pod))
        for pod in state.placed_since(node, oldest)
        if pod.placed_at <= until
    ]
    for point in points:
        cpu = memory = 0.0
        for left_at, placed_at, (pod_cpu, pod_memory) in uses:
            share = point.shows(placed_at, left_at)
            if left_at == math.inf:  # on the node now: what the sample lacks of it
                share -= 1.0
            cpu -= share * pod_cpu  # gone: its use in the sample is not coming back
            memory -= share * pod_memory
        if cpu or memory:
            point = dataclasses.replace(
                point,
                cpu=max(0.0, point.cpu + cpu / cpu_alloc),
                memory=max(0.0, point.memory + memory / mem_alloc),
            )
        yield point


def peaks(
    history: Callable[[str, float], list[NodeSample]],
    latest: Mapping[str, NodeSample],
    window: float,
    state: ClusterView,
    departures: Departures,
    estimate: Estimate,
) -> dict[str, NodeSample]:
    """Each node's latest sample with its CPU and memory replaced by their peaks over the last
    `window` seconds (`history(node, since)`: the points kept), each point as if the node had
    had its pods of now (`as_now`; freshness and coverage stay the latest sample's), and the
    seconds of history that took (`seen`: less than `window` while the history is short)."""
    out: dict[str, NodeSample] = {}
    for node, sample in latest.items():
        points = history(node, sample.timestamp - window)
        if not points or points[-1].timestamp < sample.timestamp:
            points.append(sample)
        judged = list(as_now(points, node, sample.coverage, state, departures, estimate))
        extra = {
            name: max(p.extra[name] for p in points if name in p.extra) for name in sample.extra
        }
        out[node] = dataclasses.replace(
            sample,
            cpu=max(p.cpu for p in judged),
            memory=max(p.memory for p in judged),
            extra=extra,
            seen=sample.timestamp - points[0].timestamp,
        )
    return out
