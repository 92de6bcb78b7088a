"""Rebalancing's plan: which pods to move off a node that stays hot, and where a replacement of
each would go, asked of the same scheduling cycle as every decision (`diagnose`, `conclude`,
`select`), with the node it leaves taken out of the choice.

A pod moves only if its replacement lands on a node that is cool now and stays at least
TARGET_HEADROOM under each of the policy's hot thresholds with the pod's estimate added (its
workload's learned use, raised to what the moving pods are measured to use now: a drifting
workload's learned figure lags), by measured load. The pods of the lowest priority and QoS
class are tried first, alone, then with the next tier, and so on; within what may move, the
largest shares of what is over go first, until the node would be under its thresholds (a
greedy choice, not a proven smallest set); if every movable pod together cannot do that,
nothing moves. Replacements planned earlier count on their targets when the next is placed.

Pure: the view (WhatIf) is edited and restored before returning.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..policies.policy import Policy
from ..usage.cache import NodeSample
from . import heat
from .context import Basis, CycleContext
from .cycle import Decision, conclude, diagnose
from .heat import RELIEVABLE, sample_over
from .pod_groups import pod_group_of
from .profile import DEFAULT_PROFILE, Profile
from .scoring import UsageProfiles, pod_estimate
from .types import PodInfo, controller_of
from .view import WhatIf

# A replacement's UID in a plan, and its placeholder's once the room is held
# (scheduler/rebalancing/moves.py): the evicted pod's with this suffix.
HELD = "/replacement"

QOS_ORDER = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}
# A target must stay this far (utilisation fraction) under each hot threshold with the pod: a
# target left exactly at its threshold turns hot at the next wobble and is relieved in turn.
TARGET_HEADROOM = 0.05
# Controllers that create a replacement for a pod that is evicted (a Deployment's through its
# ReplicaSet). A Job's pod is not moved: the Job would count the eviction as a failure.
RECREATING = ("ReplicaSet", "StatefulSet", "ReplicationController")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def ineligible(raw: Mapping[str, Any], scheduler_name: str, local_storage: bool) -> str | None:
    """Why a pod may not be moved, or None. Static and DaemonSet pods never; pods another
    scheduler placed, members of a pod group, pods no controller would recreate, or holding
    local storage (unless allowed) neither."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "a static pod"
    owner = controller_of(meta)
    if owner is not None and owner.kind == "DaemonSet":
        return "a DaemonSet's pod"
    if (spec.get("schedulerName") or "default-scheduler") != scheduler_name:
        return "placed by another scheduler"
    if pod_group_of(meta, spec) is not None:
        return "a member of a pod group (moved alone, it would break its gang)"
    if owner is None or owner.kind not in RECREATING:
        return "no ReplicaSet, StatefulSet or ReplicationController recreates it"
    if meta.get("deletionTimestamp"):
        return "terminating"
    if (raw.get("status") or {}).get("phase") != "Running":
        return "not running"
    volumes = spec.get("volumes") or ()
    if not local_storage and any("emptyDir" in v or "hostPath" in v for v in volumes):
        return "local storage (emptyDir or hostPath)"
    return None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A movable pod on the hot node: parsed in full (its constraints, as its replacement's),
    its QoS class, and its measured share of the node's allocatable CPU and memory."""

    pod: PodInfo
    qos: str
    cpu: float
    memory: float
    grace: float = 30.0  # its termination grace period: its use leaves the node by then
    used: tuple[int, int] = (0, 0)  # measured: cpu millicores, memory bytes


@dataclass(frozen=True, slots=True)
class Move:
    pod: PodInfo
    source: str
    target: str
    decision: Decision
    grace: float = 30.0
    used: tuple[int, int] = (0, 0)


@dataclass(frozen=True, slots=True)
class AtLeast:
    """Learned estimates, raised for the moving pods' workloads to what those pods are measured
    to use now (a drifting workload's learned figure lags behind its pods')."""

    learned: UsageProfiles | None
    floors: Mapping[str, tuple[int, int]]

    def estimate(self, workload: str) -> tuple[int, int] | None:
        floor = self.floors.get(workload)
        if floor is not None:
            return floor
        return self.learned.estimate(workload) if self.learned is not None else None

    def ratio(self, namespace: str) -> tuple[float, float] | None:
        return self.learned.ratio(namespace) if self.learned is not None else None


def at_least(
    candidate: Candidate,
    policy: Policy,
    learned: UsageProfiles | None,
    moved: Mapping[str, tuple[int, int]],
) -> AtLeast:
    """Estimates for placing this pod's replacement: for its workload, the larger of the
    usual estimate and what the pod is measured to use; for the workloads of replacements
    moved lately (`moved`, not yet in their targets' samples), what their pods used."""
    workload = candidate.pod.workload
    if workload is None:
        return AtLeast(learned, moved)
    spec = policy.spec
    usual = pod_estimate(candidate.pod, (spec.placement_estimate, spec.memory_estimate), learned)
    used = candidate.used
    floor = (int(max(usual[0], used[0])), int(max(usual[1], used[1])))
    return AtLeast(learned, {**moved, workload: floor})


@dataclass(frozen=True, slots=True)
class Relief:
    """The moves that bring `node` under its thresholds, or none and why (`refused`)."""

    node: str
    moves: tuple[Move, ...] = ()
    refused: str = ""
    over: Mapping[str, float] = field(default_factory=dict)  # resource -> share over


@dataclass(frozen=True, slots=True)
class Limits:
    """What bounds one node's plan: `max_moves`, what the rate limits leave for it now (None:
    no bound); `held_back`, which limit, or which pods they keep from moving; `moved`, per
    workload, the most its pods moved lately were measured to use (cpu millicores, memory
    bytes), which a replacement's estimate is raised to."""

    max_moves: int | None = None
    held_back: str = ""
    moved: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def plan_relief(
    node: str,
    sample: NodeSample,
    candidates: Iterable[Candidate],
    view: WhatIf,
    basis: Basis,
    profile: Profile = DEFAULT_PROFILE,
    limits: Limits = Limits(),
    basis_for: Callable[[PodInfo], Basis] | None = None,
) -> Relief:
    """Lower tiers first: pods of the lowest (priority, QoS class) may relieve the node alone,
    else the next tier joins them, and so on; within the pods allowed, the largest shares of
    what is over go first (the fewest evictions), so a high-priority pod moves only if the
    others cannot do it, and one big pod rather than many small ones. `basis`: the policy, its
    samples and learned usage every replacement is placed by (`basis_for`: a replacement's own,
    as its priority band judges nodes, when the policy has bands)."""
    policy, max_moves, held_back = basis.policy, limits.max_moves, limits.held_back
    over = sample_over(policy, sample, view.nodes.get(node))
    if not over:
        return Relief(node, refused="not over its hot thresholds")
    relievable = {r: amount for r, amount in over.items() if r in RELIEVABLE}
    if not relievable:
        names = ", ".join(over)
        return Relief(
            node,
            refused=f"over its {names} threshold only, which moving pods cannot be shown to "
            f"relieve: no pod's {names} use is measured (rebalancing moves pods by their CPU "
            "and memory use)",
            over=over,
        )
    pods = list(candidates)
    if not pods:
        return Relief(node, refused=held_back or "no pod on it may be moved", over=over)
    if max_moves is not None and max_moves <= 0:
        return Relief(node, refused=held_back, over=over)

    def tier(c: Candidate) -> tuple[int, int]:
        return c.pod.priority, QOS_ORDER.get(c.qos, 1)

    refused = ""
    for top in sorted({tier(c) for c in pods}):
        pool = sorted(
            (c for c in pods if tier(c) <= top),
            key=lambda c: (-sum(getattr(c, r) for r in relievable), tier(c)),
        )
        trial = _Trial(view, basis, profile, basis_for)
        moves, left, unplaced = _relieve(node, pool, relievable, trial, limits.moved)
        if any(amount > 0 for amount in left.values()):
            why = "; ".join(unplaced) if unplaced else "its movable pods use too little"
            why = f"{why}; {held_back}" if held_back else why
            refused = f"moving what can move would leave it over its thresholds ({why})"
        elif max_moves is not None and len(moves) > max_moves:
            refused = f"it would take {len(moves)} evictions and {held_back}"
        else:
            return Relief(node, tuple(moves), over=over)
    return Relief(node, refused=refused, over=over)


@dataclass(frozen=True, slots=True)
class _Trial:
    """What every replacement of one plan is placed against: the edited view, the policy and
    its samples, at one moment."""

    view: WhatIf
    basis: Basis
    profile: Profile
    basis_for: Callable[[PodInfo], Basis] | None = None

    @property
    def policy(self) -> Policy:
        return self.basis.policy

    def place(
        self, replacement: PodInfo, source: str, learned: UsageProfiles | None
    ) -> Decision | str:
        """The cycle's decision for the replacement among the nodes but `source`, or why it
        would not go to a cool, measured node (`learned`: its estimates, raised to what the
        pods it replaces use)."""
        own = self.basis if self.basis_for is None else self.basis_for(replacement)
        ctx = CycleContext(replacement, self.view, replace(own, learned=learned))
        verdicts = [d for d in diagnose(ctx, self.profile) if d.node.name != source]
        decision = conclude(ctx, verdicts, self.profile)
        if not isinstance(decision, Decision):
            return decision.message
        chosen = decision.chosen
        if decision.all_hot or chosen.hot:
            return "every node it fits on would be hot"
        target = self.view.nodes.get(chosen.node)
        if heat.over(
            self.policy, chosen.cpu, chosen.memory, chosen.extra, TARGET_HEADROOM, target, own.band
        ):
            dims = "".join(
                f" {d.name} {v:.0%}"
                for d, v in zip(self.policy.spec.dimensions, chosen.extra, strict=False)
            )
            return (
                f"{chosen.node} would be within {TARGET_HEADROOM:.0%} of its hot thresholds "
                f"with it (cpu {chosen.cpu:.0%} mem {chosen.memory:.0%}{dims})"
            )
        if chosen.source != "metrics":
            return f"{chosen.node} has no fresh sample (a target must be measured cool)"
        return decision


def _relieve(
    node: str,
    pool: Sequence[Candidate],
    over: Mapping[str, float],
    trial: _Trial,
    moved: Mapping[str, tuple[int, int]],
) -> tuple[list[Move], dict[str, float], list[str]]:
    """Greedy over `pool` in its order: each pod's replacement is placed by the cycle, with
    the replacements before it counted on their targets, until nothing is over. Returns the
    moves, what is still over, and why pods could not move. The view is restored."""
    view = trial.view
    moves: list[Move] = []
    set_aside: list[PodInfo] = []
    placed: list[str] = []
    left = dict(over)
    unplaced: list[str] = []
    try:
        for candidate in pool:
            if all(amount <= 0 for amount in left.values()):
                break
            pod = view.set_aside(candidate.pod.uid)
            if pod is None:
                continue
            set_aside.append(pod)
            replacement = replace(
                candidate.pod, uid=f"{pod.uid}{HELD}", node_name="", assumed=False
            )
            estimates = at_least(candidate, trial.policy, trial.basis.learned, moved)
            decision = trial.place(replacement, node, estimates)
            if isinstance(decision, str):
                unplaced.append(f"{pod.name}: {decision}")
                view.put_back(set_aside.pop())
                continue
            moves.append(Move(pod, node, decision.node, decision, candidate.grace, candidate.used))
            placed_now = replace(replacement, node_name=decision.node, placed_at=trial.basis.now)
            view.put_back(placed_now, placed=True)
            placed.append(replacement.uid)
            for resource in left:
                left[resource] -= getattr(candidate, resource)
    finally:
        for uid in placed:
            view.set_aside(uid)
        for pod in set_aside:
            view.put_back(pod)
    return moves, left, unplaced


class HotStreaks:
    """Hysteresis: a node is to be relieved once it is hot at `hot_after` refreshes in a row,
    and no longer once it is cool at `cool_after` in a row."""

    def __init__(self) -> None:
        self._hot: dict[str, int] = {}
        self._cool: dict[str, int] = {}
        self.relieving: set[str] = set()

    def update(
        self, hot: Collection[str], nodes: Iterable[str], hot_after: int, cool_after: int
    ) -> set[str]:
        hot = set(hot)
        seen = set()
        for name in nodes:
            seen.add(name)
            if name in hot:
                self._hot[name] = self._hot.get(name, 0) + 1
                self._cool[name] = 0
                if self._hot[name] >= hot_after:
                    self.relieving.add(name)
            else:
                self._cool[name] = self._cool.get(name, 0) + 1
                self._hot[name] = 0
                if self._cool[name] >= cool_after:
                    self.relieving.discard(name)
        for name in set(self._hot) - seen:  # deleted nodes
            self._hot.pop(name, None)
            self._cool.pop(name, None)
            self.relieving.discard(name)
        return set(self.relieving)

    def hold(self, node: str) -> None:
        """Pods were moved off the node: it must stay hot `hot_after` refreshes again, counted
        once its samples no longer include them."""
        self._hot[node] = 0
        self.relieving.discard(node)
