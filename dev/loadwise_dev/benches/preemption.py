"""Differential bench for preemption: loadwise against the real kube-scheduler (DefaultPreemption).

Each generated case is a small cluster (2-6 nodes) full of bound pods of several priorities, some
PodDisruptionBudgets, and one preemptor that fits nowhere as things stand. The case is built
twice from the same description (one namespace, node set and zone values per copy, e.g. `c17-ks`
and `c17-lw`); each copy's preemptor carries a nodeSelector on its copy's label, so every other
copy's nodes are unresolvable for it (never preemption candidates), and the spread constraints'
default `nodeAffinityPolicy: Honor` counts its own copy's nodes only. One copy's preemptor is
scheduled by kube-scheduler, the other by loadwise; the outcomes are read through the API:
nominated node (`status.nominatedNodeName`) and victims (pods of the copy on that node that got
the DisruptionTarget/PreemptionByScheduler condition or a deletionTimestamp: victims carry a
grace period and no kubelet runs, so they stay Terminating and the preemptor stays pending).
Victims on another node, from an earlier preemption for the same pod, are kept apart: counted
for kube-scheduler (it does this now and then), a disagreement for loadwise.

Determinism: every pod gets `status.startTime` (kube-scheduler uses time.Now() for a missing one
when ranking nodes) and, within a node, distinct ones; with distinct start times across the case
kube-scheduler's node ranking has no ties (its last criterion, the highest-priority victims'
earliest start time, names one pod). "Twin" cases copy a node with its pods and start times, so
ties exist there on purpose: kube-scheduler then picks among the tied nodes at random (Go map
order), and two answers on different nodes agree when their rank tuples are equal and the second
side's victims are what kube-scheduler itself picks on that node (asked by a third, "pin" copy
whose other nodes carry an untolerated taint: unresolvable, yet still counted by spreading,
whose default nodeTaintsPolicy is Ignore).

PodDisruptionBudgets use an integer minAvailable over Ready pods with no owners, for which the
disruption controller's status is predictable: disruptionsAllowed = max(0, ready - minAvailable)
(expectedPods = matching pods). The bench's own control plane runs no kube-controller-manager
(it would only cost CPU), so the harness writes that status itself; under the test suite's
control plane the controller computes the same figures, and the harness waits for them.

`python -m loadwise_dev.benches.preemption [--seed S] [--cases N] [--json PATH] [--self-check]`
(bench/preemption); `--self-check` gives both copies to kube-scheduler (must agree ~100%),
`--only ks` runs kube-scheduler's copy alone (the mix and the harness, without loadwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from loadwise.kube.times import stamp

from .. import manifests
from ..engines import preemption_devices as devices
from ..kube import Kube, KubeError

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
CASE_LABEL = "loadwise.bench/case"  # each copy's nodes; its preemptor selects them
PIN_TAINT = "loadwise.bench/pin"  # the pin copy's other nodes (no preemptor tolerates it)
DEDICATED = {"key": "loadwise.bench/dedicated", "value": "x", "effect": "NoSchedule"}
EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z: start times are this plus a per-pod offset
APPS, TEAMS = ("web", "db", "cache"), ("a", "b")
VICTIM_GRACE = 30  # seconds: a deleted victim stays Terminating (no kubelet) and is seen
SETTLE = 1.0  # seconds for the schedulers' other informers (nodes, budgets) after `synced`
NO_PREEMPTION_GRACE = 2.0  # after Unschedulable, seconds without a nomination: none
STABLE = 1.0  # seconds a nominated preemptor's victim set must stay unchanged

# name -> (value, preemptionPolicy). Pods with no class have priority 0 (no global default).
PRIORITY_CLASSES: dict[str, tuple[int, str]] = {
    "pe-low": (100, "PreemptLowerPriority"),
    "pe-mid": (500, "PreemptLowerPriority"),
    "pe-high": (1000, "PreemptLowerPriority"),
    "pe-top": (2000, "PreemptLowerPriority"),
    "pe-top-never": (2000, "Never"),
}


POD_LEVEL_STREAM = 0x2837
RESIZE_STREAM = 0x1287
NOMINATION_STREAM = 0x5278
VOLUME_STREAM = 0x7010  # the preemptor's volume, on a stream of its own likewise
CLAIM = "data"  # the preemptor's claim in its copy's namespace, bound to the PV <namespace>-pv
GATE = "loadwise.bench/gate"  # holds a pod nominated by another component


def priority_of(klass: str | None) -> int:
    return PRIORITY_CLASSES[klass][0] if klass else 0


# --- the case description ---------------------------------------------------------------------
@dataclass
class NodeSpec:
    cpu_m: int
    mem_mi: int
    max_pods: int
    zone: str | None  # e.g. "z1"; the copy's value is f"{copy}-z1"
    disk: str
    tainted: bool  # untolerated NoSchedule: unresolvable for the preemptor


@dataclass
class PodSpec:
    name: str
    node: int
    klass: str | None
    cpu_m: int
    mem_mi: int
    app: str
    team: str
    start: int  # seconds after EPOCH
    anti: str | None = None  # required hostname anti-affinity against pods with this app
    spread: bool = False  # a zone DoNotSchedule constraint (inert once bound; realism)
    pod_level: bool = False  # its requests at the pod level (KEP-2837), same amounts
    resized_m: int = 0  # an in-place resize in flight: cpu allocated (KEP-1287); 0: none

    @property
    def priority(self) -> int:
        return priority_of(self.klass)

    @property
    def labels(self) -> dict[str, str]:
        return {"app": self.app, "team": self.team}


@dataclass
class PdbSpec:
    name: str
    selector: dict[str, str]
    min_available: int
    matching: int  # pods it selects, all Ready
    allowed: int  # the status the disruption controller computes: max(0, matching - min)


@dataclass
class PreemptorSpec:
    klass: str
    cpu_m: int
    mem_mi: int
    app: str
    team: str
    disk: str | None = None  # nodeSelector disk=...
    anti: str | None = None  # required hostname anti-affinity against this app
    spread: bool = False  # zone maxSkew 1 DoNotSchedule over its own app
    pod_level: bool = False  # its requests at the pod level (KEP-2837), same amounts
    spread_selects_all: bool = False  # its spread's labelSelector is {} (counts no pod)

    @property
    def priority(self) -> int:
        return priority_of(self.klass)


@dataclass
class HeldSpec:
    """A pending pod that another component nominated to a node (KEP-5278), kept gated;
    each copy has its own, named for that copy's scheduler (a nominator tracks its own
    scheduler's pods only). Of the preemptor's priority or above it holds its room in the dry
    run; below it, its nomination is cleared where the preemptor is nominated."""

    node: int
    klass: str | None
    cpu_m: int
    mem_mi: int
    app: str
    team: str

    @property
    def priority(self) -> int:
        return priority_of(self.klass)


@dataclass
class VolumeSpec:
    """The preemptor's claim, bound to a local PV pinned to `node`: the other nodes are
    unresolvable for it (VolumeBinding). With `holder`, that placed pod (on `node`) mounts the
    claim too, which is then ReadWriteOncePod: every node refuses the preemptor
    (VolumeRestrictions) until the holder is a victim."""

    node: int
    holder: str | None = None


@dataclass
class Case:
    index: int
    nodes: list[NodeSpec]
    pods: list[PodSpec]
    pdbs: list[PdbSpec]
    preemptor: PreemptorSpec
    tags: set[str] = field(default_factory=set)
    held: HeldSpec | None = None
    volume: VolumeSpec | None = None
    devices: devices.DeviceSpec | None = None  # GPUs (engines/preemption_devices.py)

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "tags": sorted(self.tags),
            "nodes": [asdict(n) for n in self.nodes],
            "pods": [{**asdict(p), "priority": p.priority} for p in self.pods],
            "pdbs": [asdict(p) for p in self.pdbs],
            "preemptor": {**asdict(self.preemptor), "priority": self.preemptor.priority},
            "held": {**asdict(self.held), "priority": self.held.priority} if self.held else None,
            "volume": asdict(self.volume) if self.volume else None,
            "devices": asdict(self.devices) if self.devices else None,
        }


# --- generation -------------------------------------------------------------------------------
def _resolvable(node: NodeSpec, pre: PreemptorSpec) -> bool:
    return not node.tainted and (pre.disk is None or node.disk == pre.disk)


def _fits(case: Case, i: int) -> bool:
    """Would the preemptor fit on node i as things stand? Resources, pod count, taints,
    nodeSelector and hostname anti-affinity both ways; spreading ignored, which only refuses
    more, so a case this calls full everywhere is full everywhere."""
    node, pre = case.nodes[i], case.preemptor
    on = [p for p in case.pods if p.node == i]
    return (
        _resolvable(node, pre)
        and node.cpu_m - sum(p.cpu_m for p in on) >= pre.cpu_m
        and node.mem_mi - sum(p.mem_mi for p in on) >= pre.mem_mi
        and len(on) < node.max_pods
        and not any(pre.anti == p.app or p.anti == pre.app for p in on)
    )


def generate(rng: random.Random, index: int) -> Case:
    """One case. The mix is tuned so kube-scheduler preempts in most cases, and refuses in
    enough: preemptionPolicy Never, only unresolvable nodes, too few lower-priority pods."""
    nodes = [
        NodeSpec(
            cpu_m=rng.choice([2000, 4000]),
            mem_mi=rng.choice([4096, 8192]),
            max_pods=rng.randint(4, 10),
            zone=f"z{rng.randint(0, 2)}",
            disk=rng.choice(["ssd", "ssd", "hdd"]),
            tainted=rng.random() < 0.15,
        )
        for _ in range(rng.randint(2, 6))
    ]
    starts = iter(rng.sample(range(100_000), 200))
    pods: list[PodSpec] = []
    for i, node in enumerate(nodes):
        cpu, mem = 0, 0
        for _ in range(rng.randint(1, min(node.max_pods, 6))):
            pod = PodSpec(
                name=f"p{len(pods)}",
                node=i,
                klass=rng.choice([None, "pe-low", "pe-low", "pe-mid", "pe-mid", "pe-high"]),
                cpu_m=rng.choice([250, 500, 750, 1000]),
                mem_mi=rng.choice([256, 512, 1024, 2048]),
                app=rng.choice(APPS),
                team=rng.choice(TEAMS),
                start=next(starts),
                anti=rng.choice(APPS) if rng.random() < 0.1 else None,
                spread=rng.random() < 0.1,
            )
            if cpu + pod.cpu_m > node.cpu_m or mem + pod.mem_mi > node.mem_mi:
                break
            cpu, mem = cpu + pod.cpu_m, mem + pod.mem_mi
            pods.append(pod)
    tags: set[str] = set()
    if rng.random() < 0.12 and len(nodes) < 6:
        # A twin of node 0, with the cheapest victims (priority 0): ties in kube's ranking.
        nodes[0].tainted = False
        for pod in pods:
            if pod.node == 0:
                pod.klass = None
        nodes.append(copy.deepcopy(nodes[0]))
        twin = len(nodes) - 1
        for pod in [p for p in pods if p.node == 0]:
            pods.append(replace(pod, name=f"p{len(pods)}", node=twin))
        tags.add("twin")
    r = rng.random()
    klass = "pe-top" if r < 0.8 else "pe-high" if r < 0.9 else "pe-top-never"
    pre = PreemptorSpec(
        klass=klass, cpu_m=100, mem_mi=128, app=rng.choice(APPS), team=rng.choice(TEAMS)
    )
    if rng.random() < 0.25:
        pre.disk = "ssd"
    if rng.random() < 0.2:
        pre.anti = rng.choice(APPS)
    if rng.random() < 0.2:
        pre.spread = True
    if rng.random() < 0.08:  # nothing resolvable: no candidate at all
        for node in nodes:
            node.tainted = True
    case = Case(index, nodes, pods, [], pre, tags)
    resolvable = [i for i, n in enumerate(nodes) if _resolvable(n, pre)]
    mode = rng.choices(["cpu", "pods", "blocked"], [0.6, 0.15, 0.25])[0]
    if mode == "blocked" and "twin" in tags:
        mode = "cpu"  # relabelling one twin's pods would break the tie
    if mode == "pods":  # full by pod count
        for i in resolvable:
            nodes[i].max_pods = sum(p.node == i for p in pods)
    elif mode == "blocked":  # small, refused by hostname anti-affinity alone
        pre.anti = pre.anti or rng.choice(APPS)
        for i in resolvable:
            on = [p for p in pods if p.node == i]
            if on and _fits(case, i):
                rng.choice(on).app = pre.anti
    if mode == "cpu" or any(_fits(case, i) for i in range(len(nodes))):
        free = [
            nodes[i].cpu_m - sum(p.cpu_m for p in pods if p.node == i)
            for i in (resolvable or range(len(nodes)))
        ]
        pre.cpu_m = max(free) + rng.choice([100, 250, 500, 1000])
    assert not any(_fits(case, i) for i in range(len(nodes)))
    case.pdbs = _pdbs(rng, pods)
    _tag(case)
    return case


def _pdbs(rng: random.Random, pods: Sequence[PodSpec]) -> list[PdbSpec]:
    pdbs = []
    for k in range(rng.choice([0, 0, 1, 1, 2])):
        selector = {"app": rng.choice(APPS)} if rng.random() < 0.7 else {"team": rng.choice(TEAMS)}
        matching = sum(_selects(selector, p) for p in pods)
        min_available = max(0, matching - rng.choice([0, 0, 1, 2]))
        allowed = max(0, matching - min_available) if matching else 0
        pdbs.append(PdbSpec(f"pdb{k}", selector, min_available, matching, allowed))
    return pdbs


def _selects(selector: dict[str, str], pod: PodSpec) -> bool:
    return all(pod.labels.get(k) == v for k, v in selector.items())


def _tag(case: Case) -> None:
    pre = case.preemptor
    lower = [p for p in case.pods if p.priority < pre.priority]
    if any(_selects(b.selector, p) for b in case.pdbs for p in lower):
        case.tags.add("pdb")
    if pre.klass == "pe-top-never":
        case.tags.add("never")
    if not any(_resolvable(n, pre) for n in case.nodes):
        case.tags.add("unresolvable-only")
    if pre.anti or any(p.anti == pre.app for p in case.pods):
        case.tags.add("affinity")
    if pre.spread:
        case.tags.add("spread")


# --- the case's objects, per copy -------------------------------------------------------------
def node_name(case: Case, tag: str, i: int) -> str:
    return f"c{case.index}-{tag}-n{i}"


def namespace(case: Case, tag: str) -> str:
    return f"c{case.index}-{tag}"


def build_nodes(case: Case, tag: str, pin: int | None = None) -> list[dict[str, Any]]:
    """The copy's nodes; with `pin`, every other node gets an untolerated NoSchedule taint."""
    out = []
    copy_name = namespace(case, tag)
    for i, spec in enumerate(case.nodes):
        labels = {CASE_LABEL: copy_name, "disk": spec.disk}
        if spec.zone:
            labels[ZONE] = f"{copy_name}-{spec.zone}"
        body = manifests.node(
            node_name(case, tag, i),
            cpu=f"{spec.cpu_m}m",
            memory=f"{spec.mem_mi}Mi",
            pods=spec.max_pods,
            labels=labels,
        )
        taints = [dict(DEDICATED)] if spec.tainted else []
        if pin is not None and i != pin:
            taints.append({"key": PIN_TAINT, "value": "other", "effect": "NoSchedule"})
        if taints:
            body["spec"]["taints"] = taints
        out.append(body)
    return out


