"""DefaultPreemption, kube-scheduler's PostFilter: when no node can take a pod, find the node
where evicting lower-priority pods makes room, evicting as few and as unimportant as possible.

As kube-scheduler v1.36 does it (`defaultpreemption/default_preemption.go`,
`preemption/preemption.go`):
- only a pod that may preempt (not `preemptionPolicy: Never`, and not while a victim of its
  last preemption is still terminating on its nominated node);
- only nodes refused for reasons removing pods can fix (each filter says which: `unresolvable`);
- per node, a dry run: set every lower-priority pod aside, re-run the filters (spread and
  affinity counts follow, nominated pods of equal or higher priority count), then reprieve the
  victims, those whose eviction would violate a PodDisruptionBudget first, most important
  first, keeping each one whose return still lets the pod fit;
- the node with the fewest budget violations, then the lowest most important victim, the
  smallest priority sum, the fewest victims, the latest start of the most important victims.
Where kube-scheduler then takes whichever tied node came first, loadwise takes the coolest by
measured load (`load_of`): our one addition.

Pure: the dry run edits the cluster view (WhatIf) and restores it before returning.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from .context import CycleContext
from .cycle import refusal, refusal_with_nominated
from .disruption_budgets import DisruptionBudget, split_violating
from .plugin import FilterPlugin, NoPreemption, Preemption
from .types import NodeInfo, PodInfo
from .view import WhatIf

# kube-scheduler's DefaultPreemptionArgs defaults: examine at least this share of the nodes
# that could help, and at least this many, before choosing.
MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100

NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."


@dataclass(frozen=True, slots=True)
class Candidate:
    node: str
    victims: tuple[PodInfo, ...]  # most important first
    pdb_violations: int


def start_of(pod: PodInfo) -> float:
    """status.startTime; kube-scheduler takes "now" for a pod not started, later than all."""
    if not pod.start_time:
        return math.inf
    try:
        return datetime.fromisoformat(pod.start_time.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return math.inf


def importance(pod: PodInfo) -> tuple[int, float, str]:
    """Sort key, most important first: higher priority, then the earlier start."""
    return (-pod.priority, start_of(pod), pod.uid)


def eligibility(pod: PodInfo, state: WhatIf, nominated_unresolvable: bool) -> str | None:
    """Why the pod may not preempt now, or None. `nominated_unresolvable`: its nominated node
    (if any) now refuses it for a reason preemption cannot fix, or is gone."""
    if pod.preempt_never:
        return NEVER
    if pod.nominated_node and not nominated_unresolvable:
        for placed in state.pods_on(pod.nominated_node):
            if placed.priority < pod.priority and placed.deleting and placed.preempted:
                return TERMINATING
    return None


def select_victims(
    pod: PodInfo,
    node: NodeInfo,
    state: WhatIf,
    filters: Sequence[FilterPlugin],
    budgets: Sequence[DisruptionBudget],
    held: Sequence[PodInfo] = (),
) -> Candidate | list[str]:
    """The fewest, least important victims on `node` that let the pod fit, or why none do."""
    potential = sorted(
        (p for p in state.pods_on(node.name) if p.priority < pod.priority), key=importance
    )
    if not potential:
        return [NO_VICTIMS]
    aside = {p.uid: p for p in potential}
    for victim in potential:
        state.set_aside(victim.uid)
    try:
        failed = refusal_with_nominated(
            CycleContext(pod, state), node, state, filters, held, potential
        )
        if failed is not None:
            return failed[1]
        violating, keeping = split_violating(potential, budgets)
        victims: list[PodInfo] = []
        violations = 0
        for group, violates in ((violating, True), (keeping, False)):
            for victim in group:
                state.put_back(victim)
                del aside[victim.uid]
                removed = list(aside.values())
                if (
                    refusal_with_nominated(
                        CycleContext(pod, state), node, state, filters, held, removed
                    )
                    is None
                ):
                    continue  # reprieved
                state.set_aside(victim.uid)
                aside[victim.uid] = victim
                victims.append(victim)
                violations += violates
        if violating and keeping:
            victims.sort(key=importance)
        return Candidate(node.name, tuple(victims), violations)
    finally:
        for victim in aside.values():
            state.put_back(victim)


def candidate_count(potential: int) -> int:
    """kube-scheduler's calculateNumCandidates."""
    wanted = potential * MIN_CANDIDATE_NODES_PERCENTAGE // 100
    return min(max(wanted, MIN_CANDIDATE_NODES_ABSOLUTE), potential)


