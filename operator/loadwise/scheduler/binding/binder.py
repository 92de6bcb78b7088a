"""Binder: the only writes loadwise makes for pods: Bindings, events, PodScheduled, and
preemption's (nominations, the victims' DisruptionTarget condition, their graceful delete).

Raw JSON through the Transport: the generated client's model handling costs more CPU than a
scheduling decision (and cannot deserialise the Binding reply, whose `target` comes back empty).
"""

from __future__ import annotations

import enum
import logging
import time
from typing import Any

from ...framework.types import PodInfo
from ...kube.times import stamp
from ...kube.transport import STRATEGIC_MERGE, Http
from ...logs import one_line

MERGE_PATCH = "application/merge-patch+json"

log = logging.getLogger(__name__)


class BindResult(enum.Enum):
    BOUND = "bound"
    GONE = "gone"  # 404: the pod was deleted meanwhile
    CONFLICT = "conflict"  # 409: already bound, or a newer pod took the name (UID mismatch)
    ERROR = "error"  # anything else: unreserve and retry after backoff


def binding_body(pod: PodInfo, node: str) -> dict[str, Any]:
    # metadata.uid is a precondition: a pod deleted and re-created under the same name is
    # never bound by a decision made for its predecessor.
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def event_body(
    pod: PodInfo,
    scheduler_name: str,
    event_type: str,
    reason: str,
    message: str,
    instance: str = "",
) -> dict[str, Any]:
    involved = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod.name,
        "namespace": pod.namespace,
        "uid": pod.uid,
    }
    action = "Binding" if reason == "Scheduled" else "Scheduling"
    return object_event(involved, scheduler_name, event_type, reason, message, action, instance)