def _constrain(
    body: dict[str, Any], anti: str | None, spread: bool, app: str, selects_all: bool = False
) -> None:
    """Required anti-affinity by hostname to pods of app `anti`, and a zone spread (maxSkew 1,
    DoNotSchedule) of the pod's own app, or with `selects_all` an empty selector: the
    constraints victims and preemptors may carry."""
    if anti:
        term = {"labelSelector": {"matchLabels": {"app": anti}}, "topologyKey": HOST}
        body["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    if spread:
        body["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {} if selects_all else {"matchLabels": {"app": app}},
            }
        ]


def build_pod(case: Case, tag: str, spec: PodSpec) -> dict[str, Any]:
    """A placed pod: bound at creation (its scheduler never sees it pending)."""
    body = manifests.pod(
        spec.name,
        namespace=namespace(case, tag),
        scheduler_name="default-scheduler",
        cpu=f"{spec.cpu_m}m",
        memory=f"{spec.mem_mi}Mi",
        labels=spec.labels,
        priority_class=spec.klass,
    )
    body["spec"]["nodeName"] = node_name(case, tag, spec.node)
    body["spec"]["terminationGracePeriodSeconds"] = VICTIM_GRACE
    _constrain(body, spec.anti, spec.spread, spec.app)
    if case.volume is not None and case.volume.holder == spec.name:
        body["spec"]["volumes"] = [_claim_volume()]
    return _at_pod_level(body) if spec.pod_level else body


