"""Binder: the only writes loadwise makes for a pod: its Binding, events, and PodScheduled.

kubernetes-asyncio cannot deserialise the Binding reply (its `target` comes back empty), so every
call here uses `_preload_content=False` and reads the HTTP status itself.
"""

from __future__ import annotations

import enum
import logging
import time
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from .state import PodInfo
from .status import stamp

log = logging.getLogger(__name__)

# (connect, total) seconds. kubernetes-asyncio otherwise sends requests with no timeout at all,
# and a hung call would hold a bind slot and its reservation forever.
REQUEST_TIMEOUT = (5, 30)


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
    pod: PodInfo, scheduler_name: str, event_type: str, reason: str, message: str
) -> dict[str, Any]:
    now = stamp()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{pod.name}.{time.time_ns():x}",
            "namespace": pod.namespace,
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
        },
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": scheduler_name},
        "reportingComponent": scheduler_name,
        "reportingInstance": scheduler_name,
        "action": "Binding" if reason == "Scheduled" else "Scheduling",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class Binder:
    def __init__(self, api: ApiClient, scheduler_name: str) -> None:
        # Any: we pass plain dicts and read raw responses (_preload_content=False), which the
        # generated signatures do not describe.
        self.core: Any = CoreV1Api(api)
        self.scheduler_name = scheduler_name

    async def bind(self, pod: PodInfo, node: str) -> BindResult:
        try:
            resp = await self.core.create_namespaced_pod_binding(
                pod.name,
                pod.namespace,
                binding_body(pod, node),
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            try:
                status = resp.status
                text = "" if 200 <= status < 300 else (await resp.text())[:300]
            finally:
                resp.release()
        except ApiException as exc:
            return self._classify(exc.status, exc.reason or "")
        except Exception as exc:  # network errors, timeouts: retry later, never lose the pod
            log.warning("bind %s -> %s failed: %r", pod.key, node, exc)
            return BindResult.ERROR
        return self._classify(status, text)

    def _classify(self, status: int, detail: str) -> BindResult:
        if 200 <= status < 300:
            return BindResult.BOUND
        if status == 404:
            return BindResult.GONE
        if status == 409:
            return BindResult.CONFLICT
        log.warning("bind failed with HTTP %s: %s", status, detail)
        return BindResult.ERROR

    async def event(self, pod: PodInfo, event_type: str, reason: str, message: str) -> None:
        """Best effort: an event that cannot be written never fails scheduling."""
        body = event_body(pod, self.scheduler_name, event_type, reason, message)
        await self._best_effort(
            "event",
            self.core.create_namespaced_event(
                pod.namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            ),
        )

    async def mark_unschedulable(self, pod: PodInfo, message: str) -> None:
        """PodScheduled=False/Unschedulable: what cluster-autoscaler and `kubectl describe` read."""
        body = {
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
        await self._best_effort(
            "status",
            self.core.patch_namespaced_pod_status(
                pod.name,
                pod.namespace,
                body,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )

    async def _best_effort(self, what: str, call: Any) -> None:
        try:
            resp = await call
            try:
                if resp.status >= 300 and resp.status != 404:
                    text = (await resp.text())[:300]
                    log.warning("writing %s failed: HTTP %s %s", what, resp.status, text)
            finally:
                resp.release()
        except ApiException as exc:
            if exc.status != 404:
                log.warning("writing %s failed: HTTP %s %s", what, exc.status, exc.reason)
        except Exception as exc:
            log.warning("writing %s failed: %r", what, exc)
