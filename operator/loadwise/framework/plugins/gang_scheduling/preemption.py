"""Preemption for a pod group (KEP-5710, kube-scheduler 1.37's pod-group PostFilter), as a dry
run: when a group does not fit, set aside every placed pod of lower priority in the cluster, run
the group's own decision (placement.py), and preempt only if its minimum then fits; then
spare victims greedily, most important first (those whose eviction would violate a
PodDisruptionBudget tried first), keeping each whose return still lets the minimum fit. A victim
in a group whose `disruptionMode` is `all` stands for every placed pod of its group: spared or
evicted together. Never a preemption that frees room for only part of a gang.

Pure: the view is edited and restored before returning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...context import Basis
from ...disruption_budgets import DisruptionBudget, split_violating
from ...plugin import NoPreemption
from ...pod_groups import PodGroupKey
from ...preemption import NEVER, importance
from ...profile import DEFAULT_PROFILE, Profile
from ...types import PodInfo
from ...view import WhatIf
from .placement import PodGroupDecision, what_if_pod_group

NO_ROOM = "the pod group's minimum does not fit even with every lower-priority pod evicted"


@dataclass(frozen=True, slots=True)
class PodGroupPreemption:
    victims: tuple[PodInfo, ...]  # most important first
    nodes: dict[str, str]  # member uid -> the node it is nominated to
    pdb_violations: int


def preempt_pod_group(
    members: Sequence[PodInfo],
    view: WhatIf,
    basis: Basis,
    minimum: int,
    scheduled: int,
    budgets: Sequence[DisruptionBudget] = (),
    together: Callable[[PodGroupKey], bool] = lambda key: False,
    profile: Profile = DEFAULT_PROFILE,
) -> PodGroupPreemption | NoPreemption | None:
    """None when no placed pod has a lower priority than the group (nothing to try).
    `together`: whether a group's pods are evicted or spared as one (`disruptionMode: all`)."""
    if any(m.preempt_never for m in members):
        return NoPreemption(NEVER)
    priority = min(m.priority for m in members)
    potential = sorted(
        (p for p in view.pods.values() if p.priority < priority and not p.deleting),
        key=importance,
    )
    if not potential:
        return None
    units = _units(potential, together)
    for unit in units:
        for pod in unit:
            view.set_aside(pod.uid)
    aside = list(units)
    try:
        if not _fits(members, view, basis, minimum, scheduled, profile).reached:
            return NoPreemption(NO_ROOM)
        violates_budget = {p.uid for p in split_violating(potential, budgets)[0]}
        violating = [u for u in units if any(p.uid in violates_budget for p in u)]
        keeping = [u for u in units if not any(p.uid in violates_budget for p in u)]
        victims: list[PodInfo] = []
        violations = 0
        for group, violates in ((violating, True), (keeping, False)):
            for unit in group:
                for pod in unit:
                    view.put_back(pod)
                aside.remove(unit)
                if _fits(members, view, basis, minimum, scheduled, profile).reached:
                    continue  # spared
                for pod in unit:
                    view.set_aside(pod.uid)
                aside.append(unit)
                victims.extend(unit)
                violations += violates
        placed = _fits(members, view, basis, minimum, scheduled, profile).placed
        nodes = {pod.uid: decision.node for pod, decision in placed}
        return PodGroupPreemption(tuple(sorted(victims, key=importance)), nodes, violations)
    finally:
        for unit in aside:
            for pod in unit:
                view.put_back(pod)


def _fits(
    members: Sequence[PodInfo],
    view: WhatIf,
    basis: Basis,
    minimum: int,
    scheduled: int,
    profile: Profile,
) -> PodGroupDecision:
    return what_if_pod_group(members, view, basis, minimum, scheduled, profile)


Unit = tuple[PodInfo, ...]  # pods evicted or spared as one


def _units(potential: Sequence[PodInfo], together: Callable[[PodGroupKey], bool]) -> list[Unit]:
    """Potential victims, most important first, a `disruptionMode: all` group's pods as one
    (in the place of its most important pod)."""
    order: list[PodGroupKey | str] = []
    grouped: dict[PodGroupKey | str, list[PodInfo]] = {}
    for pod in potential:
        key: PodGroupKey | str = pod.group if pod.group and together(pod.group) else pod.uid
        if key not in grouped:
            grouped[key] = []
            order.append(key)
        grouped[key].append(pod)
    return [tuple(grouped[key]) for key in order]