def _claim_volume() -> dict[str, Any]:
    return {"name": CLAIM, "persistentVolumeClaim": {"claimName": CLAIM}}


async def make_volume(kube: Kube, case: Case, tag: str) -> None:
    """The copy's claim and PV, bound as the PV controller leaves them (the bench's own
    control plane runs none: both statuses are written here)."""
    assert case.volume is not None
    ns = namespace(case, tag)
    modes = ["ReadWriteOncePod"] if case.volume.holder else ["ReadWriteOnce"]
    claim = await kube.create(
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "metadata": {"name": CLAIM, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {
                "accessModes": modes,
                "storageClassName": "pe-local",
                "volumeName": f"{ns}-pv",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    host = {"key": HOST, "operator": "In", "values": [node_name(case, tag, case.volume.node)]}
    await kube.create(
        "/api/v1/persistentvolumes",
        {
            "metadata": {"name": f"{ns}-pv"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": modes,
                "storageClassName": "pe-local",
                "local": {"path": "/mnt/data"},
                "claimRef": {"namespace": ns, "name": CLAIM, "uid": claim["metadata"]["uid"]},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [host]}]}},
            },
        },
    )
    await kube.merge_patch(
        f"/api/v1/persistentvolumes/{ns}-pv/status", {"status": {"phase": "Bound"}}
    )
    status = {"phase": "Bound", "accessModes": modes, "capacity": {"storage": "1Gi"}}
    await kube.merge_patch(
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{CLAIM}/status", {"status": status}
    )


