"""DynamicResources' PreFilter and Filter (kube-scheduler v1.37.2, with its wording): which nodes
can give a pod the devices its ResourceClaims ask for.

Prepare, awaited by the loop before the pod's cycle, resolves the pod's claims as PreFilter does:
- an allocated claim (another pod's, shared) binds the pod to its `allocation.nodeSelector`;
- a claim whose allocation loadwise has in flight makes the pod wait ("is in the process of
  being allocated");
- a request naming a DeviceClass that does not exist makes it wait for one;
- the rest go to the device allocator (helper.py), with every allocation in flight, for the
  nodes that have devices; its verdict per node is kept for the cycle that follows at once.
Extended resources a DeviceClass backs add a claim of their own per group of nodes
(extended.py). Filter then reads that verdict per node: the allocator's reason, or none. A pod
the cycle finds no verdict for (a node added since) is refused on that node with the
allocator's own words for a node without devices. The verdicts never depend on other pods in
the cycle, and a refusal here is one no preemption lifts (kube-scheduler's allocator state
keeps the victims' devices too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from ...framework.context import CycleContext
from ...framework.plugin import (
    UNSIGNABLE,
    FilterPlugin,
    Inputs,
    NoPreemption,
    PostFilterPlugin,
    Preemption,
    PreparePlugin,
    ScorePlugin,
    Signature,
)
from ...framework.resource_claims import Claim
from ...framework.scoring import LOAD_WEIGHT, MAX_SCORE
from ...framework.selectors import NodeSelectorTerm, parse_node_selector_term
from ...framework.types import NodeInfo, PodInfo
from .binding_conditions import ready_for_binding, timed_out
from .device_load import DeviceLoad
from .extended import STALE, ExtendedClaim, backed_requests, in_memory, needed_on
from .helper import AllocatorProcess, AllocatorUnavailable, node_verdicts
from .objects import DeviceObjects

log = logging.getLogger(__name__)

NO_DEVICES = "cannot allocate all claims"  # the allocator's verdict for a node without devices
NOT_HERE = "resourceclaim not available on the node"
BINDING_TIMEOUT = 600.0  # DynamicResourcesArgs.bindingTimeout's default
# A pod group member tried without its Prepare (the scheduler's group cycle awaits each
# member's; a dry run of a whole group, as explain's, does not).
IN_GROUP = "devices are not evaluated for pod group members in a dry run"


@dataclass(slots=True)
class Prepared:
    """One pod's PreFilter result, for its cycle."""

    uid: str
    claims: tuple[Claim, ...] = ()
    to_allocate: tuple[Claim, ...] = ()
    # per allocated claim, the nodes its allocation is on (None: any node)
    on_nodes: tuple[tuple[NodeSelectorTerm, ...] | None, ...] = ()
    verdicts: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    unschedulable: str | None = None  # PreFilter's rejection: no node can take the pod
    unavailable: set[int] = field(default_factory=set)  # allocated claims a node refused
    not_ready: frozenset[int] = frozenset()  # allocated claims whose binding failed or timed out
    # extended resources backed by DeviceClasses: a claim made in an earlier attempt (stale),
    # else per node what it must provide as devices, or why it cannot (extended.py)
    stale_extended: Claim | None = None
    needed: dict[str, frozenset[str] | str] = field(default_factory=dict)
    extended: dict[frozenset[str], ExtendedClaim] = field(default_factory=dict)

    @property
    def allocating(self) -> bool:
        return bool(self.to_allocate or self.extended)

    def extended_on(self, node: str) -> ExtendedClaim | None:
        needed = self.needed.get(node)
        return self.extended.get(needed) if isinstance(needed, frozenset) else None

    def claims_for(self, node: str) -> tuple[Claim, ...]:
        """The claims allocated on `node`, in the allocator's order."""
        extended = self.extended_on(node)
        return self.to_allocate if extended is None else (*self.to_allocate, extended.claim)

    def allocations(self, node: str) -> list[Mapping[str, Any]] | None:
        """The allocator's AllocationResults on `node` (one per claim to allocate), or None."""
        verdict = self.verdicts.get(node)
        raw = verdict.get("raw") if verdict is not None else None
        found = orjson.loads(raw) if isinstance(raw, str) else None  # decoded for this node only
        return list(found) if isinstance(found, list) else None

    def devices(self, node: str) -> list[str]:
        """driver/pool/device of every device the allocator chose on `node`."""
        verdict = self.verdicts.get(node)
        per_claim = verdict.get("devices") if verdict is not None else None
        return [d for claim in per_claim or () for d in claim]