def object_event(
    involved: dict[str, str],
    component: str,
    event_type: str,
    reason: str,
    message: str,
    action: str = "Scheduling",
    instance: str = "",
) -> dict[str, Any]:
    """An Event about any object. A cluster-scoped object's event lives in `default` and names
    no namespace in involvedObject, which is where `kubectl describe` looks for it."""
    now = stamp()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{involved['name']}.{time.time_ns():x}",
            "namespace": involved.get("namespace") or "default",
        },
        "involvedObject": involved,
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance or component,
        "action": action,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class Binder:
    def __init__(self, transport: Http, scheduler_name: str, instance: str = "") -> None:
        self.transport = transport
        self.scheduler_name = scheduler_name
        self.instance = instance  # this replica: events' reportingInstance says which one wrote

    async def bind(self, pod: PodInfo, node: str) -> BindResult:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        try:
            status, data = await self.transport.request("POST", path, binding_body(pod, node))
        except Exception as exc:  # network errors, timeouts: retry later, never lose the pod
            log.warning("bind %s -> %s failed: %r", pod.key, node, exc)
            return BindResult.ERROR
        if 200 <= status < 300:
            return BindResult.BOUND
        if status == 404:
            return BindResult.GONE
        if status == 409:
            return BindResult.CONFLICT
        log.warning("bind %s -> %s failed with HTTP %s: %s", pod.key, node, status, data[:300])
        return BindResult.ERROR

    async def event(self, pod: PodInfo, event_type: str, reason: str, message: str) -> bool:
        """Best effort: an event that cannot be written never fails scheduling. False when a
        retry may write it: a retry must post the same body (`pod_event`, then `post_event`)."""
        return await self.post_event(self.pod_event(pod, event_type, reason, message))

    def pod_event(self, pod: PodInfo, event_type: str, reason: str, message: str) -> dict[str, Any]:
        """An event about a pod, named once: every try of its write posts this same body."""
        return event_body(pod, self.scheduler_name, event_type, reason, message, self.instance)

    def cluster_event(
        self, involved: dict[str, str], event_type: str, reason: str, message: str
    ) -> dict[str, Any]:
        """An event about any object, named once (see `pod_event`)."""
        return object_event(
            involved, self.scheduler_name, event_type, reason, message, instance=self.instance
        )

    async def post_event(self, body: dict[str, Any]) -> bool:
        """POST an event; True once written (or refused for good: 4xx), False when worth
        retrying. A try whose answer was lost may have been written: its retry, under the same
        name, is answered 409 AlreadyExists, which is the event written (client-go's
        broadcaster names an event once and reads that answer the same way)."""
        path = f"/api/v1/namespaces/{body['metadata']['namespace']}/events"
        try:
            status, data = await self.transport.request("POST", path, body)
        except Exception as exc:
            log.warning("writing event failed: %s", one_line(exc))
            return False
        if status == 409:
            log.debug("event %s was written by an earlier try", body["metadata"]["name"])
            return True
        if status >= 300 and status != 404:
            log.warning("writing event failed: HTTP %s %s", status, data[:300])
        return status < 500 and status != 429

    async def mark_unschedulable(
        self, pod: PodInfo, message: str, nominated_node: str | None = None
    ) -> None:
        """PodScheduled=False/Unschedulable: what cluster-autoscaler and `kubectl describe` read;
        with `nominated_node`, the node preemption is making room on (status.nominatedNodeName,
        written with the condition as kube-scheduler writes it)."""
        body: dict[str, Any] = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message[:1024],
                        "lastTransitionTime": stamp(),
                    }
                ]
            }
        }
        if nominated_node is not None:
            body["status"]["nominatedNodeName"] = nominated_node
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        await self._best_effort("status", "PATCH", path, body)

    async def clear_nomination(self, pod: PodInfo) -> None:
        """A lower-priority pod loses its nominated node to a preemptor (kube-scheduler's
        clearNominatedNodeName)."""
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        body = {"status": {"nominatedNodeName": None}}
        await self._best_effort("nomination", "PATCH", path, body)

    async def preempt_victim(self, victim: PodInfo, preemptor: PodInfo, node: str) -> bool:
        """kube-scheduler's PreemptPod: the DisruptionTarget condition, then a plain graceful
        DELETE (not the Eviction API: budgets were weighed when choosing), then a `Preempted`
        event. True when the victim is going (or already gone); False when a write failed."""
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": f"{self.scheduler_name}: preempting to accommodate a higher priority pod",
            "lastTransitionTime": stamp(),
        }
        base = f"/api/v1/namespaces/{victim.namespace}/pods/{victim.name}"
        delete = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": victim.uid}}
        try:
            status, data = await self.transport.request(
                "PATCH",
                f"{base}/status",
                {"status": {"conditions": [condition]}},
                content_type=STRATEGIC_MERGE,
            )
            if status == 404:
                return True
            if status < 300:
                status, data = await self.transport.request("DELETE", base, delete)
        except Exception as exc:
            log.warning("preempting %s failed: %r", victim.key, exc)
            return False
        if status == 404 or status == 409:  # gone, or a new pod under that name: not ours
            return True
        if status >= 300:
            log.warning("preempting %s failed: HTTP %s %s", victim.key, status, data[:300])
            return False
        await self.event(
            victim, "Normal", "Preempted", f"Preempted by pod {preemptor.uid} on node {node}"
        )
        return True

    async def object_event(
        self, involved: dict[str, str], event_type: str, reason: str, message: str
    ) -> bool:
        """One try of a new event; True once written (or refused for good: 404, 4xx), False
        when worth retrying, with the same body (`cluster_event`, then `post_event`)."""
        return await self.post_event(self.cluster_event(involved, event_type, reason, message))

    async def patch_merge(self, what: str, path: str, body: dict[str, Any]) -> bool:
        """A JSON merge patch (lists replaced whole), best effort as `_best_effort`."""
        return await self._best_effort(what, "PATCH", path, body, MERGE_PATCH)

    async def _best_effort(
        self,
        what: str,
        method: str,
        path: str,
        body: dict[str, Any],
        content_type: str = STRATEGIC_MERGE,
    ) -> bool:
        """Never raises; False when the write failed in a way a retry may fix (network, 5xx,
        429: the API server's priority and fairness turning it away)."""
        try:
            status, data = await self.transport.request(
                method, path, body, content_type=content_type if method == "PATCH" else None
            )
        except Exception as exc:
            log.warning("writing %s failed: %s", what, one_line(exc))
            return False
        if status >= 300 and status != 404:
            log.warning("writing %s failed: HTTP %s %s", what, status, data[:300])
        return status < 500 and status != 429
