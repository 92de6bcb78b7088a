"""ClusterView: what the framework may read of the cluster, and nothing it could change.

The plugins and the score index read the cluster through this Protocol, as kube-scheduler's
plugins read a per-cycle snapshot through a lister; `ClusterView` (scheduler/state.py)
implements it.
A scheduling cycle is pure: it reads, decides, and leaves every write (Reserve) to its caller.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence, Set
from typing import Protocol

from .podaffinity import AffinityTerm
from .selectors import Selector
from .spread import NodeScope
from .storage import Claim, StorageCapacity, StorageClass, Volume
from .types import HostPort, NodeInfo, Owner, PodInfo


class PodMatcher(Hashable, Protocol):
    """Which placed pods a constraint counts (spread.SpreadMatch, podaffinity.TermsMatch): the
    cluster state keeps per-node counts for each matcher in use (`ClusterView.matching`)."""

    @property
    def reads_namespace_labels(self) -> bool: ...

    def matches(self, pod: PodInfo, namespaces: Mapping[str, Mapping[str, str]]) -> bool: ...


class WorkloadSelectorsView(Protocol):
    def default_selector(
        self, namespace: str, labels: Mapping[str, str], owner: Owner | None
    ) -> Selector | None:
        """kube-scheduler's DefaultSelector for such a pod (Services and its controller)."""
        ...


class StorageView(Protocol):
    """Claims, volumes, classes and CSI objects (the volume plugins' listers), with the
    bindings assumed for pods whose binding cycle has not finished (kube-scheduler's assume
    cache): a PV assumed for one claim is not offered to another."""

    def claim(self, namespace: str, name: str) -> Claim | None: ...

    def volume(self, name: str) -> Volume | None: ...

    def candidate_volumes(self, claim: Claim, node: NodeInfo) -> Sequence[Volume]:
        """The PVs FindMatchingVolume could pick for the unbound claim on the node: those
        pre-bound to the claim first (the first of them decides, as there), then the free PVs of
        its class that the node could satisfy (pinned to its hostname, or not pinned to one);
        every other PV of the class is one it would skip. Assumed versions included."""
        ...

    def candidate_hosts(self, claim: Claim) -> frozenset[str] | None:
        """The hostnames of every PV `candidate_volumes` could offer the claim on some node,
        or None when one of them is not pinned to a single hostname (it may fit anywhere)."""
        ...

    def storage_class(self, name: str) -> StorageClass | None: ...

    def csi_node(self, node_name: str) -> Mapping[str, int | None] | None:
        """The node's CSINode: driver -> allocatable volume count (None: no limit)."""
        ...

    def migrated_plugins(self, node_name: str) -> frozenset[str]:
        """The in-tree plugins its CSINode says are migrated to CSI there (none without one)."""
        ...

    def driver_publishes_capacity(self, driver: str) -> bool:
        """A CSIDriver named so exists with spec.storageCapacity true."""
        ...

    def driver_required_on_node(self, driver: str) -> bool:
        """A CSIDriver named so exists with spec.preventPodSchedulingIfMissing true."""
        ...

    def capacities(self) -> Sequence[StorageCapacity]: ...

    def claim_users(self, key: str) -> int:
        """Placed pods (bound or assumed) that use the claim `namespace/name`."""
        ...

    def attachments(self, node_name: str) -> Sequence[tuple[str, str]]:
        """(attacher, volume handle) of the node's VolumeAttachments of CSI PVs (those
        NodeVolumeLimits counts besides the volumes of the pods on the node)."""
        ...


