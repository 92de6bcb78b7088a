"""Pod groups as the two APIs declare them, parsed into one shape.

- Kubernetes' own (`scheduling.k8s.io/v1beta1` PodGroup, Kubernetes 1.37 with the
  GenericWorkload gate): a pod names its group in `spec.schedulingGroup.podGroupName`; the
  group's `spec.schedulingPolicy` is `basic: {}` or `gang: {minCount}`, its
  `spec.disruptionMode` `single` (the default) or `all`.
- scheduler-plugins' coscheduling (`scheduling.x-k8s.io/v1alpha1` PodGroup): a pod names its
  group in the label `scheduling.x-k8s.io/pod-group`; the group has `spec.minMember`,
  `spec.minResources` and `spec.scheduleTimeoutSeconds`.

Both look the group up in the pod's own namespace (docs/gangs.md has the upstream facts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ..resources import to_amount

UPSTREAM: Final = "scheduling.k8s.io"
COSCHEDULING: Final = "scheduling.x-k8s.io"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
Api = Literal["scheduling.k8s.io", "scheduling.x-k8s.io"]


@dataclass(frozen=True, slots=True)
class PodGroupKey:
    api: Api
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodGroup:
    key: PodGroupKey
    minimum: int  # members that must be placed together (1: each on its own, `basic`)
    gang: bool
    priority: int | None = None  # the upstream group's, from its priority class
    disrupt_all: bool = False  # upstream `disruptionMode: all`: evicted or spared as one
    timeout: float | None = None  # coscheduling's scheduleTimeoutSeconds
    min_resources: Mapping[str, int] = field(default_factory=dict)  # coscheduling's


def pod_group_of(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> PodGroupKey | None:
    """The group a pod names, if any (Kubernetes' field first: a pod naming both is read by
    kube-scheduler through that one)."""
    group = spec.get("schedulingGroup")
    if group:
        name = group.get("podGroupName") if isinstance(group, Mapping) else None
        if isinstance(name, str) and name:
            return PodGroupKey(UPSTREAM, meta.get("namespace") or "", name)
    labels = meta.get("labels")
    label = labels.get(COSCHEDULING_LABEL) if labels else None
    if isinstance(label, str) and label:
        return PodGroupKey(COSCHEDULING, meta.get("namespace") or "", label)
    return None


def parse_pod_group(api: Api, raw: Mapping[str, Any]) -> PodGroup:
    """A PodGroup object of either API; a malformed one raises ValueError naming the field."""
    meta = raw.get("metadata") or {}
    key = PodGroupKey(api, meta.get("namespace") or "", meta.get("name") or "")
    spec = raw.get("spec") or {}
    if api == UPSTREAM:
        return _upstream(key, spec)
    return _coscheduling(key, spec)


def _upstream(key: PodGroupKey, spec: Mapping[str, Any]) -> PodGroup:
    policy = spec.get("schedulingPolicy") or {}
    if "gang" in policy:
        minimum = _positive(
            (policy.get("gang") or {}).get("minCount"), "schedulingPolicy.gang.minCount"
        )
        gang = True
    elif "basic" in policy:
        minimum, gang = 1, False
    else:
        raise ValueError("spec.schedulingPolicy: one of basic and gang is required")
    priority = spec.get("priority")
    if priority is not None and not isinstance(priority, int):
        raise ValueError(f"spec.priority: {priority!r} is not an integer")
    mode = spec.get("disruptionMode") or {}
    return PodGroup(key, minimum, gang, priority, disrupt_all="all" in mode)


def _coscheduling(key: PodGroupKey, spec: Mapping[str, Any]) -> PodGroup:
    minimum = _positive(spec.get("minMember"), "minMember")
    timeout = spec.get("scheduleTimeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or timeout < 0):
        raise ValueError(f"spec.scheduleTimeoutSeconds: {timeout!r} is not a count of seconds")
    resources = spec.get("minResources") or {}
    if not isinstance(resources, Mapping):
        raise ValueError("spec.minResources: not a map of resource quantities")
    try:
        amounts = {name: to_amount(name, str(value)) for name, value in resources.items()}
    except ValueError as exc:
        raise ValueError(f"spec.minResources: {exc}") from None
    return PodGroup(key, minimum, True, timeout=float(timeout) if timeout else None,
                    min_resources=amounts)  # fmt: skip


def _positive(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"spec.{name}: {value!r} is not a count of at least 1")
    return value
