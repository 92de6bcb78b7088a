"""MetricsCache: per-node usage samples, refreshed in bulk, read by the scorers without I/O.

A refresh that fails keeps the previous samples; they age out against each policy's maximum age,
and the scorers then fall back to requests. Scheduling never waits on the metrics source.

When the cache is told how to find a pod's workload, each refresh also fetches per-pod usage
(from sources that offer it) and feeds it to a LearnedUsage: what a workload's pods really use,
an estimate for its next pod. Per-pod usage is a separate request whose failure costs only the
learning, never the node samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..kube.informer import collection_paused
from .history import SampleHistory
from .learned import LearnedUsage, WorkloadOf

log = logging.getLogger(__name__)


class SourceError(RuntimeError):
    """A metrics source's failure, worded for the user (it ends up in status conditions and
    events as it is, without the exception's class name)."""


# (namespace, pod name) -> (cpu millicores, memory bytes) in use.
PodUsage = dict[tuple[str, str], tuple[int, int]]


@dataclass(frozen=True, slots=True)
class NodeSample:
    cpu: float  # utilisation fraction 0..1
    memory: float  # utilisation fraction 0..1
    timestamp: float  # wall-clock time of the measurement: staleness is judged from it
    # Pods placed before this time are fully in the figures; later ones are not (rate windows,
    # scrape intervals), so the scorer adds their estimate. Defaults to `timestamp`.
    covers_until: float | None = None
    # Further dimensions (those its source's `dimensions` names): name -> utilisation 0..1.
    # A node the dimension's query did not return lacks the key.
    extra: Mapping[str, float] = field(default_factory=dict)
    # Seconds of history the figures were taken over (a pod group's member's peak:
    # departures.py); 0: this sample alone.
    seen: float = 0.0

    @property
    def coverage(self) -> float:
        return self.timestamp if self.covers_until is None else self.covers_until

    def shows(self, placed_at: float, left_at: float = math.inf) -> float:
        """The share of a pod's use in the figures: of what they cover (a rate window, from
        the coverage to the timestamp), the part the pod was on its node. A pod that left
        halfway through the window is half in it, and fades out of the samples over a window.
        An instant (no window): all of it if it was there then, else none."""
        start, end = self.coverage, self.timestamp
        if end <= start:
            return 1.0 if placed_at <= end < left_at else 0.0
        overlap = min(end, left_at) - max(start, placed_at)
        return min(1.0, max(0.0, overlap / (end - start)))


class MetricsSource(Protocol):
    name: str

    @property
    def dimensions(self) -> Collection[str]:
        """What it measures beyond cpu and memory (the names of a sample's `extra`)."""
        ...

    async def fetch(self) -> dict[str, NodeSample]:
        """All nodes' latest usage in one bulk request."""
        ...


@runtime_checkable
class ClosableSource(Protocol):
    """A source holding connections of its own (Prometheus), closed when the replica stops."""

    async def close(self) -> None: ...


@runtime_checkable
class PodMetricsSource(Protocol):
    """A source that can also report per-pod usage (both built-in sources can)."""

    async def fetch_pods(self) -> PodUsage:
        """All pods' latest usage in one bulk request, as a new dict the cache owns (it
        empties it once read)."""
        ...


@runtime_checkable
class HistorySource(Protocol):
    """A source that keeps history and answers for past times (Prometheus; metrics-server
    does not): a replica that just started fills its windows from it (`MetricsCache`)."""

    async def fetch_at(self, when: float | None) -> dict[str, NodeSample]:
        """All nodes' usage as the source answered (or would have) at `when`."""
        ...


# At most this many past answers fill a window (one query each): a longer window is filled at
# a coarser step, which an aggregate over it (max, avg, p90, p95) reads nearly alike.
BACKFILL_POINTS = 30


