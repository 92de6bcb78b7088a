"""`spec.rebalance`: relieving nodes that stay hot after placement (scheduler/rebalancing/).

Off by default. The limits are conservative: a scheduler that may evict needs them more than a
descheduler does, since it can always find *somewhere* for a pod to go.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .spec_model import SpecModel


class RebalanceLimits(SpecModel):
    """How many pods rebalancing may evict (counted over every policy's evictions, from the
    operator's ledger, which survives a change of leader)."""

    per_node_per_hour: int = Field(
        3, ge=0, le=1000, description="Evictions from one node in any hour."
    )
    per_namespace_per_hour: int = Field(
        10, ge=0, le=10000, description="Evictions of pods of one namespace in any hour."
    )
    per_workload_per_hour: int = Field(
        1,
        ge=0,
        le=1000,
        description="Evictions of pods of one workload (their controller) in any hour.",
    )
    cluster_per_minute: int = Field(
        5, ge=0, le=1000, description="Evictions across the cluster in any minute."
    )


class Rebalance(SpecModel):
    """Relieving nodes that stay hot after placement: pods move only when the scheduling cycle
    places a replacement on a node that is cool now and stays so with it."""

    enabled: bool = Field(False, description="Look for nodes to relieve (leader only).")
    mode: Literal["DryRun", "Evict"] = Field(
        "DryRun",
        description="DryRun: report what would move where (WouldEvict events), evict nothing. "
        "Evict: evict through the Eviction API (PodDisruptionBudgets hold), hold room on the "
        "target for the replacement and keep it off the node it left.",
    )
    hot_refreshes: int = Field(
        3,
        ge=1,
        le=100,
        description="A node is relieved once it has been over a hot threshold (by this "
        "policy's load figures) at this many metrics refreshes in a row.",
    )
    cool_refreshes: int = Field(
        3, ge=1, le=100, description="... and no longer once under them this many in a row."
    )
    allow_local_storage: bool = Field(
        False, description="Pods with emptyDir or hostPath volumes may be moved (data is lost)."
    )
    reservation_seconds: int = Field(
        120,
        ge=10,
        le=3600,
        description="How long the room on the target is held for the evicted pod's "
        "replacement (its controller's next pod) against pods of no higher priority.",
    )
    cool_down_seconds: int = Field(
        1800,
        ge=0,
        le=86400,
        description="How long pods of the evicted pod's workload are kept off the node it left.",
    )
    limits: RebalanceLimits = Field(
        default_factory=RebalanceLimits, description="Eviction rate limits."
    )