class ClusterView(Protocol):
    @property
    def nodes(self) -> Mapping[str, NodeInfo]: ...

    @property
    def storage(self) -> StorageView:
        """What the volume plugins read (claims, volumes, classes, CSI objects)."""
        ...

    @property
    def pods(self) -> Mapping[str, PodInfo]:
        """Pods that hold resources on a node: bound, or assumed by us."""
        ...

    @property
    def namespaces(self) -> Mapping[str, Mapping[str, str]]:
        """Namespace name -> labels."""
        ...

    @property
    def workloads(self) -> WorkloadSelectorsView:
        """Service and controller selectors: system default spreading."""
        ...

    @property
    def anti_affinity_pods(self) -> Set[str]:
        """UIDs of placed pods with required anti-affinity."""
        ...

    @property
    def weighted_affinity_pods(self) -> Set[str]:
        """UIDs of placed pods with affinity terms that score (weighted_affinity_domains)."""
        ...

    @property
    def dra_backed(self) -> Mapping[str, str]:
        """Extended resources a DeviceClass backs (KEP-5004): resource name -> class. On a node
        that does not list one in its allocatable, dynamic resource allocation provides it."""
        ...

    @property
    def prefer_no_schedule(self) -> Set[str]:
        """Names of nodes with a PreferNoSchedule taint."""
        ...

    @property
    def moved_off(self) -> Mapping[str, Mapping[str, float]]:
        """Rebalancing's cool-downs: a controller's UID -> nodes a pod of it was evicted from,
        each with when (wall clock) its pods may go back there."""
        ...

    @property
    def changes(self) -> Sequence[str]:
        """Names of nodes whose scheduling state changed, in order (see ClusterView)."""
        ...

    @property
    def change_epoch(self) -> int: ...

    def requested(self, node_name: str) -> Mapping[str, int]: ...

    def scored_requests(self, node_name: str) -> tuple[int, int]:
        """CPU and memory requested on the node, missing requests at kube-scheduler's
        non-zero defaults (for scoring, never for fitting)."""
        ...

    def pods_on(self, node_name: str) -> Iterator[PodInfo]: ...

    def matching(self, matcher: PodMatcher) -> Mapping[str, int]:
        """Placed pods the matcher matches, per node name (absent: none); pods on nodes that no
        longer exist included. Kept incrementally: the first call for a matcher counts."""
        ...

    def matching_domains(
        self, matcher: PodMatcher, key: str, scope: NodeScope
    ) -> Mapping[str, int]:
        """Placed pods the matcher matches per value of `key` ("" where missing), over the
        existing nodes in `scope`; kept incrementally too."""
        ...

    def anti_affinity_domains(self) -> Iterable[tuple[AffinityTerm, Mapping[str, int]]]:
        """Placed pods' required anti-affinity terms, each with how many placed pods carry it
        per value of its topology key (on existing nodes with the key); kept incrementally."""
        ...

    def weighted_affinity_domains(self) -> Iterable[tuple[AffinityTerm, int, Mapping[str, int]]]:
        """Placed pods' scoring terms (required affinity at hardPodAffinityWeight, preferred
        affinity, preferred anti-affinity negated), each with its weight and how many placed
        pods carry it per value of its topology key; kept incrementally."""
        ...

    def topology_values(self, scope: NodeScope) -> Mapping[str, Set[str]]:
        """For each of the scope's keys, its values on the nodes in the scope."""
        ...

    def with_hostnames(self, hosts: Set[str]) -> Set[str]:
        """Names of the nodes whose `kubernetes.io/hostname` label is one of `hosts` (usually
        the nodes of those names; labels need not be unique). Kept as nodes come and go."""
        ...

    def used_ports(self, node_name: str) -> Counter[HostPort]: ...

    def placed_since(self, node_name: str, since: float) -> Iterator[PodInfo]:
        """Pods placed on the node after `since` (wall clock); reads only."""
        ...


class WhatIf(ClusterView, Protocol):
    """A cluster view that a dry run may edit and must restore before it returns, as
    kube-scheduler's preemption edits a copy of a node and of the cycle state. Nothing else
    runs meanwhile: the scheduling cycle never awaits."""

    def set_aside(self, uid: str) -> PodInfo | None:
        """Take a placed pod off its node (its requests, ports, counts); returns it."""
        ...

    def put_back(self, pod: PodInfo, placed: bool = False) -> None:
        """Account a pod on `pod.node_name` again (or a nominated pod there for a while);
        `placed`: as placed at `pod.placed_at`, so its estimate counts on the node's load until
        a sample covers that time (a replacement rebalancing plans there)."""
        ...
