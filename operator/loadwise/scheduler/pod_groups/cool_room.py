"""Whether cool room is coming for a pod group that would put members on hot nodes.

"Hot" here includes nearly hot: a member that would bring its node within APPROACH_BAND of a
hot threshold (`warm`), where an estimate a little short or a swinging background tips it over.
Such a near miss is worth a shorter wait (NEAR_LIMIT), for the same signs: waiting for one only
while the next samples or measured departures promised room (15 s at most) left members at
72-80% of busy nodes whose background then swung over (bench/gang, docs/gangs.md). A node
judged by a peak over its whole window (GROUP_PEAK) has shown its swing already: there only
the estimates can err, and the band is SEEN_BAND (with the full band everywhere, gangs waited
30 s for nodes judged at 70-75% whose backgrounds hardly moved, bench/gang seed 2).

A gang runs at the pace of its slowest member, so a member on a hot node slows all of it; but
waiting for cool room that is not coming only delays it. With gangHotWaitSeconds unset (the
built-in policy) a group waits, holding nothing, only while one of three signs says cool
room is on its way, and at most AUTO_LIMIT seconds in all:
- settling: a node a hot member fits by requests is hot only by the estimates of other pods
  placed since its last sample (the sample itself, with the member, is cool): the next samples
  say what those pods really use, and placementEstimate is above what most workloads use;
- finishing: pods that run to completion (restartPolicy Never or OnFailure: Jobs, Spark, MPI)
  hold at least the hot members' requests: their room comes back, when is not known;
- freeing: pods that left their nodes freed CPU requests over the last FREED_WINDOW seconds at a
  rate that would free the hot members' requests within the rest of the wait.
None: the group is placed now, as it fits (least loaded first), as kube-scheduler would: on a
cluster of services that never finish (a Flink session cluster) a gang does not wait in vain.
What is counted is an approximation (requests and the load rule, not every filter): it decides
a wait, never a placement, which the next try makes through the one scheduling cycle.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from ...framework.context import Basis
from ...framework.cycle import Decision
from ...framework.heat import dimensions_of, headrooms, is_fresh
from ...framework.scoring import APPROACH_BAND, pod_estimate, unmeasured
from ...framework.types import PodInfo
from ...framework.view import ClusterView
from ...resources import CPU, MEMORY
from ..departures import Departures
from ..usage_sources import GROUP_PEAK

AUTO_LIMIT = 120.0  # seconds a group waits at most with gangHotWaitSeconds unset
NEAR_LIMIT = 30.0  # and when its members would only be nearly hot
SEEN_BAND = 0.05  # nearly hot, on a node whose peak was taken over its whole window
WHOLE = GROUP_PEAK - 20.0  # seconds of history that make a whole window (a point per 10 s)
FREED_WINDOW = 60.0  # seconds over which the rate of freed room is measured
RETRY = 1.0  # seconds between a waiting group's tries: samples and departures come often


class FreedRoom:
    """CPU requests freed by pods leaving their nodes (deleted or finished), over time, and
    those held by pods that will finish."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, departures: Departures | None = None
    ) -> None:
        """`departures`: told of each pod that left, for the nodes' peaks (departures.py)."""
        self.clock = clock
        self.departures = departures
        self._freed: deque[tuple[float, int]] = deque()  # (when, millicores)
        self._finishing = (-1.0, 0)  # (when counted, millicores): counted at most once a second

    def finishing(self, pods: Iterable[PodInfo]) -> int:
        """Millicores requested by placed pods that run to completion (a walk over every pod,
        so at most once a second, and only while a group would land on a hot node)."""
        now = self.clock()
        if now - self._finishing[0] >= 1.0:
            total = sum(p.requests.nonzero[0] for p in pods if p.finishes)
            self._finishing = (now, total)
        return self._finishing[1]

    def freed(self, pod: PodInfo) -> None:
        if self.departures is not None:
            self.departures.left(pod)
        if pod.node_name and not pod.assumed:
            now = self.clock()
            self._freed.append((now, pod.requests.nonzero[0]))
            self._trim(now)

    def rate(self) -> float:
        """Millicores of requests freed per second over the last FREED_WINDOW seconds."""
        now = self.clock()
        self._trim(now)
        return sum(cpu for _, cpu in self._freed) / FREED_WINDOW

    def _trim(self, now: float) -> None:
        freed = self._freed
        while freed and freed[0][0] < now - FREED_WINDOW:
            freed.popleft()


