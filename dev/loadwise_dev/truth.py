"""The API server's truth about a scheduler's work, for fault benchmarks and tests.

Read from plain lists of pods, nodes and events (as the API returns them), independent of the
operator's own state: which pods are bound, which nodes hold more than their allocatable, how
much CPU bound pods request, which pending pods would fit somewhere by requests (lost ones), and
any evidence of a pod bound twice.

The fit check here is deliberately simple and stated: node Ready and schedulable (or the cordon
tolerated), NoSchedule/NoExecute taints tolerated, nodeSelector, required node affinity, every
requested resource plus a pod slot within what is left. Pods that use what it does not evaluate
(inter-pod affinity, topology spread, host ports, volumes claims, scheduling gates, resource
claims) are "unjudged", never counted as lost.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loadwise.resources import CPU, MEMORY, PODS, parse_resource_list, pod_requests

SCHEDULED_TO = re.compile(r"(?:Successfully )?assigned (\S+)/(\S+) to (\S+?)[;,]?(?:\s|$)")
TERMINAL = ("Succeeded", "Failed")


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL


def requests_of(pod: Mapping[str, Any]) -> dict[str, int]:
    try:
        return dict(pod_requests(spec(pod)).amounts)
    except ValueError:
        return {}


def allocatable_of(node: Mapping[str, Any]) -> dict[str, int] | None:
    try:
        raw = (node.get("status") or {}).get("allocatable")
        return parse_resource_list(raw) if raw else None
    except ValueError:
        return None


def is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# --- node-local fit -----------------------------------------------------------------------------
def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        operator = t.get("operator") or "Equal"
        key = t.get("key") or ""
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _requirement(labels: Mapping[str, str], req: Mapping[str, Any]) -> bool:
    key, operator = req.get("key", ""), req.get("operator", "")
    values = list(req.get("values") or ())
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _term(node: Mapping[str, Any], term: Mapping[str, Any]) -> bool:
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return False  # an empty term matches nothing
    labels = meta(node).get("labels") or {}
    node_fields = {"metadata.name": meta(node).get("name", "")}
    return all(_requirement(labels, r) for r in expressions) and all(
        _requirement(node_fields, r) for r in fields
    )


def node_allows(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Every node-local check but resources."""
    pod_spec, node_spec = spec(pod), spec(node)
    tolerations = pod_spec.get("tolerations") or ()
    if not is_ready(node):
        return False
    if node_spec.get("unschedulable") and not tolerates(
        tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ):
        return False
    for taint in node_spec.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return False
    labels = meta(node).get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is not None:
        terms = required.get("nodeSelectorTerms") or ()
        if not any(_term(node, t) for t in terms):
            return False
    return True


