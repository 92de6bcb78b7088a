"""ClusterState: what the scheduler knows about nodes and pods, fed by watch events.

It is the scheduler cache of kube-scheduler in miniature: per-node requested resources of every
pod bound there (whoever bound it), plus pods we *assumed* onto a node before their bind landed
(Reserve). Every mutation is synchronous, so a scheduling cycle that never awaits always sees a
consistent picture. Raw API objects are parsed once into slotted dataclasses.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterator, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from ..framework.pod_groups import PodGroupKey
from ..framework.podaffinity import AffinityTerm, weighted_terms
from ..framework.profile import DEFAULT_PROFILE
from ..framework.spread import HOSTNAME, NodeScope
from ..framework.taints import PREFER_NO_SCHEDULE
from ..framework.types import HostPort, NodeInfo, PodInfo, parse_node
from ..framework.view import PodMatcher
from ..resources import PODS
from .dynamic_resources.claims import ResourceClaims
from .match_counts import MatchCounts, PlacedTerms
from .multimaps import discard
from .volumes.storage_state import StorageState
from .workload_selectors import WorkloadSelectors

# Placements older than this are never estimated (policies allow samples up to an hour old).
RECENT_HORIZON = 3700.0
# The change log restarts (an epoch bump: its readers rebuild) past this many entries.
CHANGE_LOG_LIMIT = 50_000


@dataclass(slots=True)
class NodeLoad:
    """Requests of the pods on one node, kept incrementally."""

    requested: dict[str, int] = field(default_factory=dict)
    scored: list[int] = field(default_factory=lambda: [0, 0])  # non-zero cpu, memory (scoring)
    pods: set[str] = field(default_factory=set)
    recent: deque[tuple[float, str]] = field(default_factory=deque)  # (placed_at, uid)
    host_ports: Counter[HostPort] = field(default_factory=Counter)


class ClusterState:
    """Nodes, per-node pod accounting, and assumed pods."""

    def __init__(
        self,
        placed_changed: Callable[[PodInfo, PodInfo], bool] = DEFAULT_PROFILE.placed_changed,
        storage_changed: Callable[[], object] = lambda: None,
    ) -> None:
        """`placed_changed`: declared by the plugins (framework/profile.py); `storage_changed`:
        told when a claim, volume, class or CSI object changed (pods refused for their volumes
        may fit now: the scheduler's queue requeues them)."""
        self._placed_changed = placed_changed
        self.nodes: dict[str, NodeInfo] = {}
        # Nodes by their kubernetes.io/hostname label: the names of those labelled with their
        # own name (most), and for the others, label ("" if none) -> names.
        self._self_named: set[str] = set()
        self._hostnames: dict[str, set[str]] = {}
        self.pods: dict[str, PodInfo] = {}  # bound or assumed pods that hold resources
        # Reservations: assumed pods the API does not show bound yet, with the monotonic time
        # each was made (the scheduler's audit bounds how long one may last).
        self.assumed: dict[str, float] = {}
        self._aside: dict[str, float] = {}  # reservations set aside for a dry run
        self.loads: dict[str, NodeLoad] = {}
        self.namespaces: dict[str, Mapping[str, str]] = {}  # name -> labels
        self.anti_affinity_pods: set[str] = set()  # placed pods with required anti-affinity
        self.prefer_no_schedule: set[str] = set()  # nodes with a PreferNoSchedule taint
        # rebalancing's cool-downs (rebalancing/moves.py keeps them):
        # controller UID -> node -> until
        self.moved_off: dict[str, dict[str, float]] = {}
        self.workloads = WorkloadSelectors()  # Service and controller selectors (default spread)
        # claims, volumes, classes, CSI objects (volume plugins)
        self.storage = StorageState(storage_changed)
        self.claims = ResourceClaims()  # ResourceClaims (dynamic resource allocation)
        self.dra_backed: dict[str, str] = {}  # extended resource -> DeviceClass (device_classes)
        # Names of nodes whose own scheduling state changed (node object, pods on it), in
        # order: incremental readers (the score index) re-evaluate only those. A reader keeps
        # its position; after the log restarts (`change_epoch` differs) it starts afresh.
        self.changes: list[str] = []
        self.change_epoch = 0
        # Matching pods per node for the selectors spread and affinity use (match_counts.py),
        # and topology values per node scope, dropped when a node's labels or taints change.
        self._matches = MatchCounts()
        self._anti_terms = PlacedTerms(_anti_terms_of)
        self._weighted_terms = PlacedTerms(weighted_terms)  # they score (InterPodAffinity)
        self.weighted_affinity_pods: set[str] = set()  # placed pods carrying such terms
        self._topology: dict[NodeScope, dict[str, set[str]]] = {}
        self._priorities: Counter[int] = Counter()  # placed pods per priority (preemption)
        self.pod_group_members: Counter[PodGroupKey] = Counter()  # placed or assumed, per pod group

    def _touch(self, node_name: str) -> None:
        changes = self.changes
        if len(changes) >= CHANGE_LOG_LIMIT:
            changes.clear()
            self.change_epoch += 1
        changes.append(node_name)

    # --- nodes -------------------------------------------------------------------------------
    def upsert_node(self, raw: Mapping[str, Any]) -> NodeInfo:
        node = parse_node(raw)
        old = self.nodes.get(node.name)
        if old is None or old.labels != node.labels or old.taints != node.taints:
            self._topology.clear()
            self._matches.nodes_changed()
            self._anti_terms.nodes_changed()
            self._weighted_terms.nodes_changed()
        self.nodes[node.name] = node
        if old is not None:
            self._unhost(old)
        host = node.labels.get(HOSTNAME, "")
        if host == node.name:
            self._self_named.add(host)
        else:
            self._hostnames.setdefault(host, set()).add(node.name)
        if any(t.effect == PREFER_NO_SCHEDULE for t in node.taints):
            self.prefer_no_schedule.add(node.name)
        else:
            self.prefer_no_schedule.discard(node.name)
        self._touch(node.name)
        return node

    def delete_node(self, name: str) -> None:
        old = self.nodes.pop(name, None)
        if old is not None:
            self._unhost(old)
            self._topology.clear()
            self._matches.nodes_changed()
            self._anti_terms.nodes_changed()
            self._weighted_terms.nodes_changed()
        self.prefer_no_schedule.discard(name)
        self._touch(name)

    def _unhost(self, node: NodeInfo) -> None:
        host = node.labels.get(HOSTNAME, "")
        if host == node.name:
            self._self_named.discard(host)
        else:
            discard(self._hostnames, host, node.name)

    def with_hostnames(self, hosts: Set[str]) -> set[str]:
        found = self._self_named & hosts  # a set operation: no Python loop for the usual nodes
        others = self._hostnames
        if others:
            small, big = (hosts, others) if len(hosts) <= len(others) else (others, hosts)
            for host in small:
                if host in big:
                    found.update(others[host])
        return found

    def upsert_namespace(self, name: str, labels: Mapping[str, str]) -> bool:
        """Returns True if the labels changed (namespace selectors may now match)."""
        changed = self.namespaces.get(name) != labels
        self.namespaces[name] = labels
        if changed:
            self._matches.namespaces_changed()
        return changed

    def delete_namespace(self, name: str) -> None:
        if self.namespaces.pop(name, None) is not None:
            self._matches.namespaces_changed()

    # --- pods that hold resources ------------------------------------------------------------
    def observe_bound(self, pod: PodInfo, terminal: bool) -> bool:
        """Record a pod the API shows on a node. Returns True if node capacity was freed."""
        current = self.pods.get(pod.uid)
        self.assumed.pop(pod.uid, None)  # the API shows it on a node: no longer a reservation
        if terminal:
            return self.remove_pod(pod.uid)
        if current is not None and current.node_name == pod.node_name:
            # The bind landed (the assumed entry becomes the real one), or the pod changed:
            # labels, deletion, resized requests. Re-account it from the fresh object, keeping
            # its place in time.
            pod.placed_at = current.placed_at
            if not self._placed_changed(current, pod):
                # The usual case: nothing a plugin reads of placed pods has changed.
                self.pods[pod.uid] = pod
                return False
            self.remove_pod(pod.uid)
            self._account(pod, recent=False)
            return _shrank(current.requests.amounts, pod.requests.amounts)
        freed = self.remove_pod(pod.uid) if current is not None else False
        # Placed long ago (listed at start-up, PodScheduled in the past) or just now.
        pod.placed_at = pod.placed_at or time.time()
        self._account(pod)
        return freed

    def assume(self, pod: PodInfo, node_name: str, at: float | None = None) -> None:
        """Reserve: account the pod on the node now, before its bind lands."""
        pod.node_name = node_name
        pod.assumed = True
        pod.placed_at = time.time() if at is None else at
        self._account(pod)
        self.assumed[pod.uid] = time.monotonic()

    def forget(self, uid: str) -> None:
        """Unreserve: a bind failed; release what assume() took, if it is still assumed."""
        pod = self.pods.get(uid)
        if pod is not None and pod.assumed:
            self.remove_pod(uid)

    def remove_pod(self, uid: str) -> bool:
        self.assumed.pop(uid, None)
        pod = self.pods.pop(uid, None)
        if pod is None:
            return False
        node = self.nodes.get(pod.node_name)
        self._matches.removed(pod, self.namespaces, node)
        if pod.anti_affinity_terms:
            self._anti_terms.removed(pod, node)
        if uid in self.weighted_affinity_pods:
            self._weighted_terms.removed(pod, node)
            self.weighted_affinity_pods.discard(uid)
        load = self.loads.get(pod.node_name)
        if load is not None and uid in load.pods:
            load.pods.discard(uid)
            for name, amount in pod.requests.amounts.items():
                load.requested[name] = load.requested.get(name, 0) - amount
            load.requested[PODS] = load.requested.get(PODS, 0) - 1
            placed = pod.requests.placed_nonzero
            load.scored[0] -= placed[0]
            load.scored[1] -= placed[1]
            load.host_ports.subtract(pod.host_ports)
            self._touch(pod.node_name)
        if pod.volumes.claims:
            refs = self.storage.claim_refs
            refs.subtract(_claim_keys(pod))
            for key in _claim_keys(pod):
                if refs[key] <= 0:
                    refs.pop(key, None)
        self.anti_affinity_pods.discard(uid)
        priorities = self._priorities
        priorities[pod.priority] -= 1
        if not priorities[pod.priority]:
            del priorities[pod.priority]
        if pod.group is not None:
            groups = self.pod_group_members
            groups[pod.group] -= 1
            if not groups[pod.group]:
                del groups[pod.group]
        return True

    def set_aside(self, uid: str) -> PodInfo | None:
        """For a dry run (framework/view.py WhatIf): off its node until put_back."""
        pod = self.pods.get(uid)
        if pod is not None:
            since = self.assumed.get(uid)
            self.remove_pod(uid)
            if since is not None:
                self._aside[uid] = since
        return pod

    def put_back(self, pod: PodInfo, placed: bool = False) -> None:
        """Undo set_aside, or hold a nominated pod on its node for a dry run; its placement
        time is logged only if `placed` (then its estimate counts, see WhatIf)."""
        self._account(pod, recent=placed)
        since = self._aside.pop(pod.uid, None)
        if since is not None:
            self.assumed[pod.uid] = since

    def _account(self, pod: PodInfo, recent: bool = True) -> None:
        self.pods[pod.uid] = pod
        self._priorities[pod.priority] += 1
        if pod.group is not None:
            self.pod_group_members[pod.group] += 1
        node = self.nodes.get(pod.node_name)
        self._matches.added(pod, self.namespaces, node)
        if pod.anti_affinity_terms:
            self._anti_terms.added(pod, node)
        if pod.affinity_terms or pod.preferred_affinity_terms or pod.preferred_anti_affinity_terms:
            self._weighted_terms.added(pod, node)
            self.weighted_affinity_pods.add(pod.uid)
        load = self.loads.get(pod.node_name)
        if load is None:
            load = self.loads[pod.node_name] = NodeLoad()
        load.pods.add(pod.uid)
        for name, amount in pod.requests.amounts.items():
            load.requested[name] = load.requested.get(name, 0) + amount
        load.requested[PODS] = load.requested.get(PODS, 0) + 1
        placed = pod.requests.placed_nonzero
        load.scored[0] += placed[0]
        load.scored[1] += placed[1]
        if recent:
            # Bounded: placements older than the horizon (relative to the newest one here)
            # are dropped, since no sample is trusted that long.
            newest = max(pod.placed_at, load.recent[-1][0]) if load.recent else pod.placed_at
            while load.recent and load.recent[0][0] < newest - RECENT_HORIZON:
                load.recent.popleft()
            if pod.placed_at >= newest - RECENT_HORIZON:
                entry = (pod.placed_at, pod.uid)
                if not load.recent or entry >= load.recent[-1]:
                    load.recent.append(entry)
                else:  # kept in time order (a pod listed late may have been placed earlier)
                    load.recent.insert(bisect.bisect(load.recent, entry), entry)
        if pod.host_ports:
            load.host_ports.update(pod.host_ports)
        if pod.volumes.claims:
            self.storage.claim_refs.update(_claim_keys(pod))
        if pod.anti_affinity_terms:
            self.anti_affinity_pods.add(pod.uid)
        self._touch(pod.node_name)

    def drop_missing(self, gone_pods: set[str], gone_nodes: set[str]) -> bool:
        """Forget pods and nodes a fresh list no longer shows (their DELETED events were lost,
        e.g. across a watch relist). Pods whose bind is still in flight are kept (the bind's
        answer decides); a pod whose bind landed is dropped like any other. Returns True if
        anything was freed."""
        freed = False
        for uid in gone_pods:
            pod = self.pods.get(uid)
            if pod is not None and (not pod.assumed or pod.bind_landed):
                freed = self.remove_pod(uid) or freed
        for name in gone_nodes:
            if name in self.nodes:
                self.delete_node(name)
                freed = True
        return freed

    # --- reads -------------------------------------------------------------------------------
    @property
    def priorities(self) -> Collection[int]:
        """The priorities of placed pods (preemption; the status, of a band holding none)."""
        return self._priorities.keys()

    def accounted_cpu(self) -> int:
        """CPU millicores requested by the pods held on existing nodes (bound or assumed). Pods
        bound to a node that was deleted (until the pod garbage collector removes them) hold
        nothing anyone can schedule onto, so they are not counted."""
        nodes = self.nodes
        return sum(
            load.requested.get("cpu", 0) for name, load in self.loads.items() if name in nodes
        )

    def requested(self, node_name: str) -> Mapping[str, int]:
        load = self.loads.get(node_name)
        return load.requested if load is not None else {}

    def scored_requests(self, node_name: str) -> tuple[int, int]:
        """CPU and memory requested on the node as kube-scheduler scores them (non-zero)."""
        load = self.loads.get(node_name)
        return (load.scored[0], load.scored[1]) if load is not None else (0, 0)

    def pods_on(self, node_name: str) -> Iterator[PodInfo]:
        load = self.loads.get(node_name)
        for uid in load.pods if load is not None else ():
            pod = self.pods.get(uid)
            if pod is not None:
                yield pod

    def matching(self, matcher: PodMatcher) -> Mapping[str, int]:
        """Placed pods `matcher` matches, per node name (see match_counts.py)."""
        return self._matches.per_node(matcher, self.pods.values(), self.namespaces)

    def matching_domains(
        self, matcher: PodMatcher, key: str, scope: NodeScope
    ) -> Mapping[str, int]:
        """Placed pods `matcher` matches, per value of `key` ("" where missing) over the nodes
        in `scope` (see match_counts.py)."""
        return self._matches.per_domain(
            matcher, key, scope, self.pods.values(), self.namespaces, self.nodes
        )

    def anti_affinity_domains(self) -> Iterator[tuple[AffinityTerm, Mapping[str, int]]]:
        """Placed pods' required anti-affinity terms, each with how many placed pods carry it
        per value of its topology key (see match_counts.py)."""
        return ((term, counts) for term, _, counts in self._anti_terms.per_domain(self.nodes))

    def weighted_affinity_domains(self) -> Iterator[tuple[AffinityTerm, int, Mapping[str, int]]]:
        """Placed pods' affinity terms that score (required affinity, preferred affinity and
        anti-affinity), each with its weight and how many placed pods carry it per value of its
        topology key."""
        return self._weighted_terms.per_domain(self.nodes)

    def topology_values(self, scope: NodeScope) -> Mapping[str, Set[str]]:
        """For each of the scope's keys, its values on the nodes in the scope (cached until a
        node's labels or taints change)."""
        values = self._topology.get(scope)
        if values is None:
            values = {key: set() for key in scope.keys}
            for node in self.nodes.values():
                if scope.includes(node):
                    labels = node.labels
                    for key in scope.keys:
                        values[key].add(labels[key])
            if len(self._topology) >= 64:
                self._topology.clear()
            self._topology[scope] = values
        return values

    def used_ports(self, node_name: str) -> Counter[HostPort]:
        load = self.loads.get(node_name)
        return load.host_ports if load is not None else Counter()

    def trim_placements(self, covered_until: Callable[[str], float]) -> int:
        """Forget placement-log entries no reader needs: at or before `covered_until(node)`
        (every sample a read could use covers them), or of pods gone or moved. Called between
        cycles (a cycle only reads), so the log stays small under churn. Returns how many."""
        dropped = 0
        pods = self.pods
        for name, load in self.loads.items():
            recent = load.recent
            if not recent:
                continue
            cutoff = covered_until(name)
            kept = deque(
                (at, uid)
                for at, uid in recent
                if at > cutoff and (pod := pods.get(uid)) is not None and pod.node_name == name
            )
            dropped += len(recent) - len(kept)
            load.recent = kept
        return dropped

    def placed_since(self, node_name: str, since: float) -> Iterator[PodInfo]:
        """Pods placed on the node after `since` (wall clock): their usage is not in a sample
        taken at `since` yet. Reads only (newest first, stopping at `since`): a scheduling
        cycle never changes the state it reads."""
        load = self.loads.get(node_name)
        if load is None:
            return
        seen: set[str] = set()
        for placed_at, uid in reversed(load.recent):
            if placed_at <= since:
                break
            pod = self.pods.get(uid)
            # Skip pods gone or moved, and a pod assumed twice (a bind failed, then retried).
            if pod is not None and pod.node_name == node_name and uid not in seen:
                seen.add(uid)
                yield pod


def _claim_keys(pod: PodInfo) -> list[str]:
    """The claims of the pod's PVC volumes (kube-scheduler's PodPVCKeys: not ephemeral ones)."""
    return [f"{pod.namespace}/{name}" for _, name, ephemeral in pod.volumes.claims if not ephemeral]


def _shrank(before: Mapping[str, int], after: Mapping[str, int]) -> bool:
    return any(after.get(name, 0) < amount for name, amount in before.items())


def _anti_terms_of(pod: PodInfo) -> Iterator[tuple[AffinityTerm, int]]:
    return ((term, 1) for term in pod.anti_affinity_terms)