@dataclass(frozen=True)
class Coming:
    settling: int  # 1: a node a hot member fits is hot only by unmeasured estimates
    rate: float  # millicores of requests freed per second, measured
    needed: int  # millicores the hot members request
    finishing: int = 0  # millicores held by placed pods that run to completion

    def within(self, seconds: float) -> bool:
        """Whether cool room is expected within `seconds`: at once by the next samples; by
        pods that will finish (when is not known: the wait's limit bounds it); by the rate
        departures are measured to free requests at."""
        if self.settling > 0:
            return True
        if seconds <= 0:
            return False
        return self.finishing >= self.needed or (
            self.rate > 0 and self.needed / self.rate <= seconds
        )

    def __str__(self) -> str:
        parts = []
        if self.settling:
            parts.append("a node hot only by estimates of pods not measured yet")
        if self.finishing >= self.needed:
            parts.append(f"pods that run to completion hold {self.finishing / 1000:.1f} CPU")
        if self.rate:
            parts.append(f"requests freed at {self.rate / 1000:.2f} CPU/s over {FREED_WINDOW:.0f}s")
        return "; ".join(parts) or "no cool room coming"


def coming(
    hot: Sequence[PodInfo],
    state: ClusterView,
    basis: Basis,
    skip: Collection[str],
    freed: FreedRoom,
    seconds: float,
) -> Coming | None:
    """The signs of cool room for the `hot` members within `seconds` (`Coming.within`), or
    None. The group's members (`skip`) are left out of the nodes' estimates: their own heat
    does not go away by waiting. The cheap signs first; nodes settling (a walk over every node)
    only when those do not say so."""
    signs = Coming(
        0,
        freed.rate(),
        sum(m.requests.nonzero[0] for m in hot),
        freed.finishing(p for p in state.pods.values() if p.uid not in skip),
    )
    if signs.within(seconds):
        return signs
    if _settling(hot, state, basis, skip):
        return dataclasses.replace(signs, settling=1)
    return None


def warm(decision: Decision, state: ClusterView, basis: Basis) -> bool:
    """The member's node is hot, or would be within APPROACH_BAND of a hot threshold with it
    (where the load score fades to 0: an estimate a little short, or a background that swings,
    tips it over); within SEEN_BAND if the node's peak covers its whole window (its swing is
    in it). Judged as it was chosen: with every estimate on the node (judged by what is
    measured and the group's own members alone, seeds 2 and 3 of bench/gang grew hotter)."""
    if decision.all_hot:
        return True
    chosen = decision.chosen
    if chosen.source != "metrics":
        return False
    node = state.nodes.get(chosen.node)
    sample = basis.samples.get(chosen.node)
    band = SEEN_BAND if sample is not None and sample.seen >= WHOLE else APPROACH_BAND
    rooms = headrooms(basis.policy, chosen.cpu, chosen.memory, chosen.extra, node, basis.band)
    return any(room < band for _, room, weight in rooms if weight > 0)


def _settling(
    hot: Sequence[PodInfo], state: ClusterView, basis: Basis, skip: Collection[str]
) -> bool:
    """Whether a node a hot member fits by requests is hot only by the estimates of pods its
    sample does not show yet (stops at the first)."""
    policy, samples = basis.policy, basis.samples
    spec = policy.spec
    factors = (spec.placement_estimate, spec.memory_estimate)
    use = basis.learned if spec.learned_estimate else None
    member = min(hot, key=lambda m: m.requests.nonzero[0])
    smallest = member.requests.nonzero[0]
    own_cpu, own_mem = pod_estimate(member, factors, use)
    for node in state.nodes.values():
        sample = samples.get(node.name)
        if not node.ready or node.unschedulable or not is_fresh(sample, policy, basis.now):
            continue
        assert sample is not None
        alloc_cpu, alloc_mem = node.allocatable.get(CPU, 0), node.allocatable.get(MEMORY, 0)
        requested = state.requested(node.name).get(CPU, 0)
        if alloc_cpu <= 0 or alloc_mem <= 0 or alloc_cpu - requested < smallest:
            continue
        dims = dimensions_of(policy, sample)
        cpu, mem = sample.cpu + own_cpu / alloc_cpu, sample.memory + own_mem / alloc_mem
        if any(r < 0 for _, r, _ in headrooms(policy, cpu, mem, dims, node, basis.band)):
            continue  # hot by what is measured: no sample will cool it soon
        more_cpu, more_mem = unmeasured(node.name, sample, state, factors, use, skip)
        more = (cpu + more_cpu / alloc_cpu, mem + more_mem / alloc_mem)
        rooms = headrooms(policy, *more, dims, node, basis.band)
        if any(r < 0 for _, r, _ in rooms):
            return True
    return False
