"""A group's decision: its members placed one after another against one view, each placed
member counted (as placed now, so its estimate weighs on its node's load) before the next is
tried, as kube-scheduler's pod-group cycle assumes each member in one snapshot. Every member
goes through the same cycle as any pod (filters, the load score, the hot rule), so the group as
a whole stays off hot nodes and spreads as its policy says.

The group is placed if the members already scheduled and those placed here reach its minimum
and at least one was placed here; the try stops as soon as the rest cannot reach it. Pure: the
view is edited and restored before returning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .context import Basis
from .cycle import Decision, Unschedulable, schedule_one
from .profile import DEFAULT_PROFILE, Profile
from .types import PodInfo
from .view import WhatIf


@dataclass(frozen=True, slots=True)
class GroupDecision:
    placed: tuple[tuple[PodInfo, Decision], ...]  # in the order tried
    refused: tuple[tuple[PodInfo, Unschedulable], ...]  # members tried that fit nowhere
    untried: tuple[PodInfo, ...]  # left when the minimum could no longer be reached
    minimum: int
    scheduled: int  # members already scheduled before this decision

    @property
    def reached(self) -> bool:
        return bool(self.placed) and self.scheduled + len(self.placed) >= self.minimum

    @property
    def message(self) -> str:
        """kube-scheduler's words for a group that is not placed ("" when it is)."""
        if self.reached:
            return ""
        if self.scheduled + len(self.placed) >= self.minimum:
            return "pod group is unschedulable"  # nothing placed here: only extras were left
        remaining = len(self.untried)
        return (
            f"pod group is unschedulable, minCount ({self.minimum}) cannot be satisfied: "
            f"{self.scheduled + len(self.placed)} scheduled, {remaining} remaining"
        )


def member_order(pod: PodInfo) -> tuple[int, float, str]:
    """kube-scheduler's order of a group's members: priority, then age, then name."""
    return -pod.priority, pod.created, pod.name


def place_group(
    members: Sequence[PodInfo],
    view: WhatIf,
    basis: Basis,
    minimum: int,
    scheduled: int = 0,
    profile: Profile = DEFAULT_PROFILE,
) -> GroupDecision:
    """Each member in `member_order` through the full cycle, the ones placed counted on their
    nodes for the next; `scheduled`: members already assumed or bound (they count toward
    `minimum` and are in `view` already)."""
    ordered = sorted(members, key=member_order)
    placed: list[tuple[PodInfo, Decision]] = []
    refused: list[tuple[PodInfo, Unschedulable]] = []
    try:
        for index, pod in enumerate(ordered):
            left = len(ordered) - index
            if scheduled + len(placed) + left < minimum:
                return GroupDecision(
                    tuple(placed), tuple(refused), tuple(ordered[index:]), minimum, scheduled
                )
            result = schedule_one(pod, view, basis, profile)
            if isinstance(result, Decision):
                view.put_back(replace(pod, node_name=result.node, placed_at=basis.now), True)
                placed.append((pod, result))
            else:
                refused.append((pod, result))
        return GroupDecision(tuple(placed), tuple(refused), (), minimum, scheduled)
    finally:
        for pod, _ in placed:
            view.set_aside(pod.uid)