class DeviceAllocation(PreparePlugin, FilterPlugin, PostFilterPlugin):
    name: ClassVar[str] = "DynamicResources"
    inputs: ClassVar[Inputs] = Inputs(pod=("claims",), node=("labels",))
    node_local: ClassVar[bool] = False  # its verdicts are the pod's own (in-flight devices)
    always_unresolvable: ClassVar[bool] = True

    def __init__(
        self,
        objects: DeviceObjects,
        allocator: AllocatorProcess,
        nodes: Mapping[str, NodeInfo],
        load: DeviceLoad | None = None,
        deallocate: Callable[[Claim], Coroutine[Any, Any, None]] | None = None,
        backed: Mapping[str, str] | None = None,
        delete: Callable[[Claim], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        """`nodes`: the cluster's nodes, as the state keeps them. `load`: the devices'
        measured utilisation (device_load.py), or None: first fit, as kube-scheduler.
        `deallocate`, `delete`: PostFilter's writes (claim_binding.py, extended.py), each run
        in a task of its own. `backed`: extended resource -> the DeviceClass backing it."""
        self.backed: Mapping[str, str] = backed if backed is not None else {}
        self.delete = delete
        self.objects = objects
        self.allocator = allocator
        self.nodes = nodes
        self.load = load
        self.deallocate = deallocate
        self._tasks: set[asyncio.Task[None]] = set()
        self.current: Prepared | None = None  # the last pod prepared (one pod at a time)

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if self.applies(ctx.pod) else ()

    def applies(self, pod: PodInfo) -> bool:
        """The pod has claims, or extended resources a DeviceClass backs."""
        return bool(pod.claims.claims) or bool(backed_requests(pod, self.backed))

    def needs(self, pod: PodInfo) -> bool:
        return not pod.claims.error and self.applies(pod)

    def prepared(self, pod: PodInfo) -> Prepared | None:
        current = self.current
        return current if current is not None and current.uid == pod.uid else None

    async def prepare(self, pod: PodInfo) -> str | None:
        self.current = None
        prepared = self._resolve(pod)
        if prepared.unschedulable is None and (prepared.to_allocate or prepared.needed):
            try:
                error = await self._allocate(prepared)
            except AllocatorUnavailable as exc:
                return f"the device allocator is unavailable: {exc}"
            if error is not None:
                return error
        self.current = prepared
        return None

    def _resolve(self, pod: PodInfo) -> Prepared:
        prepared = Prepared(pod.uid)
        claims, to_allocate, on_nodes = [], [], []
        known = self.objects.claims.by_key
        for ref in pod.claims.claims:
            if not ref.claim:
                continue
            key = f"{pod.namespace}/{ref.claim}"
            claim = known.get(key)
            if claim is None:  # deleted since PreEnqueue let the pod in
                prepared.unschedulable = f'could not find ResourceClaim "{key}"'
                return prepared
            claims.append(claim)
            if claim.allocation is not None:
                on_nodes.append(_allocation_nodes(claim.allocation))
                continue
            if claim.uid in self.objects.inflight:
                prepared.unschedulable = (
                    f"resource claim {key} is in the process of being allocated"
                )
                return prepared
            missing = self._missing_class(claim)
            if missing is not None:
                prepared.unschedulable = missing
                return prepared
            to_allocate.append(claim)
        prepared.claims, prepared.to_allocate = tuple(claims), tuple(to_allocate)
        prepared.on_nodes = tuple(on_nodes)
        if backed_requests(pod, self.backed):
            self._plan_extended(pod, prepared)
        allocated = [c for c in claims if c.allocation is not None]
        readiness = [ready_for_binding(c) for c in allocated]
        prepared.not_ready = frozenset(
            i
            for i, (c, ready) in enumerate(zip(allocated, readiness, strict=True))
            if isinstance(ready, str) or (ready is False and timed_out(c, BINDING_TIMEOUT))
        )
        return prepared

    def _plan_extended(self, pod: PodInfo, prepared: Prepared) -> None:
        """preFilterExtendedResources, and what filterExtendedResources decides per node."""
        stale = self.objects.claims.extended_for(pod.namespace, pod.name, pod.uid)
        if stale is not None:
            prepared.stale_extended = stale
            return
        backed = self.backed
        for name, node in self.nodes.items():
            needed = needed_on(pod, node, backed)
            prepared.needed[name] = needed
            if needed and isinstance(needed, frozenset) and needed not in prepared.extended:
                prepared.extended[needed] = in_memory(pod, needed, backed)

    def _missing_class(self, claim: Claim) -> str | None:
        """validateDeviceClass for each request: a class that does not exist (yet)."""
        devices = (claim.raw.get("spec") or {}).get("devices") or {}
        for request in devices.get("requests") or ():
            name = str(request.get("name") or "")
            subs = (
                [(name, request.get("exactly"))]
                if request.get("exactly")
                else [(f"{name}/{s.get('name')}", s) for s in request.get("firstAvailable") or ()]
            )
            for qualified, sub in subs:
                cls = str((sub or {}).get("deviceClassName") or "")
                if cls and cls not in self.objects.classes:
                    return f"request {qualified}: device class {cls} does not exist"
        return None

    async def _allocate(self, prepared: Prepared) -> str | None:
        """The allocator's verdict on every node that has devices: None, or an error that
        aborts the attempt (kube-scheduler's Error status: a broken CEL expression, a
        timeout)."""
        nodes = self.nodes
        with_devices = self.objects.nodes_with_devices()
        names = [n for n in nodes if with_devices is None or n in with_devices]
        changes = self.objects.take_changes((n, nodes[n].labels) for n in names)
        if changes:
            answer = await self.allocator.call("apply", changes=changes)
            if answer.get("error"):
                log.warning("dra-allocator refused some objects: %s", answer["error"])
        if self.load is not None:
            await self.load.refresh_if_due(self.objects, self.allocator)
        groups: dict[frozenset[str], list[str]] = {}
        for name in names:
            needed = prepared.needed.get(name, frozenset())
            if isinstance(needed, frozenset):
                groups.setdefault(needed, []).append(name)
        for needed, group in groups.items():
            extended = prepared.extended.get(needed)
            claims = [c.raw for c in prepared.to_allocate]
            if extended is not None:
                claims.append(extended.claim.raw)
            if not claims:
                continue  # nothing to allocate there: the node's device plugin serves it
            answer = await self.allocator.call(
                "filter",
                claims=claims,
                nodes=group,
                inflight=self.objects.inflight_allocations(),
                memo=True,
                lazy=True,
            )
            if answer.get("error"):
                return str(answer["error"])
            verdicts = node_verdicts(answer)
            for verdict in verdicts.values():
                if verdict.get("error"):
                    return str(verdict["error"])
            prepared.verdicts.update(verdicts)
        return None

    def describe(self, pod: PodInfo, node: str) -> str | None:
        prepared = self.prepared(pod)
        if prepared is None or not prepared.allocating:
            return None
        found = prepared.devices(node)
        if not found:
            return None
        load = self.load
        shown = []
        for device in found:
            busy = load.of(device) if load is not None else None
            shown.append(f"{device} ({busy:.0f}% busy)" if busy is not None else device)
        how = "coolest that fit" if load is not None and load.scores else "first fit: no figures"
        return f"devices on {node}: {', '.join(shown)} ({how})"

    # --- the cycle ---------------------------------------------------------------------------
    def prefilter(self, ctx: CycleContext) -> str | None:
        if not self.applies(ctx.pod):
            return None
        prepared = self.prepared(ctx.pod)
        if prepared is None:
            return IN_GROUP if ctx.pod.group is not None else None
        return prepared.unschedulable

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        pod = ctx.pod
        if not self.applies(pod):
            return None
        prepared = self.prepared(pod)
        if prepared is None:  # never prepared: a pod group member
            return [IN_GROUP if pod.group is not None else NO_DEVICES]
        if prepared.unschedulable is not None:
            return [prepared.unschedulable]
        if prepared.stale_extended is not None:
            return [STALE]
        needed = prepared.needed.get(node.name)
        if isinstance(needed, str):
            return [needed]
        if needed is None and prepared.needed:
            return [NO_DEVICES]  # a node added since the pod was prepared
        if not pod.claims.claims and not needed:
            return None  # the node's device plugin provides the resources (NodeResourcesFit)
        elsewhere = [
            i
            for i, terms in enumerate(prepared.on_nodes)
            if (terms is not None and not any(t.matches(node.name, node.labels) for t in terms))
            or i in prepared.not_ready
        ]
        if elsewhere:
            prepared.unavailable.update(elsewhere)  # PostFilter may deallocate one
            return [NOT_HERE]
        if prepared.to_allocate or needed:
            verdict = prepared.verdicts.get(node.name)
            if verdict is None:
                return [NO_DEVICES]
            if verdict.get("reason"):
                return [str(verdict["reason"])]
        return None

    # --- PostFilter --------------------------------------------------------------------------
    def post_filter(
        self,
        pod: PodInfo,
        held: Mapping[str, list[PodInfo]],
        load_of: Callable[[str], float],
    ) -> Preemption | NoPreemption | None:
        """kube-scheduler's DynamicResources PostFilter, before DefaultPreemption (an idle
        claim is better freed than a pod evicted): an allocated claim that kept the pod off a
        node and is reserved for no other pod is deallocated, so the next attempt may
        allocate it anew anywhere."""
        prepared = self.prepared(pod)
        if prepared is not None and prepared.stale_extended is not None and self.delete:
            self._spawn(self.delete(prepared.stale_extended))
            return NoPreemption("deletion of ResourceClaim completed")
        if prepared is None or not prepared.unavailable or self.deallocate is None:
            return None
        allocated = [c for c in prepared.claims if c.allocation is not None]
        for index in sorted(prepared.unavailable):
            claim = allocated[index]
            if not claim.reserved_for or claim.reserved_for == (pod.uid,):
                self._spawn(self.deallocate(claim))
                return NoPreemption("deallocation of ResourceClaim completed")
        return None

    def _spawn(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(write)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class DeviceScore(ScorePlugin):
    """The policy's `devices`: Spread prefers nodes whose devices for the pod (already each
    node's coolest that fit) are the least busy, as the load score does for CPU and memory and
    with its weight; Pack prefers nodes with the fewest devices left free after the pod. Either
    way a node whose devices for the pod include a hot one is passed over while another's do
    not (`hot`)."""

    name: ClassVar[str] = "DeviceLoad"
    weight: ClassVar[int] = LOAD_WEIGHT

    def __init__(self, allocation: DeviceAllocation) -> None:
        self.allocation = allocation

    def sign(self, ctx: CycleContext) -> Signature:
        return UNSIGNABLE if self.allocation.applies(ctx.pod) else ()

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        prepared = self.allocation.prepared(ctx.pod)
        if prepared is None or not prepared.allocating:
            return None
        if ctx.policy.spec.devices.strategy == "Pack":
            total, used = self.allocation.objects.device_usage()
            return [
                MAX_SCORE * min(1.0, (used[n.name] + len(prepared.devices(n.name))) / total[n.name])
                if total[n.name]
                else 0.0
                for n in nodes
            ]
        load = self.allocation.load
        if load is None or not load.scores:
            return None
        scores = []
        for node in nodes:
            figures = [u for d in prepared.devices(node.name) if (u := load.of(d)) is not None]
            busy = sum(figures) / len(figures) if figures else 50.0  # unmeasured: neutral
            scores.append(max(0.0, MAX_SCORE - min(busy, 100.0) * MAX_SCORE / 100.0))
        return scores

    def hot(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[bool] | None:
        load = self.allocation.load
        prepared = self.allocation.prepared(ctx.pod)
        if load is None or not load.scores or prepared is None or not prepared.allocating:
            return None
        threshold = ctx.policy.spec.devices.hot_threshold
        return [
            any((u := load.of(d)) is not None and u > threshold for d in prepared.devices(n.name))
            for n in nodes
        ]


def _allocation_nodes(allocation: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...] | None:
    selector = allocation.get("nodeSelector")
    if not isinstance(selector, Mapping):
        return None  # a network-attached device: any node
    return tuple(parse_node_selector_term(t) for t in selector.get("nodeSelectorTerms") or ())
