"""SampleHistory: each node's recent samples, so a policy can judge load by an aggregate over a
window (avg, p90, p95, max) rather than by the latest sample: a node that idles between bursts
looks cool by its latest sample alone.

It is the cache's own history, the same for every source: what this replica fetched since it
started (every replica refreshes, leader or not), and, from a source that keeps history
(Prometheus), what it answers for the times before that (`backfill`, once the window is known:
cache.py), so a replica that just started judges a node over a full window. metrics-server keeps
none: there a window covers what this replica has fetched so far (a shorter window), never
nothing. It is kept only for as long as the longest window a policy asks for, or a pod group's
members' peaks need (usage_sources.py; neither: nothing is kept), at most one point per node
every `step` seconds.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .cache import NodeSample

Aggregation = Literal["latest", "avg", "p90", "p95", "max"]


class SampleHistory:
    def __init__(self, step: float = 10.0) -> None:
        self.keep = 0.0  # seconds kept: the longest window in use (0: none)
        self.step = step
        self._points: dict[str, deque[NodeSample]] = {}
        self._version = 0
        # (how, window) -> (version, the latest samples aggregated with, the aggregate)
        self._memo: dict[
            tuple[Aggregation, float],
            tuple[int, Mapping[str, NodeSample], dict[str, NodeSample]],
        ] = {}

    def record(self, samples: Mapping[str, NodeSample]) -> None:
        """Add the samples newer than each node's last point by at least `step`."""
        if self.keep <= 0:
            self._points.clear()
            return
        for node, sample in samples.items():
            points = self._points.get(node)
            if points is None:
                points = self._points[node] = deque()
            if points and sample.timestamp < points[-1].timestamp + self.step:
                continue  # within a step of the last point (the latest joins when aggregated)
            points.append(sample)
            horizon = sample.timestamp - self.keep
            while points and points[0].timestamp < horizon:
                points.popleft()
        for node in [n for n in self._points if n not in samples]:
            del self._points[node]  # gone from the source: its history goes with it
        self._version += 1

    def backfill(self, answers: Iterable[Mapping[str, NodeSample]]) -> int:
        """Add older points (a source's answers for past times) before each node's first, a
        `step` apart and within `keep` of its latest; only for nodes with history already (the
        others are gone from the source). Returns how many points were added."""
        older: dict[str, list[NodeSample]] = {}
        for answer in answers:
            for node, sample in answer.items():
                points = self._points.get(node)
                if points and sample.timestamp <= points[0].timestamp - self.step / 2:
                    older.setdefault(node, []).append(sample)
        added = 0
        for node, samples in older.items():
            points = self._points[node]
            horizon = points[-1].timestamp - self.keep
            kept: list[NodeSample] = []
            for sample in sorted(samples, key=lambda s: s.timestamp):
                if sample.timestamp >= horizon and (
                    not kept or sample.timestamp >= kept[-1].timestamp + self.step / 2
                ):
                    kept.append(sample)
            points.extendleft(reversed(kept))
            added += len(kept)
        if added:
            self._version += 1
        return added

    def aggregated(
        self, how: Aggregation, window: float, latest: Mapping[str, NodeSample]
    ) -> Mapping[str, NodeSample]:
        """Each node's latest sample with its figures replaced by `how` over the samples of
        the last `window` seconds (before its latest): freshness and coverage stay the latest
        sample's. The same mapping object until the next record or new latest samples (the score
        index keys on it)."""
        if how == "latest":
            return latest
        key = (how, window)
        memo = self._memo.get(key)
        if memo is not None and memo[0] == self._version and memo[1] is latest:
            return memo[2]
        out: dict[str, NodeSample] = {}
        for node, sample in latest.items():
            points = self.since(node, sample.timestamp - window)
            if not points or points[-1].timestamp < sample.timestamp:
                points.append(sample)
            extra = {
                name: aggregate(how, [p.extra[name] for p in points if name in p.extra])
                for name in sample.extra
            }
            out[node] = replace(
                sample,
                cpu=aggregate(how, [p.cpu for p in points]),
                memory=aggregate(how, [p.memory for p in points]),
                extra=extra,
            )
        self._memo[key] = (self._version, latest, out)
        return out

    @property
    def version(self) -> int:
        """Changes with every record or backfill."""
        return self._version

    def since(self, node: str, since: float) -> list[NodeSample]:
        """The node's points from `since` on, oldest first (a new list)."""
        return [p for p in self._points.get(node, ()) if since <= p.timestamp]

    def holds(self, node: str) -> bool:
        return node in self._points

    def span(self, node: str) -> float:
        """Seconds of history held for a node (0: one point or none)."""
        points = self._points.get(node)
        return points[-1].timestamp - points[0].timestamp if points else 0.0


def aggregate(how: Aggregation, values: list[float]) -> float:
    if not values:
        return 0.0
    if how == "max":
        return max(values)
    if how == "avg":
        return sum(values) / len(values)
    if how in ("p90", "p95"):
        ordered = sorted(values)
        # Linear interpolation between the two closest ranks, as quantile_over_time does.
        rank = (0.9 if how == "p90" else 0.95) * (len(ordered) - 1)
        low = math.floor(rank)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
    return values[-1]
