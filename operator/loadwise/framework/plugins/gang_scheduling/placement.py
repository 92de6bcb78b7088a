"""A group's decision: its members placed one after another against one view, each placed
member held (as placed now, so its estimate weighs on its node's load) before the next is
tried, as kube-scheduler's pod-group cycle assumes each member in one snapshot. Every member
goes through the same cycle as any pod (filters, the load score, the hot rule), so the group as
a whole stays off hot nodes and spreads as its policy says.

The group is placed if the members already scheduled and those placed here reach its minimum
and at least one was placed here; the try stops as soon as the rest cannot reach it. The
scheduler holds members by assuming them (with their volumes), a dry run in a view.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace

from ...context import Basis
from ...cycle import Decision, Unschedulable, schedule_one
from ...profile import DEFAULT_PROFILE, Profile
from ...types import PodInfo
from ...view import WhatIf


@dataclass(frozen=True, slots=True)
class PodGroupDecision:
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


# Decide one member and, when it fits, hold it on its node so the next member counts it (the
# scheduler assumes it for real; a dry run puts it back into its view).
Attempt = Callable[[PodInfo], "Decision | Unschedulable"]


Steps = Generator[PodInfo, "Decision | Unschedulable", PodGroupDecision]


def pod_group_steps(members: Sequence[PodInfo], minimum: int, scheduled: int = 0) -> Steps:
    """The group's decision as steps: yields each member to try, in `member_order`, and is
    sent its result; returns the decision. `scheduled`: members already assumed or bound (they
    count toward `minimum`). One algorithm for the synchronous driver below and for the
    scheduler's, which awaits each member's preparation (its devices) before trying it."""
    ordered = sorted(members, key=member_order)
    placed: list[tuple[PodInfo, Decision]] = []
    refused: list[tuple[PodInfo, Unschedulable]] = []
    for index, pod in enumerate(ordered):
        if scheduled + len(placed) + len(ordered) - index < minimum:
            untried = tuple(ordered[index:])
            return PodGroupDecision(tuple(placed), tuple(refused), untried, minimum, scheduled)
        result = yield pod
        if isinstance(result, Decision):
            placed.append((pod, result))
        else:
            refused.append((pod, result))
    return PodGroupDecision(tuple(placed), tuple(refused), (), minimum, scheduled)


def place_pod_group(
    members: Sequence[PodInfo], minimum: int, attempt: Attempt, scheduled: int = 0
) -> PodGroupDecision:
    """Each member in `member_order` through `attempt` (pod_group_steps). The caller undoes
    what `attempt` held when the decision is not `reached`."""
    steps = pod_group_steps(members, minimum, scheduled)
    try:
        pod = next(steps)
        while True:
            pod = steps.send(attempt(pod))
    except StopIteration as done:
        decision: PodGroupDecision = done.value
        return decision


def what_if_pod_group(
    members: Sequence[PodInfo],
    view: WhatIf,
    basis: Basis,
    minimum: int,
    scheduled: int = 0,
    profile: Profile = DEFAULT_PROFILE,
) -> PodGroupDecision:
    """The group's decision as a dry run (explain): `view` is edited and restored."""
    held: list[str] = []

    def attempt(pod: PodInfo) -> Decision | Unschedulable:
        result = schedule_one(pod, view, basis, profile)
        if isinstance(result, Decision):
            view.put_back(replace(pod, node_name=result.node, placed_at=basis.now), True)
            held.append(pod.uid)
        return result

    try:
        return place_pod_group(members, minimum, attempt, scheduled)
    finally:
        for uid in held:
            view.set_aside(uid)
