"""DynamicResources' PreEnqueue: a pod naming ResourceClaims waits outside the queue, never
tried, until each exists, is not being deleted and (if made from a template) is its own; then it
is queued. Its own update asks again (the resourceclaim controller writes the name it chose into
the pod's status); a claim's event asks again for the pods held for that claim."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import ClassVar

from ...framework.plugin import PreEnqueuePlugin
from ...framework.resource_claims import missing_claim
from ...framework.types import PodInfo
from .claims import ResourceClaims


class ClaimsExist(PreEnqueuePlugin):
    name: ClassVar[str] = "DynamicResources"

    def __init__(self, claims: ResourceClaims, release: Callable[[PodInfo], None]) -> None:
        """`release`: queues a pod held until now."""
        self.claims = claims
        self.release = release
        self.held: dict[str, tuple[PodInfo, str]] = {}  # uid -> the pod, why it waits
        self._held_for: dict[str, set[str]] = {}  # claim key -> uids held for it
        claims.on_change(self._claim_changed)

    def pre_enqueue(self, pod: PodInfo) -> bool:
        self.forget(pod.uid)
        if not pod.claims or not self.claims.served:
            return True
        why = missing_claim(pod.uid, pod.namespace, pod.name, pod.claims, self.claims.by_key)
        if why is None:
            return True
        self.held[pod.uid] = (pod, why)
        for key in _claim_keys(pod):
            self._held_for.setdefault(key, set()).add(pod.uid)
        return False

    def why_held(self, uid: str) -> str | None:
        entry = self.held.get(uid)
        return entry[1] if entry is not None else None

    def forget(self, uid: str) -> None:
        entry = self.held.pop(uid, None)
        if entry is None:
            return
        for key in _claim_keys(entry[0]):
            uids = self._held_for.get(key)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._held_for[key]

    def known(self) -> Collection[str]:
        return list(self.held)

    def holding(self) -> int:
        return len(self.held)

    def _claim_changed(self, key: str | None) -> None:
        uids = list(self.held) if key is None else list(self._held_for.get(key, ()))
        for uid in uids:
            pod = self.held[uid][0]
            if self.pre_enqueue(pod):
                self.release(pod)


def _claim_keys(pod: PodInfo) -> list[str]:
    return [f"{pod.namespace}/{ref.claim}" for ref in pod.claims.claims if ref.claim]