async def remove_volume(kube: Kube, case: Case, tag: str) -> None:
    """Without a controller-manager their protection finalizers would never be removed."""
    ns = namespace(case, tag)
    for path in (
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{CLAIM}",
        f"/api/v1/persistentvolumes/{ns}-pv",
    ):
        with contextlib.suppress(KubeError):
            await kube.merge_patch(path, {"metadata": {"finalizers": None}})
            await kube.delete(path)


def pod_status(spec: PodSpec) -> dict[str, Any]:
    """What a kubelet would report: Running and Ready (the disruption controller counts Ready
    pods as healthy) since its start time; with a resize in flight, the allocated cpu."""
    started = stamp(EPOCH + spec.start)
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": started}
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    status: dict[str, Any] = {"phase": "Running", "startTime": started, "conditions": conditions}
    if spec.resized_m:
        status["containerStatuses"] = [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
                "allocatedResources": {"cpu": f"{spec.resized_m}m"},
                "resources": {"requests": {"cpu": f"{spec.cpu_m}m"}},
            }
        ]
    return {"status": status}


def _pending(
    case: Case, tag: str, scheduler: str, name: str, spec: PreemptorSpec | HeldSpec
) -> dict[str, Any]:
    """A pod of the copy waiting for `scheduler`, with the spec's requests, labels and class."""
    return manifests.pod(
        name,
        namespace=namespace(case, tag),
        scheduler_name=scheduler,
        cpu=f"{spec.cpu_m}m",
        memory=f"{spec.mem_mi}Mi",
        labels={"app": spec.app, "team": spec.team},
        priority_class=spec.klass,  # admission sets spec.priority and preemptionPolicy from it
    )


def build_preemptor(case: Case, tag: str, scheduler: str) -> dict[str, Any]:
    pre = case.preemptor
    body = _pending(case, tag, scheduler, "preemptor", pre)
    selector = {CASE_LABEL: namespace(case, tag)}
    if pre.disk:
        selector["disk"] = pre.disk
    body["spec"]["nodeSelector"] = selector
    _constrain(body, pre.anti, pre.spread, pre.app, pre.spread_selects_all)
    if case.volume is not None:
        body["spec"]["volumes"] = [_claim_volume()]
    if case.devices is not None:
        devices.claim_for(body)
    return _at_pod_level(body) if pre.pod_level else body


def build_held(case: Case, tag: str, scheduler: str) -> dict[str, Any]:
    assert case.held is not None
    body = _pending(case, tag, scheduler, "held", case.held)
    body["spec"]["schedulingGates"] = [{"name": GATE}]
    return body


def _at_pod_level(body: dict[str, Any]) -> dict[str, Any]:
    """The same requests, declared at the pod level with none in the container: both
    schedulers must count them alike (fit, victims' freed room, the reprieve)."""
    container = body["spec"]["containers"][0]
    body["spec"]["resources"] = {"requests": container["resources"].pop("requests")}
    return body


def build_pdb(case: Case, tag: str, spec: PdbSpec) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": spec.name, "namespace": namespace(case, tag)},
        "spec": {"minAvailable": spec.min_available, "selector": {"matchLabels": spec.selector}},
    }


