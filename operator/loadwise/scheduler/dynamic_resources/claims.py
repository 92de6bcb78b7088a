"""ResourceClaims as their informer shows them: what the scheduler reads of each
(framework/resource_claims.py), and who is told when one changes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ...framework.resource_claims import Claim, parse_claim

log = logging.getLogger(__name__)

PATH = "/apis/resource.k8s.io/v1/resourceclaims"
Changed = Callable[[str | None], None]  # a claim's key (namespace/name), or None: all of them


class ResourceClaims:
    def __init__(self) -> None:
        self.by_key: dict[str, Claim] = {}
        self.extended: dict[str, str] = {}  # pod uid -> key of the claim for its extended resources
        # False when the API is not served or not readable: no claim can be seen, so none is
        # waited for (pods naming one are refused by name, as before DRA was read at all).
        self.served = True
        self._told: list[Changed] = []

    def on_change(self, told: Changed) -> None:
        """Tell `told` of every claim added, changed or deleted from now on."""
        self._told.append(told)

    def _tell(self, key: str | None) -> None:
        for told in self._told:
            told(key)

    def on_event(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        claim = parse_claim(raw)
        if not claim.name or not claim.namespace:
            return
        if event_type == "DELETED":
            self.by_key.pop(claim.key, None)
        else:
            self.by_key[claim.key] = claim
        self._index(claim, event_type != "DELETED")
        self._tell(claim.key)

    def _index(self, claim: Claim, present: bool) -> None:
        if claim.extended and claim.controller_uid:
            if present:
                self.extended[claim.controller_uid] = claim.key
            elif self.extended.get(claim.controller_uid) == claim.key:
                del self.extended[claim.controller_uid]

    def extended_for(self, namespace: str, name: str, uid: str) -> Claim | None:
        """findExtendedResourceClaim: the claim a scheduler made for the pod's extended
        resources (annotated, controlled by the pod), if one exists."""
        claim = self.by_key.get(self.extended.get(uid, ""))
        if claim is None or claim.namespace != namespace or claim.controller_name != name:
            return None
        return claim

    def relisted(self, keys: set[str]) -> None:
        """Forget the claims a fresh list no longer shows."""
        for key in set(self.by_key) - keys:
            self._index(self.by_key.pop(key), False)
            self._tell(key)

    def unserved(self) -> None:
        """The claims cannot be read (the informer was dropped)."""
        log.warning("ResourceClaims cannot be read: pods naming one are not held for it")
        self.served = False
        self.by_key.clear()
        self.extended.clear()
        self._tell(None)
