"""`spec.priorityBands`: pods of different priorities judged by thresholds of their own.

Production and batch pods share nodes. A band is the pods whose priority is at least its
`minPriority` and below the next band's; pods below every band are judged as the policy says.
A band's hot thresholds replace the node's (the policy's, its pool's or its annotation's) for
its pods, each one given. With `usage: BandAndAbove` a band's pods are judged by what the pods
of their band and the bands above use on the node, not by the node's whole use: lower-priority
(batch) use counts as reclaimable, as Koordinator's production thresholds do. Placement and
rebalancing apply the same rule (framework/heat.py), so a pod placement allows on a node is
never evicted from it for being there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from .node_pools import PoolThresholds
from .spec_model import SpecModel as _Model

# kube-scheduler's priorities are int32; user classes are at most 1e9, system ones above.
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1


class PriorityBand(_Model):
    """Pods of a priority range with thresholds, and a measure of use, of their own."""

    name: str = Field(
        pattern=r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$",
        max_length=63,
        description="The band's name, in `explain`, events and the status.",
    )
    min_priority: int = Field(
        ge=MIN_PRIORITY,
        le=MAX_PRIORITY,
        description="Pods of at least this priority, and below the next band's minPriority, "
        "are in the band.",
    )
    hot_thresholds: PoolThresholds = Field(
        default_factory=PoolThresholds,
        description="Each one given replaces the node's own (the policy's, its pool's or its "
        "annotation's) for the band's pods; the others stay the node's.",
    )
    usage: Literal["All", "BandAndAbove"] = Field(
        "All",
        description="What the band's pods are judged by on a node: All, its whole measured "
        "use; BandAndAbove, only what its pods of this band's priority or higher use (the "
        "latest per-pod figures; lower priorities' use counts as reclaimable). Needs per-pod "
        "usage (the operator's metrics.learnUsage); without it, All.",
    )

    def describe(self) -> str:
        """How `explain` and events name it: `band production (priority >= 1000)`."""
        return f"band {self.name} (priority >= {self.min_priority})"


def band_of(bands: Sequence[PriorityBand], priority: int) -> PriorityBand | None:
    """The band of a pod of `priority`: the one with the highest minPriority at or below it."""
    found = None
    for band in bands:
        if band.min_priority <= priority and (
            found is None or band.min_priority > found.min_priority
        ):
            found = band
    return found