def pdb_status(spec: PdbSpec, generation: int) -> dict[str, Any]:
    """The disruption controller's figures for an integer minAvailable over Ready pods."""
    return {
        "status": {
            "observedGeneration": generation,
            "disruptionsAllowed": spec.allowed,
            "currentHealthy": spec.matching,
            "desiredHealthy": spec.min_available,
            "expectedPods": spec.matching,
            "conditions": [
                {
                    "type": "DisruptionAllowed",
                    "status": "True" if spec.allowed > 0 else "False",
                    "reason": "SufficientPods" if spec.allowed > 0 else "InsufficientPods",
                    "message": "",
                    "observedGeneration": generation,
                    "lastTransitionTime": stamp(),
                }
            ],
        }
    }


# --- kube-scheduler's ranking, from a case and a victim set ------------------------------------
Rank = tuple[int, int, int, int, int]


def rank(case: Case, node: int, victims: Iterable[str]) -> Rank:
    """kube-scheduler's pickOneNodeForPreemption criteria for `victims` on `node`, each as
    compared (equal tuples tie): PDB violations, highest victim priority, sum of priorities,
    number of victims, earliest start time among the highest-priority victims. A pod violates
    when, going through all the node's lower-priority pods in importance order (priority, then
    start time), a PDB selecting it falls below 0 allowed (filterPodsWithPDBViolation)."""
    chosen = set(victims)
    potential = sorted(
        (p for p in case.pods if p.node == node and p.priority < case.preemptor.priority),
        key=lambda p: (-p.priority, p.start),
    )
    allowed = [b.allowed for b in case.pdbs]
    violating = set()
    for pod in potential:
        for k, budget in enumerate(case.pdbs):
            if _selects(budget.selector, pod):
                allowed[k] -= 1
                if allowed[k] < 0:
                    violating.add(pod.name)
    picked = [p for p in potential if p.name in chosen]
    if not picked:
        return (0, 0, 0, 0, 0)
    top = max(p.priority for p in picked)
    return (
        len(violating & chosen),
        top,
        sum(p.priority for p in picked),
        len(picked),
        min(p.start for p in picked if p.priority == top),
    )


def plausible(case: Case, node: int, victims: frozenset[str]) -> bool:
    """Victims are some of the node's pods of lower priority than the preemptor."""
    eligible = {
        p.name for p in case.pods if p.node == node and p.priority < case.preemptor.priority
    }
    return bool(victims) and victims <= eligible


# --- outcomes ---------------------------------------------------------------------------------
Kind = Literal["none", "preempted", "bound", "timeout", "error"]


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    node: int | None = None  # the index of the nominated (or bound) node
    victims: frozenset[str] = frozenset()  # on that node
    message: str = ""  # the scheduler's PodScheduled message when it did not preempt
    # Victims on other nodes: an earlier preemption for the same pod. kube-scheduler does this
    # now and then (seen once in seed 7's twin case 20: p0 on node 0, then p4 on node 2).
    elsewhere: frozenset[str] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "node": self.node,
            "victims": sorted(self.victims),
            "elsewhere": sorted(self.elsewhere),
            "message": self.message,
        }


