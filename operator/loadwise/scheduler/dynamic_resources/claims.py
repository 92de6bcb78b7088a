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
        self._tell(claim.key)

    def relisted(self, keys: set[str]) -> None:
        """Forget the claims a fresh list no longer shows."""
        for key in set(self.by_key) - keys:
            del self.by_key[key]
            self._tell(key)

    def unserved(self) -> None:
        """The claims cannot be read (the informer was dropped)."""
        log.warning("ResourceClaims cannot be read: pods naming one are not held for it")
        self.served = False
        self.by_key.clear()
        self._tell(None)