def _earliest_top_start(candidate: Candidate) -> float:
    """GetEarliestPodStartTime: the earliest start among the highest-priority victims."""
    top = max(v.priority for v in candidate.victims)
    return min(start_of(v) for v in candidate.victims if v.priority == top)


# pickOneNodeForPreemption's order; each is "higher is better".
_RANKS: tuple[Callable[[Candidate], float], ...] = (
    lambda c: -c.pdb_violations,
    lambda c: -c.victims[0].priority,
    lambda c: -sum(v.priority + 2**31 for v in c.victims),  # more victims weigh more
    lambda c: -len(c.victims),
    _earliest_top_start,
)


def best_candidates(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Those kube-scheduler's ranking cannot tell apart (it takes the first of them)."""
    tied = list(candidates)
    for rank in _RANKS:
        if len(tied) <= 1:
            break
        top = max(rank(c) for c in tied)
        tied = [c for c in tied if rank(c) == top]
    return tied


def preempt(
    pod: PodInfo,
    state: WhatIf,
    filters: Sequence[FilterPlugin],
    budgets: Sequence[DisruptionBudget],
    held: Mapping[str, Sequence[PodInfo]],
    rng: random.Random,
    load_of: Callable[[str], float] | None = None,
) -> Preemption | NoPreemption:
    """The PostFilter for a pod no node can take. `held`: per node, the pods nominated there
    that this pod must leave room for (equal or higher priority, not itself). `load_of`: a
    node's measured load under the pod's policy, to choose among nodes kube-scheduler cannot
    tell apart (None: at random)."""
    nodes = list(state.nodes.values())
    total = len(nodes)
    verdicts: dict[str, tuple[FilterPlugin, list[str]] | None] = {}
    ctx = CycleContext(pod, state)
    for node in nodes:
        verdicts[node.name] = refusal(ctx, node, filters)
    nominated = state.nodes.get(pod.nominated_node) if pod.nominated_node else None
    nominated_verdict = verdicts.get(pod.nominated_node) if nominated is not None else None
    nominated_unresolvable = nominated is None or (
        nominated_verdict is not None
        and nominated_verdict[0].unresolvable(ctx, nominated, nominated_verdict[1])
    )
    why_not = eligibility(pod, state, nominated_unresolvable)
    if why_not is not None:
        return NoPreemption(why_not)
    statuses: Counter[str] = Counter()
    if any(f.prefilter(ctx) is not None for f in filters):  # PreFilter: every node unresolvable
        return NoPreemption(_summary(total, Counter({NOT_HELPFUL: total})))
    potential = []
    for node in nodes:
        verdict = verdicts[node.name]
        if verdict is not None and verdict[0].unresolvable(ctx, node, verdict[1]):
            statuses[NOT_HELPFUL] += 1
        else:
            potential.append(node)
    if not potential:
        return NoPreemption(_summary(total, statuses))
    wanted = candidate_count(len(potential))
    offset = rng.randrange(len(potential))
    found: list[Candidate] = []
    keeping_budgets = 0
    for i in range(len(potential)):
        node = potential[(offset + i) % len(potential)]
        result = select_victims(pod, node, state, filters, budgets, held.get(node.name, ()))
        if isinstance(result, list):
            statuses.update(result)
            continue
        if not result.victims:  # it fits without evicting anyone: not a preemption
            statuses[NO_VICTIMS] += 1
            continue
        found.append(result)
        keeping_budgets += result.pdb_violations == 0
        if keeping_budgets and len(found) >= wanted:
            break
    if not found:
        return NoPreemption(_summary(total, statuses))
    tied = best_candidates(found)
    if len(tied) > 1 and load_of is not None:
        loads = {c.node: load_of(c.node) for c in tied}  # each node scored once
        coolest = min(loads.values())
        tied = [c for c in tied if loads[c.node] == coolest]
    chosen = tied[0] if len(tied) == 1 else rng.choice(tied)
    return Preemption(chosen.node, chosen.victims, chosen.pdb_violations, len(found))


def _summary(total: int, statuses: Counter[str]) -> str:
    parts = sorted(f"{count} {reason}" for reason, count in statuses.items() if count)
    return f"0/{total} nodes are available: {', '.join(parts)}."
