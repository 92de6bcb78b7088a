"""A shadow trial: what loadwise would have done, on the user's own cluster, writing nothing.

Each pod the watched scheduler places (seen pending, then bound) is decided by the one
scheduling path, as if it named loadwise, against the cluster as the watched scheduler saw it:
the state just before the binding shows up (its own placements so far in, this pod not). The
record says where it went and where loadwise would have put it, and whether each node was hot
for it then under its policy (the hot pass-over's rule, measured load plus the estimates of
pods placed since the node's sample). The report adds the spread either way: every node's
measured CPU now, and the same with each trial pod still running moved by its estimate to the
node loadwise would have chosen (a prediction: the cluster would have evolved differently).

Loadwise counts its own recent choices (a burst's earlier pods, which no sample shows yet) by
their estimates: so does the trial, by deciding in a shadow world where the trial pods placed
in the last RECENT seconds sit on the nodes loadwise chose for them, each counted by its whole
estimate (set aside and put back for the decision, as rebalancing's dry runs do): no sample of
the real cluster will ever show them there. Their use stays in the samples of the nodes where
they really run, the cautious side; older trial pods are left where they run. So the
prediction is an approximation (`bench/shadow` measures it against loadwise placing the same
pods).
"""

from __future__ import annotations

import statistics
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import observability as obs
from ..framework.cycle import Decision
from ..framework.heat import is_fresh
from ..framework.scoring import pod_estimate, score_node, weighted_load
from ..framework.types import PodInfo
from ..resources import CPU

if TYPE_CHECKING:
    from .scheduler import Scheduler

PENDING_LIMIT = 200_000  # pods seen pending and not bound yet (oldest forgotten first)
RECENT = 60.0  # seconds a trial pod sits on loadwise's choice in the shadow world


@dataclass(frozen=True, slots=True)
class ShadowRecord:
    pod: str  # namespace/name
    uid: str
    at: float  # wall-clock time the binding was seen
    placed: str  # the watched scheduler's node
    placed_hot: bool
    placed_load: float  # weighted load of that node for the pod, as loadwise judges it
    would: str  # loadwise's node ("" when it would not place the pod)
    would_hot: bool
    would_load: float
    why: str  # "" or why loadwise would not place it
    cpu: float  # the pod's estimated use, millicores (for the predicted spread)