def unjudged(pod: Mapping[str, Any]) -> str | None:
    """Why this checker cannot judge the pod's feasibility, or None."""
    pod_spec = spec(pod)
    affinity = pod_spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        if (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
            return "inter-pod affinity"
    if any(
        c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        for c in pod_spec.get("topologySpreadConstraints") or ()
    ):
        return "topology spread"
    if pod_spec.get("schedulingGates"):
        return "scheduling gates"
    if pod_spec.get("resourceClaims"):
        return "resource claims"
    for volume in pod_spec.get("volumes") or ():
        if {"persistentVolumeClaim", "ephemeral", "csi"} & set(volume):
            return "volumes"
    for container in [*pod_spec.get("containers", ()), *pod_spec.get("initContainers", ())]:
        if any(p.get("hostPort") for p in container.get("ports") or ()):
            return "host ports"
    return None


# --- the snapshot ------------------------------------------------------------------------------
@dataclass
class Truth:
    pods: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    events: list[dict[str, Any]]
    scheduler_name: str = "loadwise-scheduler"
    node_by_name: dict[str, dict[str, Any]] = field(init=False)
    used: dict[str, dict[str, int]] = field(init=False)  # node -> requested (+ "pods")

    def __post_init__(self) -> None:
        self.node_by_name = {meta(n)["name"]: n for n in self.nodes}
        self.used = defaultdict(dict)
        for pod in self.bound_live():
            node = spec(pod)["nodeName"]
            into = self.used[node]
            for name, amount in requests_of(pod).items():
                into[name] = into.get(name, 0) + amount
            into[PODS] = into.get(PODS, 0) + 1

    def ours(self, pod: Mapping[str, Any]) -> bool:
        return spec(pod).get("schedulerName") == self.scheduler_name

    def bound_live(self) -> list[dict[str, Any]]:
        """Bound, not terminal pods of any scheduler: what holds resources on a node."""
        return [p for p in self.pods if spec(p).get("nodeName") and not is_terminal(p)]

    def bound_ours(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if self.ours(p) and spec(p).get("nodeName")]

    def pending_ours(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods
            if self.ours(p)
            and not spec(p).get("nodeName")
            and not meta(p).get("deletionTimestamp")
            and not is_terminal(p)
        ]

    def overcommitted(self) -> dict[str, list[str]]:
        """node -> the resources whose bound requests exceed its allocatable."""
        result: dict[str, list[str]] = {}
        for name, used in self.used.items():
            node = self.node_by_name.get(name)
            if node is None:
                continue
            allocatable = allocatable_of(node) or {}
            over = [
                resource
                for resource, amount in used.items()
                if amount > allocatable.get(resource, 0)
                and (resource in (CPU, MEMORY, PODS) or amount > 0)
            ]
            if over:
                result[name] = sorted(over)
        return result

    def requested_cpu(self, only_existing_nodes: bool = True) -> int:
        """Millicores requested by bound live pods (on nodes that exist, by default)."""
        return sum(
            used.get(CPU, 0)
            for node, used in self.used.items()
            if not only_existing_nodes or node in self.node_by_name
        )

    def fits_somewhere(self, pod: Mapping[str, Any]) -> str | None:
        """The first node this pending pod fits on by requests, or None."""
        wanted = requests_of(pod)
        for name, node in self.node_by_name.items():
            allocatable = allocatable_of(node)
            if allocatable is None or not node_allows(pod, node):
                continue
            used = self.used.get(name, {})
            if used.get(PODS, 0) + 1 > allocatable.get(PODS, 0):
                continue
            if all(
                used.get(resource, 0) + amount <= allocatable.get(resource, 0)
                for resource, amount in wanted.items()
                if amount > 0
            ):
                return name
        return None

    def lost(self) -> list[tuple[str, str]]:
        """(namespace/name, a node it fits on) of pending pods of ours that would fit."""
        result = []
        for pod in self.pending_ours():
            if unjudged(pod) is not None:
                continue
            node = self.fits_somewhere(pod)
            if node is not None:
                result.append((f"{meta(pod).get('namespace')}/{meta(pod)['name']}", node))
        return result

    def scheduled_events(self) -> dict[str, list[dict[str, Any]]]:
        """pod uid -> its Scheduled events from our scheduler."""
        found: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for event in self.events:
            involved = event.get("involvedObject") or {}
            if event.get("reason") != "Scheduled" or involved.get("kind") != "Pod":
                continue
            source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
            if source and source != self.scheduler_name:
                continue
            found[involved.get("uid", "")].append(event)
        return found

    def bound_twice(self) -> list[dict[str, Any]]:
        """Evidence of a pod bound twice: more than one Scheduled event for one pod (by UID),
        or one naming a node other than the pod's."""
        pod_by_uid = {meta(p).get("uid"): p for p in self.pods}
        evidence = []
        for uid, events in self.scheduled_events().items():
            count = sum(int(e.get("count") or 1) for e in events)
            targets = set()
            for e in events:
                match = SCHEDULED_TO.search(e.get("message") or "")
                if match:
                    targets.add(match.group(3))
            pod = pod_by_uid.get(uid)
            actual = spec(pod).get("nodeName") if pod is not None else None
            wrong = bool(actual and targets - {actual})
            if count > 1 or len(targets) > 1 or wrong:
                evidence.append(
                    {
                        "pod": f"{(events[0].get('involvedObject') or {}).get('namespace')}/"
                        f"{(events[0].get('involvedObject') or {}).get('name')}",
                        "uid": uid,
                        "events": count,
                        "targets": sorted(targets),
                        "node": actual,
                        "instances": sorted(
                            {str(e.get("reportingInstance") or "") for e in events}
                        ),
                    }
                )
        return evidence

    def warnings(self, since: float | None = None) -> list[dict[str, Any]]:
        """Warning events other than FailedScheduling (degradations), newer than `since`
        (a Unix time; events carry second precision)."""
        result = []
        for event in self.events:
            if event.get("type") != "Warning" or event.get("reason") == "FailedScheduling":
                continue
            if since is not None and event_time(event) < since - 1:
                continue
            result.append(event)
        return result


def event_time(event: Mapping[str, Any]) -> float:
    """An event's last time as Unix seconds (0 when it has none)."""
    from datetime import datetime

    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        value = event.get(key) or (event.get("series") or {}).get("lastObservedTime")
        if value:
            text = str(value).replace("Z", "+00:00")
            try:
                return datetime.fromisoformat(text).timestamp()
            except ValueError:
                continue
    created = meta(event).get("creationTimestamp")
    if created:
        return datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp()
    return 0.0