def _is_victim(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return True
    return any(
        c.get("type") == "DisruptionTarget" and c.get("reason") == "PreemptionByScheduler"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _node_index(name: str) -> int:
    return int(name.rsplit("-n", 1)[1])


def _split(kind: Kind, node: str, marked: dict[str, str]) -> Outcome:
    """The outcome on `node`: its victims, and those marked on other nodes apart."""
    here = frozenset(name for name, on in marked.items() if on == node)
    return Outcome(kind, _node_index(node), here, elsewhere=frozenset(marked) - here)


async def observe(kube: Kube, ns: str, timeout: float = 30.0) -> Outcome:
    """Poll the copy until its scheduler has acted: nominated with a victim set unchanged for
    STABLE seconds, or Unschedulable with no nomination for NO_PREEMPTION_GRACE seconds."""
    deadline = time.monotonic() + timeout
    refused_at: float | None = None
    last: tuple[str, frozenset[str]] | None = None
    last_change = 0.0
    while time.monotonic() < deadline:
        pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
        pre = next((p for p in pods if p["metadata"]["name"] == "preemptor"), None)
        if pre is None:
            return Outcome("error", message="the preemptor is gone")
        marked = {
            p["metadata"]["name"]: p["spec"].get("nodeName", "")
            for p in pods
            if p["metadata"]["name"] != "preemptor" and _is_victim(p)
        }
        victims = frozenset(marked)
        now = time.monotonic()
        if pre["spec"].get("nodeName"):
            return _split("bound", pre["spec"]["nodeName"], marked)
        nominated = (pre.get("status") or {}).get("nominatedNodeName") or ""
        if nominated:
            refused_at = None
            if last != (nominated, victims):
                last, last_change = (nominated, victims), now
            elif victims and now - last_change >= STABLE:
                return _split("preempted", nominated, marked)
        elif manifests.marked_unschedulable(pre) and not victims:
            refused_at = refused_at or now
            if now - refused_at >= NO_PREEMPTION_GRACE:
                message = next(
                    c.get("message", "")
                    for c in pre["status"]["conditions"]
                    if c.get("type") == "PodScheduled"
                )
                return Outcome("none", message=message)
        await asyncio.sleep(0.2)
    return Outcome("timeout", victims=victims)


# --- running a case ---------------------------------------------------------------------------
@dataclass
class Env:
    """How cases are run on a given control plane."""

    kube: Kube
    pdb_controller: bool  # kube-controller-manager runs: wait for its PDB status
    sides: tuple[str, ...]  # schedulerName per copy: ("default-scheduler", "loadwise-scheduler")
    tags: tuple[str, ...]  # copy tags, e.g. ("ks", "lw")


async def ensure_priority_classes(kube: Kube) -> None:
    for name, (value, policy) in PRIORITY_CLASSES.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": policy,
        }
        try:
            await kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", body)
        except KubeError as exc:
            if exc.status != 409:
                raise


async def _gather(items: Iterable[Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*items))


async def setup_copy(
    env: Env, case: Case, tag: str, scheduler: str, pin: int | None = None
) -> None:
    """Namespace, nodes, bound pods with their status, PDBs with theirs (see the module
    docstring), the pod held by another component's nomination (after the PDBs settled: the
    disruption controller counts pending pods in expectedPods, never in disruptionsAllowed),
    everything but the preemptor."""
    kube, ns = env.kube, namespace(case, tag)
    await kube.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    # Pod admission needs the `default` ServiceAccount; without a controller-manager nobody
    # else creates it (with one, whoever comes second gets 409).
    with contextlib.suppress(KubeError):
        await kube.create(
            f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "default"}}
        )
    await _gather(kube.create("/api/v1/nodes", n) for n in build_nodes(case, tag, pin))
    if case.volume is not None:
        await make_volume(kube, case, tag)

    uids: dict[str, str] = {}

    async def place(spec: PodSpec) -> None:
        made = await kube.create(f"/api/v1/namespaces/{ns}/pods", build_pod(case, tag, spec))
        uids[spec.name] = made["metadata"]["uid"]
        await kube.merge_patch(f"/api/v1/namespaces/{ns}/pods/{spec.name}/status", pod_status(spec))

    await _gather(place(p) for p in case.pods)
    if case.devices is not None:
        names = [node_name(case, tag, i) for i in range(len(case.nodes))]
        node_of = {p.name: p.node for p in case.pods}
        await devices.make(kube, case.devices, ns, names, uids, node_of)
    base = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    for budget in case.pdbs:
        created = await kube.create(base, build_pdb(case, tag, budget))
        if not env.pdb_controller:
            generation = created["metadata"].get("generation", 1)
            await kube.merge_patch(f"{base}/{budget.name}/status", pdb_status(budget, generation))

    async def budgets_settled() -> bool:
        for budget in case.pdbs:
            status = (await kube.get(f"{base}/{budget.name}")).get("status") or {}
            if (status.get("disruptionsAllowed", 0), status.get("expectedPods", 0)) != (
                budget.allowed,
                budget.matching,
            ) or not status.get("observedGeneration"):
                return False
        return True

    deadline = time.monotonic() + 30
    while not await budgets_settled():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ns}: PodDisruptionBudget status never as predicted")
        await asyncio.sleep(0.2)
    if case.held is not None:
        await kube.create(f"/api/v1/namespaces/{ns}/pods", build_held(case, tag, scheduler))
        nominated = {"status": {"nominatedNodeName": node_name(case, tag, case.held.node)}}
        await kube.merge_patch(f"/api/v1/namespaces/{ns}/pods/held/status", nominated)


