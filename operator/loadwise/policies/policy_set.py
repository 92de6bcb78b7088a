"""The SchedulingPolicies in force: parsed, ordered by precedence, chosen for a pod."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from typing import Any

from .policy import DEFAULT_POLICY, Policy, parse_spec


class PolicySet:
    """The valid policies, ordered by precedence, and the choice for a pod. `on_change` is
    called after every change (the scheduler requeues waiting pods, the usage sources resize
    their history)."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self._ordered: list[Policy] = []
        self.on_change = on_change

    def __len__(self) -> int:
        return len(self._ordered)

    def apply(self, name: str, spec: Mapping[str, Any] | None) -> Policy:
        """Validate and install a policy's spec; raises ValueError (and drops any previous
        version, so an invalid edit does not leave the old policy in force)."""
        try:
            policy = Policy(name, parse_spec(spec))
        except ValueError:
            self.remove(name)
            raise
        self.upsert(policy)
        return policy

    def upsert(self, policy: Policy) -> None:
        self._ordered = [p for p in self._ordered if p.name != policy.name]
        bisect.insort(self._ordered, policy, key=lambda p: p.sort_key)
        self.on_change()

    def remove(self, name: str) -> None:
        kept = [p for p in self._ordered if p.name != name]
        if len(kept) != len(self._ordered):
            self._ordered = kept
            self.on_change()

    def names(self) -> list[str]:
        return [p.name for p in self._ordered]

    def policies(self) -> list[Policy]:
        return list(self._ordered)

    def for_pod(
        self,
        labels: Mapping[str, str],
        namespace_labels: Mapping[str, str] | None = None,
        scheduler_name: str | None = None,
    ) -> Policy:
        """Precedence order: the first policy whose scheduler name, namespace selector and pod
        selector all match; the built-in default when none does."""
        for policy in self._ordered:
            spec = policy.spec
            if spec.scheduler_name is not None and spec.scheduler_name != scheduler_name:
                continue
            if not spec.namespace_selector.matches(namespace_labels or {}):
                continue
            if spec.pod_selector.matches(labels):
                return policy
        return DEFAULT_POLICY