class MetricsCache:
    def __init__(
        self,
        source: MetricsSource | None,
        interval: float,
        workload_of: WorkloadOf | None = None,
        min_age: float = 0.0,
        ready: asyncio.Event | None = None,
        backfill: bool = True,
    ) -> None:
        """`workload_of(namespace, name)` gives a pod's (workload, placed_at), or None: given,
        per-pod usage is fetched and learned (pods younger than `min_age` seconds are not: a
        rate window shows them only partly); None, no pod request is made at all. `ready`:
        set once the cluster state is listed; learning waits for it, so the first refresh's
        requests can go out while the state is still being listed (start-up). `backfill` false:
        windows hold this replica's own samples only (the setting metrics.backfill)."""
        self.source = source
        self.interval = interval
        self.samples: dict[str, NodeSample] = {}
        self.last_success: float | None = None
        self.last_attempt: float | None = None
        self.last_error: str | None = None
        self.refreshes = 0
        self.workload_of = workload_of
        self.min_age = min_age
        self.lag = 0.0  # the latest answer's longest lag (how far back a sample covers)
        # The latest successful answer, updated in place about a thousand pods at a time (a
        # reader may see the two answers mixed for a moment).
        self.pod_usage: PodUsage = {}
        self.pods_error: str | None = None
        self.learned = LearnedUsage()
        self.history = SampleHistory(step=interval)  # for policies judging load over a window
        # The longest window filled from the source's own history, and how that went ("": not
        # asked; windows then hold only what this replica fetched since it started).
        self.backfilled = 0.0
        self.backfill_note = ""
        self.allow_backfill = backfill
        self._backfill: asyncio.Task[None] | None = None
        self._backfill_at = -math.inf  # monotonic time the last one started
        self._unfilled: set[str] = set()
        self.ready = ready
        self._lock = asyncio.Lock()
        self._frozen = False  # a refresh's survivors were frozen once

    async def refresh_if_due(self, now: float | None = None) -> bool:
        """Refresh unless it was done within this interval (the start-up refresh and the
        operator's periodic task share the cache). Returns True if it refreshed."""
        if self.source is None:
            return False
        async with self._lock:
            now = time.time() if now is None else now
            if self.last_attempt is not None and now - self.last_attempt < self.interval * 0.9:
                return False
            self.last_attempt = now
            await self.refresh()
            return True

    async def refresh(self) -> None:
        # A refresh decodes millions of short-lived objects (150,000 pods' answer): no cyclic
        # collection meanwhile, which would walk everything alive (kube/informer.py says why).
        # The first one's survivors (the per-pod table, the learned workloads) are frozen, as
        # the lists' are; later ones are not, so no garbage made meanwhile is kept for ever.
        with collection_paused(freeze=not self._frozen):
            self._frozen = True
            await self._refresh()

    async def _refresh(self) -> None:
        source = self.source
        if source is None:
            return
        pods: asyncio.Task[PodUsage] | None = None
        if self.workload_of is not None and isinstance(source, PodMetricsSource):
            # Concurrently: a refresh takes as long as the slower request, not both.
            pods = asyncio.create_task(source.fetch_pods())
        try:
            fresh = await source.fetch()
        except Exception as exc:  # any failure degrades scoring; it must not stop scheduling
            self.last_error = _describe(exc)
            log.warning("metrics refresh from %s failed: %s", source.name, self.last_error)
            fresh = None
        except BaseException:  # cancelled: the pod request goes too
            if pods is not None:
                pods.cancel()
            raise
        if pods is not None:
            await self._learn(source.name, pods)
        if fresh is None:
            if pods is not None:  # learned estimates may have changed: readers must see a
                self.samples = dict(self.samples)  # new mapping (the score index keys on it)
            return
        # A new mapping, never mutated afterwards: readers detect a refresh by identity.
        self.samples = {**self.samples, **fresh}
        self.lag = max((s.timestamp - s.coverage for s in fresh.values()), default=self.lag)
        if self.backfilled:  # nodes first seen (or back after a gap) since the last backfill
            self._unfilled.update(n for n in fresh if not self.history.holds(n))
        self.history.record(self.samples)
        self.last_success = time.time()
        self.last_error = None
        self.refreshes += 1
        if self._backfill is None and (
            self.history.keep > self.backfilled
            or (self._unfilled and time.monotonic() - self._backfill_at >= self.history.keep)
        ):
            # in the background: a large cluster's past answers take a while, and the
            # decisions meanwhile use what there is, as before. Nodes first seen later are
            # filled at most once a window (a backfill only adds points before a node's first).
            self._unfilled.clear()
            self._backfill_at = time.monotonic()
            self._backfill = asyncio.get_running_loop().create_task(self.backfill())

    @property
    def source_name(self) -> str:
        return self.source.name if self.source is not None else "no source"

    def window_note(self, window: float) -> str:
        """How much of a `window` of history the nodes' figures hold, and where it came from."""
        spans = [self.history.span(node) for node in self.samples]
        held = min(max(spans, default=0.0), window)
        where = self.backfill_note or "this replica's own samples"
        return f"windows hold up to {held:.0f}s of {window:.0f}s ({where})"

    async def fill_windows(self, timeout: float) -> None:
        """Start filling the windows now if they need it (at start-up, once the policies are
        known: the first refresh may have gone out before), and wait up to `timeout` seconds
        for it, so a new replica's first decisions judge nodes by full windows; past that it
        goes on in the background."""
        if (
            self._backfill is None
            and self.samples
            and self.history.keep > self.backfilled
            and self.allow_backfill
        ):
            if not any(self.history.holds(node) for node in self.samples):
                self.history.record(self.samples)  # refreshed before any window was asked
            self._backfill_at = time.monotonic()
            self._backfill = asyncio.get_running_loop().create_task(self.backfill())
        task = self._backfill
        if task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), timeout)

    async def backfilled_windows(self) -> None:
        """Wait for a backfill under way (explain judges by full windows, as the operator)."""
        task = self._backfill
        if task is not None:
            await asyncio.shield(task)

    async def close(self) -> None:
        """Stop a backfill under way and close the source's connections (the replica stops)."""
        task = self._backfill
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if isinstance(self.source, ClosableSource):
            await self.source.close()

    async def backfill(self) -> None:
        """Fill the windows from the source's history (HistorySource), for times before this
        replica's first sample: once, and again when a policy asks for a longer window. A
        failure leaves the windows to this replica's own samples, said in `backfill_note`."""
        source, keep = self.source, self.history.keep
        try:
            if not self.samples:
                return  # nothing to fill before yet: the next refresh asks again
            if not isinstance(source, HistorySource) or keep <= 0 or not self.allow_backfill:
                self.backfill_note = (
                    ""
                    if keep <= 0
                    else "backfill off (metrics.backfill)"
                    if not self.allow_backfill
                    else f"{self.source_name} keeps no history"
                )
                self.backfilled = keep
                return
            newest = max(s.timestamp for s in self.samples.values())
            step = max(self.history.step, keep / BACKFILL_POINTS)
            # newest first, each answer added at once (before each node's first point), so no
            # more than one answer is held: 15,000 nodes' 30 answers would be about 90 MB
            times = [newest - k * step for k in range(1, int(keep // step) + 1)]
            added = 0
            for done, when in enumerate(times):
                try:
                    added += self.history.backfill([await source.fetch_at(when)])
                except Exception as exc:  # the windows keep what they hold
                    self.backfill_note = (
                        f"backfill from {source.name} failed after {done} answers: {_describe(exc)}"
                    )
                    log.warning("%s; windows hold this replica's own samples", self.backfill_note)
                    self.backfilled = keep
                    return
            self.backfill_note = f"filled from {source.name}'s history ({len(times)} answers)"
            log.info("windows of %gs %s: %d points", keep, self.backfill_note, added)
            self.backfilled = keep
        finally:
            self._backfill = None

    async def _learn(self, source: str, pods: asyncio.Task[PodUsage]) -> None:
        try:
            usage = await pods
        except Exception as exc:  # the node samples stand; only learning waits a refresh
            error = _describe(exc)
            # Once per change of error, not every refresh (e.g. RBAC without pods metrics).
            level = logging.DEBUG if error == self.pods_error else logging.WARNING
            log.log(level, "pod metrics from %s failed: %s", source, error)
            self.pods_error = error
            return
        first = not self.pod_usage
        if first:  # the first answer becomes the table (growing one a step at a time costs)
            self.pod_usage = usage
        else:
            await _update_in_steps(self.pod_usage, usage)
        self.pods_error = None
        if self.ready is not None:
            await self.ready.wait()
        if self.workload_of is not None:
            # A rate window shows a pod fully about a lag after it starts, a lag after placement.
            min_age = max(self.min_age, 2 * self.lag)
            steps = self.learned.observe_steps(usage, self.workload_of, time.time(), min_age)
            for _ in steps:  # 150,000 pods: let the scheduling loop run between steps
                await asyncio.sleep(0)
        if not first:
            await _drain(usage)  # its keys are copies of those kept: freed a step at a time


async def _drain(answer: PodUsage, step: int = 1000) -> None:
    """Empty a dict no one else holds a thousand entries at a time: freeing 150,000 pods'
    keys in one go holds the event loop for tens of milliseconds."""
    while answer:
        for _ in range(min(step, len(answer))):
            answer.popitem()
        await asyncio.sleep(0)


async def _update_in_steps(target: PodUsage, fresh: PodUsage, step: int = 1000) -> None:
    """`target` made equal to `fresh`, letting the event loop run every `step` pods: replacing
    150,000 pods' figures at once would free the old ones in one pause."""
    for done, (pod, figures) in enumerate(fresh.items(), 1):
        target[pod] = figures
        if done % step == 0:
            await asyncio.sleep(0)
    if len(target) == len(fresh):
        return  # it holds every pod of `fresh`, so no other
    gone = []
    for done, pod in enumerate(target, 1):
        if pod not in fresh:
            gone.append(pod)
        if done % step == 0:
            await asyncio.sleep(0)
    for done, pod in enumerate(gone, 1):
        del target[pod]
        if done % step == 0:
            await asyncio.sleep(0)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SourceError) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