async def teardown_copy(env: Env, case: Case, tag: str) -> None:
    """Force-delete (the stand-in for a kubelet confirming termination) and remove the rest."""
    kube, ns = env.kube, namespace(case, tag)
    with contextlib.suppress(KubeError):
        await kube.delete_pod_now(ns, "preemptor")
        await kube.delete_all_pods(ns)
        for budget in case.pdbs:
            await kube.delete(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{budget.name}")
    if case.volume is not None:
        await remove_volume(kube, case, tag)
    if case.devices is not None:
        names = [node_name(case, tag, i) for i in range(len(case.nodes))]
        await devices.remove(kube, case.devices, ns, names)
    for i in range(len(case.nodes)):
        with contextlib.suppress(KubeError):
            await kube.delete(f"/api/v1/nodes/{node_name(case, tag, i)}")
    with contextlib.suppress(KubeError):
        # Without a controller-manager the namespace stays Terminating, empty: harmless.
        await kube.delete(f"/api/v1/namespaces/{ns}")


async def synced(kube: Kube, case: Case, tag: str, scheduler: str, timeout: float = 60.0) -> None:
    """Wait until `scheduler` has seen the copy's pods: a pod it cannot place, created after
    them, is marked Unschedulable by it only once its pod informer delivered every earlier pod
    and pod status (one ordered watch stream). On a loaded machine a fixed pause was not
    always enough: kube-scheduler once judged a case before it saw the victims ("Preemption is
    not helpful"), where loadwise preempted."""
    ns = namespace(case, tag)
    body = manifests.pod("sync", namespace=ns, scheduler_name=scheduler, cpu="1m", memory="1Mi")
    body["spec"]["nodeSelector"] = {CASE_LABEL: "no-such-copy"}  # no node: nothing to preempt
    await kube.create(f"/api/v1/namespaces/{ns}/pods", body)
    deadline = time.monotonic() + timeout
    while not manifests.marked_unschedulable(await kube.get(f"/api/v1/namespaces/{ns}/pods/sync")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ns}: {scheduler} never judged the sync pod")
        await asyncio.sleep(0.1)
    await kube.delete_pod_now(ns, "sync")


async def run_copies(
    env: Env, case: Case, copies: Sequence[tuple[str, str]], pin: int | None = None
) -> list[Outcome]:
    """Build each (tag, schedulerName) copy, then create their preemptors together."""
    try:
        await _gather(setup_copy(env, case, tag, scheduler, pin) for tag, scheduler in copies)
        await _gather(synced(env.kube, case, tag, scheduler) for tag, scheduler in copies)
        await asyncio.sleep(SETTLE)
        await _gather(
            env.kube.create(
                f"/api/v1/namespaces/{namespace(case, tag)}/pods",
                build_preemptor(case, tag, scheduler),
            )
            for tag, scheduler in copies
        )
        return await _gather(observe(env.kube, namespace(case, tag)) for tag, _ in copies)
    finally:
        await _gather(teardown_copy(env, case, tag) for tag, _ in copies)


# --- comparison -------------------------------------------------------------------------------
@dataclass
class Verdict:
    agree: bool
    how: str  # "none", "same", "tie", or why they disagree


async def compare(env: Env, case: Case, a: Outcome, b: Outcome) -> Verdict:
    """`a` is kube-scheduler's. Its victims on a node it no longer nominates (a second
    preemption for the same pod) are its own behaviour, counted in the report's mix, and its
    last nomination is what is compared; loadwise evicting on two nodes is a disagreement."""
    if b.elsewhere:
        return Verdict(False, "victims on another node too")
    if a.kind == b.kind == "none":
        return Verdict(True, "none")
    if a.kind != "preempted" or b.kind != "preempted":
        return Verdict(False, f"{a.kind} vs {b.kind}")
    assert a.node is not None and b.node is not None
    if a.node == b.node:
        same = a.victims == b.victims
        return Verdict(same, "same" if same else "same node, other victims")
    if rank(case, a.node, a.victims) != rank(case, b.node, b.victims):
        return Verdict(False, "other node, not tied")
    if not (plausible(case, a.node, a.victims) and plausible(case, b.node, b.victims)):
        return Verdict(False, "tied, implausible victims")
    # The first side is kube-scheduler's: its choice is valid by definition. The second side's
    # is checked by asking kube-scheduler for its choice on that node alone.
    [pinned] = await run_copies(env, case, [("pin", "default-scheduler")], pin=b.node)
    if pinned.kind == "preempted" and (pinned.node, pinned.victims) == (b.node, b.victims):
        return Verdict(True, "tie")
    return Verdict(False, f"tied, but kube-scheduler on node {b.node} alone: {pinned.as_dict()}")


@dataclass
class Report:
    seed: int
    cases: int = 0
    agree: int = 0
    mix: Counter[str] = field(default_factory=Counter)
    how: Counter[str] = field(default_factory=Counter)
    preempted: list[int] = field(default_factory=lambda: [0, 0])
    none_both: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # every case, in brief
    seconds: float = 0.0
    sides: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    @property
    def agreement(self) -> float:
        return self.agree / self.cases if self.cases else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "cases": self.cases,
            "sides": list(self.sides),
            "agreement": round(self.agreement, 4),
            **{f"preempted_{tag}": n for tag, n in zip(self.tags, self.preempted, strict=False)},
            "none_both": self.none_both,
            "mix": dict(sorted(self.mix.items())),
            "verdicts": dict(sorted(self.how.items())),
            "disagreements": self.disagreements,
            "seconds": round(self.seconds, 1),
            "outcomes": sorted(self.outcomes, key=lambda o: int(o["case"])),
        }