class ShadowTrial:
    def __init__(self, scheduler: Scheduler, watched: str, keep: int = 2000) -> None:
        self.scheduler = scheduler
        self.watched = watched
        self.started = time.time()
        self.records: deque[ShadowRecord] = deque(maxlen=keep)
        self.totals = {"pods": 0, "placed_hot": 0, "would_hot": 0, "same": 0, "refused": 0}
        self._pending: OrderedDict[str, None] = OrderedDict()

    # --- watch events in (scheduler/event_handlers.py) -----------------------------------------
    def pending(self, uid: str, raw: Mapping[str, Any]) -> None:
        """A pending pod of some other scheduler: the watched one's are followed."""
        spec = raw.get("spec") or {}
        if spec.get("schedulerName") != self.watched:
            return
        self._pending[uid] = None
        while len(self._pending) > PENDING_LIMIT:
            self._pending.popitem(last=False)

    def placed(self, pod: PodInfo) -> None:
        """A pod first seen bound, before the state takes it in: judged if it was seen
        pending (a pod bound before the trial started is not)."""
        if self._pending.pop(pod.uid, 0) is not None:
            return
        record = self.judge(pod)
        if record is not None:
            self.records.append(record)

    # --- the decision -------------------------------------------------------------------------
    def judge(self, pod: PodInfo) -> ShadowRecord | None:
        scheduler, state = self.scheduler, self.scheduler.state
        node = state.nodes.get(pod.node_name)
        if node is None:
            return None
        ask = replace(pod, node_name="", scheduler_name=scheduler.name, assumed=False)
        basis = scheduler.basis_for(ask)
        moved = self._shadow_world(basis.now)
        try:
            there = score_node(ask, node, state, basis)
            result = scheduler.decide(ask, basis)
        finally:
            for original in moved:
                state.set_aside(original.uid)
                state.put_back(original, placed=True)
        policy = basis.policy
        placed_load = weighted_load(policy, there)
        factors = (policy.spec.placement_estimate, policy.spec.memory_estimate)
        cpu = pod_estimate(ask, factors, basis.learned if policy.spec.learned_estimate else None)
        if isinstance(result, Decision):
            chosen = result.chosen
            would, would_hot, why = result.node, chosen.hot, ""
            would_load = weighted_load(policy, chosen)
        else:
            would, would_hot, would_load, why = "", False, 0.0, result.message
        record = ShadowRecord(
            pod.key, pod.uid, time.time(), pod.node_name, there.hot, placed_load,
            would, would_hot, would_load, why, cpu[0],
        )  # fmt: skip
        totals = self.totals
        totals["pods"] += 1
        totals["placed_hot"] += there.hot
        totals["would_hot"] += would_hot
        totals["same"] += would == pod.node_name
        totals["refused"] += not would
        obs.SHADOW_PODS.labels("yes" if there.hot else "no").inc()
        outcome = "unschedulable" if not would else "hot" if would_hot else "cool"
        obs.SHADOW_WOULD.labels(outcome, str(would == pod.node_name).lower()).inc()
        return record

    def _shadow_world(self, now: float) -> list[PodInfo]:
        """Move the recent trial pods to loadwise's choices; returns them as they were."""
        state, moved = self.scheduler.state, []
        for record in reversed(self.records):
            if record.at < now - RECENT:
                break
            if not record.would or record.would == record.placed:
                continue
            if record.would not in state.nodes:
                continue
            original = state.set_aside(record.uid)
            if original is None:
                continue
            moved.append(original)
            there = replace(original, node_name=record.would, placed_at=now)
            state.put_back(there, placed=True)
        return moved

    # --- the report ---------------------------------------------------------------------------
    def report(self, rows: int = 50) -> dict[str, Any]:
        """The totals since the trial started, the spread either way, and the latest rows."""
        return {
            "scheduler": self.watched,
            "since": self.started,
            **self.totals,
            **self.spread(),
            "rows": [asdict(r) for r in list(self.records)[-rows:]],
        }

    def spread(self) -> dict[str, float | None]:
        """Nodes' measured CPU now (by the source of the policy a plain pod gets), and as it
        would be with the trial pods still placed moved by their estimates to loadwise's
        choices."""
        scheduler, state, now = self.scheduler, self.scheduler.state, time.time()
        policy = scheduler.policies.for_pod({}, {}, scheduler.name)
        samples = scheduler.usage.samples_for(policy)
        cpu = {
            name: sample.cpu
            for name, sample in samples.items()
            if name in state.nodes and is_fresh(sample, policy, now)
        }
        if len(cpu) < 2:
            return {"cpu_stddev_now": None, "cpu_stddev_loadwise": None,
                    "cpu_max_now": None, "cpu_max_loadwise": None}  # fmt: skip
        moved = dict(cpu)
        for record in self.records:
            pod = state.pods.get(record.uid)
            if pod is None or not record.would or record.would == record.placed:
                continue
            if record.placed not in moved or record.would not in moved:
                continue
            for name, sign in ((record.placed, -1), (record.would, 1)):
                allocatable = state.nodes[name].allocatable.get(CPU, 0)
                if allocatable:
                    moved[name] += sign * record.cpu / allocatable
        return {
            "cpu_stddev_now": round(statistics.pstdev(cpu.values()), 4),
            "cpu_stddev_loadwise": round(statistics.pstdev(moved.values()), 4),
            "cpu_max_now": round(max(cpu.values()), 4),
            "cpu_max_loadwise": round(max(moved.values()), 4),
        }
