"""One API permission loadwise uses, as the preflight check asks for it and the chart grants it.
Here, below the metrics sources, so a source declares its own (usage/sources.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Permission:
    """`when`: needed always (a metrics source's: whenever that source is enabled), only with
    leader election (in the Lease's namespace), with preemption, or with rebalancing's
    evictions."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    when: Literal["always", "leader_elect", "preemption", "evictions", "soft_taints"] = "always"

    def describe(self) -> str:
        name = f"{self.resource}.{self.group}" if self.group else self.resource
        return (
            f"{self.verb} {name}/{self.subresource}" if self.subresource else f"{self.verb} {name}"
        )