async def run(
    kube: Kube,
    seed: int,
    cases: int,
    sides: Sequence[str] = ("default-scheduler", "loadwise-scheduler"),
    tags: Sequence[str] = ("ks", "lw"),
    pdb_controller: bool = False,
    concurrency: int = 6,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Generate `cases` cases from `seed` and run each on every side; the first side must be
    kube-scheduler's (the oracle). With one side only the mix and its outcomes are recorded."""
    env = Env(kube, pdb_controller, tuple(sides), tuple(tags))
    await ensure_priority_classes(kube)
    await devices.ensure_class(kube)
    rng = random.Random(seed)
    generated = [generate(rng, i) for i in range(cases)]
    # Pod-level requests on a stream of their own: a seed's cases stay what they were.
    levels = random.Random(seed ^ POD_LEVEL_STREAM)
    resizes = random.Random(seed ^ RESIZE_STREAM)
    nominations = random.Random(seed ^ NOMINATION_STREAM)
    volumes = random.Random(seed ^ VOLUME_STREAM)
    device_rng = random.Random(seed ^ devices.DEVICE_STREAM)
    for case in generated:
        gpus = devices.generate(device_rng, len(case.nodes), [(p.name, p.node) for p in case.pods])
        if gpus is not None and "twin" not in case.tags:
            case.devices = gpus
            case.tags.add("devices")
            low = {p.name for p in case.pods if p.priority < case.preemptor.priority}
            if low & set(gpus.held):
                case.tags.add("device held by a lower-priority pod")
        if volumes.random() < 0.3:
            node = volumes.randrange(len(case.nodes))
            on = [p.name for p in case.pods if p.node == node]
            holder = volumes.choice(on) if on and volumes.random() < 0.5 else None
            case.volume = VolumeSpec(node, holder)
            case.tags.add("read-write-once-pod" if holder else "volume")
        for pod in case.pods:
            pod.pod_level = levels.random() < 0.25
            if resizes.random() < 0.15:  # allocated grown or shrunk, not yet actuated
                pod.resized_m = max(1, int(pod.cpu_m * resizes.choice([0.5, 2])))
        case.preemptor.pod_level = levels.random() < 0.25
        if case.preemptor.pod_level or any(p.pod_level for p in case.pods):
            case.tags.add("pod-level requests")
        if any(p.resized_m for p in case.pods):
            case.tags.add("resizing")
        if nominations.random() < 0.3:
            case.held = HeldSpec(
                node=nominations.randrange(len(case.nodes)),
                klass=nominations.choice(["pe-top", "pe-top", "pe-high", "pe-low", None]),
                cpu_m=nominations.choice([100, 250, 500]),
                mem_mi=nominations.choice([128, 256, 512]),
                app=nominations.choice(APPS),
                team=nominations.choice(TEAMS),
            )
            case.tags.add("nominated by another")
        if case.preemptor.spread and nominations.random() < 0.4:
            case.preemptor.spread_selects_all = True
            case.tags.add("spread selecting all")
    report = Report(seed=seed, sides=tuple(sides), tags=tuple(tags))
    gate = asyncio.Semaphore(concurrency)
    started = time.monotonic()

    async def one(case: Case) -> None:
        async with gate:
            try:
                outcomes = await run_copies(env, case, list(zip(tags, sides, strict=True)))
                verdict = (
                    await compare(env, case, outcomes[0], outcomes[1])
                    if len(outcomes) == 2
                    else Verdict(outcomes[0].kind in ("none", "preempted"), outcomes[0].kind)
                )
            except (KubeError, TimeoutError, OSError) as exc:  # one case, not the whole run
                outcomes = [Outcome("error", message=str(exc)) for _ in tags]
                verdict = Verdict(False, f"error: {type(exc).__name__}")
        report.cases += 1
        report.agree += verdict.agree
        report.how[verdict.how] += 1
        for k, o in enumerate(outcomes):
            report.preempted[k] += o.kind == "preempted"
        report.none_both += all(o.kind == "none" for o in outcomes)
        first = outcomes[0].kind
        report.mix["ks preempted" if first == "preempted" else f"ks {first}"] += 1
        report.mix.update(case.tags)
        if outcomes[0].elsewhere:
            report.mix["ks victims on two nodes"] += 1
        report.outcomes.append(
            {
                "case": case.index,
                "tags": sorted(case.tags),
                "verdict": verdict.how,
                **{tag: o.as_dict() for tag, o in zip(tags, outcomes, strict=True)},
            }
        )
        if not verdict.agree:
            report.disagreements.append(
                {
                    "case": case.describe(),
                    "why": verdict.how,
                    **{tag: o.as_dict() for tag, o in zip(tags, outcomes, strict=True)},
                }
            )
        if progress:
            progress(report.cases, cases)

    await _gather(one(c) for c in generated)
    report.seconds = time.monotonic() - started
    return report


# --- the bench --------------------------------------------------------------------------------
async def _run_local(seed: int, cases: int, mode: str, concurrency: int) -> Report:
    """A throw-away control plane without kube-controller-manager (see the module docstring),
    kube-scheduler, and the operator in-process unless only kube-scheduler is asked."""
    import logging

    from ..cluster import LocalCluster, running_operator
    from ..controlplane import ControlPlane

    logging.basicConfig(level=logging.WARNING)
    cp = ControlPlane()
    cluster = LocalCluster(prometheus=False, cp=cp)
    try:
        cp.start(controller_manager=False)
        cp.start_scheduler(qps=1000, burst=1000)
        sides: tuple[str, ...]
        tags: tuple[str, ...]
        if mode == "self-check":
            sides, tags = ("default-scheduler", "default-scheduler"), ("ks", "ks2")
        elif mode == "only-ks":
            sides, tags = ("default-scheduler",), ("ks",)
        else:
            sides, tags = (
                ("default-scheduler", cluster.operator_config().scheduler_name),
                (
                    "ks",
                    "lw",
                ),
            )

        def progress(done: int, total: int) -> None:
            if done % 50 == 0 or done == total:
                print(f"  {done}/{total} cases", flush=True)

        async with cluster.kube() as kube:
            await cluster.install_crd(kube)
            if mode != "compare":
                return await run(kube, seed, cases, sides, tags, False, concurrency, progress)
            async with running_operator(cluster.operator_config(), cp.kubeconfig):
                return await run(kube, seed, cases, sides, tags, False, concurrency, progress)
    finally:
        cluster.stop()


def summary(report: Report) -> str:
    r = report.as_dict()
    lines = [
        f"preemption differential ({' vs '.join(report.sides)}): {report.agree}/{report.cases} "
        f"cases agree ({report.agreement:.1%}); seed {report.seed}; {r['seconds']}s",
        "  mix: " + ", ".join(f"{k} {v}" for k, v in sorted(report.mix.items())),
        "  verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(report.how.items())),
        f"  preempted: {' / '.join(str(n) for n in report.preempted[: len(report.sides)])}; "
        f"neither preempted: {report.none_both}",
    ]
    for d in report.disagreements:
        outcomes = "; ".join(
            f"{tag}: {d[tag]['kind']} node {d[tag]['node']} victims {d[tag]['victims']}"
            for tag in ("ks", "lw", "ks2")
            if tag in d
        )
        lines.append(f"  disagreement: case {d['case']['index']} ({d['why']}): {outcomes}")
    return "\n".join(lines)


def main() -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="loadwise vs kube-scheduler preemption")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=6, help="cases at a time")
    parser.add_argument("--json", dest="json_path")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--self-check", action="store_true", help="kube-scheduler on both copies (harness check)"
    )
    group.add_argument("--only", choices=["ks"], help="kube-scheduler's copy alone")
    args = parser.parse_args()
    mode = "self-check" if args.self_check else "only-ks" if args.only else "compare"
    report = asyncio.run(_run_local(args.seed, args.cases, mode, args.concurrency))
    print(summary(report))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report.as_dict(), indent=1))
    return 0 if report.agreement >= 0.99 else 1


if __name__ == "__main__":
    raise SystemExit(main())
