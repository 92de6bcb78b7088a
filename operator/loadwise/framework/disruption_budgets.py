"""PodDisruptionBudgets as preemption reads them: which victims would violate one.

kube-scheduler prefers victims whose eviction keeps every budget (`filterPodsWithPDBViolation`
in its DefaultPreemption): walking the victims of a node in importance order, each matching
budget's `status.disruptionsAllowed` is spent, and a victim that overdraws one is "violating".
Budgets are only read (list and watch); their status is the disruption controller's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .selectors import Selector, parse_label_selector, selects
from .types import PodInfo


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    selector: Selector | None  # None: selects nothing (as an empty or unparsable one does)
    allowed: int  # status.disruptionsAllowed
    disrupted: frozenset[str]  # status.disruptedPods: names already counted as disrupted


def parse_budget(raw: Mapping[str, Any]) -> DisruptionBudget:
    """Never raises: a budget whose selector cannot be read selects nothing, as kube-scheduler
    skips a selector it cannot convert."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    try:
        selector = parse_label_selector(spec.get("selector"))
        if selector is not None and not (selector.match_labels or selector.expressions):
            selector = None  # kube-scheduler: an empty selector protects no pod here
    except (ValueError, TypeError, AttributeError, KeyError):
        selector = None
    try:
        allowed = int(status.get("disruptionsAllowed") or 0)
    except (TypeError, ValueError):
        allowed = 0
    disrupted = status.get("disruptedPods")
    return DisruptionBudget(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        selector=selector,
        allowed=allowed,
        disrupted=frozenset(disrupted) if isinstance(disrupted, Mapping) else frozenset(),
    )


def split_violating(
    pods: Sequence[PodInfo], budgets: Iterable[DisruptionBudget]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """(violating, not violating), each in the order given (most important first)."""
    budgets = list(budgets)
    left = [b.allowed for b in budgets]
    violating: list[PodInfo] = []
    keeping: list[PodInfo] = []
    for pod in pods:
        violates = False
        if pod.labels:
            for i, budget in enumerate(budgets):
                if budget.namespace != pod.namespace or budget.selector is None:
                    continue
                if not selects(budget.selector, pod.labels) or pod.name in budget.disrupted:
                    continue
                left[i] -= 1
                if left[i] < 0:
                    violates = True
        (violating if violates else keeping).append(pod)
    return violating, keeping
