"""The volume plugins (VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone) against
hand-made claims, volumes and classes, with kube-scheduler's verdicts and wording (read in the
pinned release's pkg/scheduler/framework/plugins)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, Unschedulable, schedule_one
from loadwise.framework.index import ScoreIndex
from loadwise.framework.plugins.volume_binding.pod_volumes import pod_claims
from loadwise.framework.preemption import preempt
from loadwise.framework.profile import DEFAULT_PROFILE
from loadwise.framework.types import parse_pod
from loadwise.policies.policy import DEFAULT_POLICY
from loadwise.scheduler.state import ClusterState
from loadwise.scheduler.volumes.binder import VolumeBinder
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...helpers import state_with

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
_uid = iter(range(10**9))


def node(name: str, zone: str = "") -> dict[str, Any]:
    raw = manifests.node(name)
    raw["metadata"].setdefault("labels", {})[HOST] = name
    if zone:
        raw["metadata"]["labels"][ZONE] = zone
    return raw


def pod(name: str = "p", *claims: str, ephemeral: str = "", **spec: Any) -> dict[str, Any]:
    raw = manifests.pod(name, namespace="ns")
    raw["metadata"]["uid"] = f"u{next(_uid)}"
    volumes = [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    if ephemeral:
        volumes.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    raw["spec"]["volumes"] = volumes
    raw["spec"].update(spec)
    return raw


def claim(
    name: str,
    cls: str | None = "local",
    size: str = "1Gi",
    volume: str = "",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": size}},
    }
    if cls is not None:
        spec["storageClassName"] = cls
    if volume:
        spec["volumeName"] = volume
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"c-{name}"}
    meta["resourceVersion"] = "1"
    meta["annotations"] = dict(annotations or {})
    if volume:
        meta["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    return {"metadata": meta, "spec": spec, "status": {"phase": "Bound" if volume else "Pending"}}


def local_pv(
    name: str, on: str, size: str = "10Gi", cls: str = "local", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"v-{name}",
            "resourceVersion": "1",
            "labels": labels or {},
        },
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls,
            "local": {"path": f"/mnt/{name}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HOST, "operator": "In", "values": [on]}]}
                    ]
                }
            },
        },
        "status": {"phase": "Available"},
    }


def storage_class(name: str = "local", mode: str = "WaitForFirstConsumer", **extra: Any) -> Any:
    return {
        "metadata": {"name": name},
        "provisioner": extra.pop("provisioner", "kubernetes.io/no-provisioner"),
        "volumeBindingMode": mode,
        **extra,
    }


def cluster(*objects: dict[str, Any], nodes: tuple[str, ...] = ("a", "b", "c")) -> ClusterState:
    state = state_with(*(node(n) for n in nodes))
    storage = state.storage
    for obj in objects:
        if "provisioner" in obj:
            storage.on_class_event("ADDED", obj)
        elif "claimRef" in obj.get("spec", {}) or "capacity" in obj.get("spec", {}):
            storage.on_volume_event("ADDED", obj)
        else:
            storage.on_claim_event("ADDED", obj)
    return state


def decide(state: ClusterState, raw: dict[str, Any]) -> Decision | Unschedulable:
    return schedule_one(parse_pod(raw), state, Basis(DEFAULT_POLICY, {}, 0.0, random.Random(0)))


def feasible(state: ClusterState, raw: dict[str, Any]) -> set[str]:
    from loadwise.framework.context import CycleContext
    from loadwise.framework.cycle import refusal

    ctx = CycleContext(parse_pod(raw), state, Basis(DEFAULT_POLICY))
    return {
        n.name for n in state.nodes.values() if refusal(ctx, n, DEFAULT_PROFILE.filters) is None
    }


# --- VolumeBinding: PreFilter --------------------------------------------------------------------
def test_a_missing_claim_is_refused_at_prefilter_in_kube_schedulers_words() -> None:
    result = decide(cluster(storage_class()), pod("p", "data"))
    assert isinstance(result, Unschedulable)
    assert result.message == '0/3 nodes are available: persistentvolumeclaim "data" not found.'


def test_an_ephemeral_claim_not_created_yet_waits_for_its_controller() -> None:
    result = decide(cluster(storage_class()), pod("p", ephemeral="scratch"))
    assert isinstance(result, Unschedulable)
    assert "waiting for ephemeral volume controller to create the persistentvolumeclaim" in (
        result.message
    )
    assert '"p-scratch"' in result.message


def test_an_ephemeral_claim_of_another_pod_is_refused() -> None:
    state = cluster(storage_class(), local_pv("pv-a", "a"), claim("p-scratch"))
    result = decide(state, pod("p", ephemeral="scratch"))
    assert isinstance(result, Unschedulable)
    assert "PVC ns/p-scratch was not created for pod ns/p (pod is not owner)" in result.message


def test_an_ephemeral_claim_owned_by_the_pod_is_bound_like_any_claim() -> None:
    raw = pod("p", ephemeral="scratch")
    owned = claim("p-scratch")
    owned["metadata"]["ownerReferences"] = [
        {"kind": "Pod", "name": "p", "uid": raw["metadata"]["uid"], "controller": True}
    ]
    state = cluster(storage_class(), local_pv("pv-b", "b"), owned)
    result = decide(state, raw)
    assert isinstance(result, Decision) and result.node == "b"


def test_an_unbound_immediate_claim_waits_for_the_pv_controller() -> None:
    state = cluster(storage_class("fast", "Immediate"), claim("data", "fast"))
    result = decide(state, pod("p", "data"))
    assert isinstance(result, Unschedulable)
    assert result.message == (
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    )


def test_a_claim_of_a_class_that_does_not_exist_counts_as_immediate() -> None:
    result = decide(cluster(claim("data", "nope")), pod("p", "data"))
    assert isinstance(result, Unschedulable)
    assert "pod has unbound immediate PersistentVolumeClaims" in result.message


def test_claims_being_deleted_or_lost_are_refused() -> None:
    going = claim("data")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    result = decide(cluster(storage_class(), going), pod("p", "data"))
    assert isinstance(result, Unschedulable)
    assert 'persistentvolumeclaim "data" is being deleted' in result.message
    lost = claim("data", volume="gone")
    lost["status"]["phase"] = "Lost"
    result = decide(cluster(storage_class(), lost), pod("p", "data"))
    assert isinstance(result, Unschedulable)
    assert 'bound to non-existent persistentvolume "gone"' in result.message


# --- VolumeBinding: Filter -----------------------------------------------------------------------
def test_a_bound_local_volume_pins_the_pod_to_its_node() -> None:
    pv = local_pv("pv-c", "c")
    pv["spec"]["claimRef"] = {"namespace": "ns", "name": "data", "uid": "c-data"}
    pv["status"]["phase"] = "Bound"
    state = cluster(storage_class(), pv, claim("data", volume="pv-c"))
    assert feasible(state, pod("p", "data")) == {"c"}
    result = decide(state, pod("p", "data"))
    assert isinstance(result, Decision) and result.node == "c"


def test_a_bound_claim_whose_volume_affinity_fits_no_node() -> None:
    pv = local_pv("pv-x", "x")
    pv["spec"]["claimRef"] = {"namespace": "ns", "name": "data", "uid": "c-data"}
    state = cluster(storage_class(), pv, claim("data", volume="pv-x"))
    result = decide(state, pod("p", "data"))
    assert isinstance(result, Unschedulable)
    assert result.message == (
        "0/3 nodes are available: 3 node(s) didn't match PersistentVolume's node affinity."
    )


def test_an_unbound_wait_for_first_consumer_claim_goes_where_a_volume_fits() -> None:
    state = cluster(
        storage_class(),
        local_pv("small", "a", "1Gi"),
        local_pv("big", "b", "100Gi"),
        claim("d", size="5Gi"),
    )
    assert feasible(state, pod("p", "d")) == {"b"}
    none_fit = cluster(storage_class(), local_pv("small", "a", "1Gi"), claim("d", size="5Gi"))
    result = decide(none_fit, pod("p", "d"))
    assert isinstance(result, Unschedulable)
    assert result.message == (
        "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind."
    )


def test_the_smallest_fitting_volume_is_chosen_and_pre_bound_volumes_first() -> None:
    from loadwise.framework.plugins.volume_binding.pod_volumes import PodClaims, find_pod_volumes

    state = cluster(
        storage_class(),
        local_pv("v10", "a", "10Gi"),
        local_pv("v2", "a", "2Gi"),
        local_pv("v5", "a", "5Gi"),
        claim("d", size="1Gi"),
        claim("e", size="3Gi"),
    )
    parsed = parse_pod(pod("p", "d", "e"))
    claims = pod_claims(parsed, state.storage)
    assert isinstance(claims, PodClaims)
    plan = find_pod_volumes(parsed, claims, state.nodes["a"], state.storage)
    assert not isinstance(plan, list)
    assert sorted((v.name, c.name) for v, c in plan.bind) == [("v2", "d"), ("v5", "e")]


def test_a_dynamic_class_provisions_where_its_topology_and_capacity_allow() -> None:
    cls = storage_class(
        "dyn",
        provisioner="csi.example",
        allowedTopologies=[{"matchLabelExpressions": [{"key": HOST, "values": ["a", "b"]}]}],
    )
    state = cluster(cls, claim("d", "dyn", size="5Gi"))
    assert feasible(state, pod("p", "d")) == {"a", "b"}
    state.storage.on_driver_event(
        "ADDED", {"metadata": {"name": "csi.example"}, "spec": {"storageCapacity": True}}
    )
    capacity = {
        "metadata": {"name": "cap-a", "namespace": "kube-system"},
        "storageClassName": "dyn",
        "capacity": "10Gi",
        "nodeTopology": {"matchLabels": {HOST: "a"}},
    }
    state.storage.on_capacity_event("ADDED", capacity)
    assert feasible(state, pod("p", "d")) == {"a"}
    result = decide(
        state,
        pod(
            "p",
            "d",
        ),
    )
    assert isinstance(result, Decision) and result.node == "a"


def test_no_provisioner_and_no_volume_means_no_node() -> None:
    state = cluster(storage_class(), claim("d"))
    result = decide(state, pod("p", "d"))
    assert isinstance(result, Unschedulable)
    assert "3 node(s) didn't find available persistent volumes to bind" in result.message


def test_a_claim_already_selected_for_a_node_goes_there() -> None:
    state = cluster(
        storage_class("dyn", provisioner="csi.example"),
        claim("d", "dyn", annotations={"volume.kubernetes.io/selected-node": "b"}),
    )
    assert feasible(state, pod("p", "d")) == {"b"}


def test_a_bound_claim_whose_volume_is_missing() -> None:
    state = cluster(storage_class(), claim("data", volume="pv-gone"))
    result = decide(state, pod("p", "data"))
    assert isinstance(result, Unschedulable)
    # VolumeZone's PreFilter looks the PV up before any Filter runs
    assert result.message == '0/3 nodes are available: persistentvolume "pv-gone" not found.'


# --- VolumeZone, VolumeRestrictions, NodeVolumeLimits ---------------------------------------
def test_a_volume_in_one_zone_keeps_the_pod_in_that_zone() -> None:
    pv = local_pv("pv", "nowhere", labels={ZONE: "z1"})
    del pv["spec"]["nodeAffinity"]
    pv["spec"]["claimRef"] = {"namespace": "ns", "name": "data", "uid": "c-data"}
    state = state_with(node("a", "z1"), node("b", "z2"), node("c"))
    state.storage.on_class_event("ADDED", storage_class())
    state.storage.on_volume_event("ADDED", pv)
    state.storage.on_claim_event("ADDED", claim("data", volume="pv"))
    assert feasible(state, pod("p", "data")) == {"a", "c"}  # c has no zone label at all


def test_a_read_write_once_pod_claim_in_use_refuses_every_node() -> None:
    pv = local_pv("pv", "a")
    pv["spec"]["claimRef"] = {"namespace": "ns", "name": "data", "uid": "c-data"}
    state = cluster(storage_class(), pv, claim("data", volume="pv", modes=("ReadWriteOncePod",)))
    first = pod("first", "data")
    first["spec"]["nodeName"] = "a"
    state.observe_bound(parse_pod(first, placed=True), terminal=False)
    result = decide(state, pod("second", "data"))
    assert isinstance(result, Unschedulable)
    assert result.reasons == {
        "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
        "already in-use by another pod": 3
    }
    state.remove_pod(first["metadata"]["uid"])
    assert feasible(state, pod("second", "data")) == {"a"}


def test_two_pods_may_not_share_a_writable_in_tree_disk_on_a_node() -> None:
    disk = {"name": "d", "gcePersistentDisk": {"pdName": "disk-1"}}
    state = cluster(storage_class())
    first = pod("first", volumes=[disk])
    first["spec"]["nodeName"] = "a"
    state.observe_bound(parse_pod(first, placed=True), terminal=False)
    assert feasible(state, pod("second", volumes=[disk])) == {"b", "c"}
    read_only = {"name": "d", "gcePersistentDisk": {"pdName": "disk-1", "readOnly": True}}
    assert feasible(state, pod("ro", volumes=[read_only])) == {"b", "c"}  # theirs is writable


def test_csi_volume_limits_count_the_volumes_already_on_the_node() -> None:
    cls = storage_class("csi", provisioner="csi.example")
    state = cluster(cls)
    for n in ("a", "b", "c"):
        state.storage.on_csi_node_event(
            "ADDED",
            {
                "metadata": {"name": n},
                "spec": {"drivers": [{"name": "csi.example", "allocatable": {"count": 1}}]},
            },
        )
    pv = {
        "metadata": {"name": "pv1", "resourceVersion": "1"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "storageClassName": "csi",
            "csi": {"driver": "csi.example", "volumeHandle": "h1"},
            "claimRef": {"namespace": "ns", "name": "used", "uid": "c-used"},
        },
        "status": {"phase": "Bound"},
    }
    state.storage.on_volume_event("ADDED", pv)
    state.storage.on_claim_event("ADDED", claim("used", "csi", volume="pv1"))
    state.storage.on_claim_event("ADDED", claim("new", "csi"))
    holder = pod("holder", "used")
    holder["spec"]["nodeName"] = "a"
    state.observe_bound(parse_pod(holder, placed=True), terminal=False)
    verdicts = {}
    from loadwise.framework.context import CycleContext
    from loadwise.framework.cycle import refusal

    ctx = CycleContext(parse_pod(pod("p", "new")), state, Basis(DEFAULT_POLICY))
    for name, n in state.nodes.items():
        failed = refusal(ctx, n, DEFAULT_PROFILE.filters)
        verdicts[name] = failed[1] if failed else None
    assert verdicts == {"a": ["node(s) exceed max volume count"], "b": None, "c": None}
    # the same volume again (a second pod of the claim) needs no new attachment
    assert feasible(state, pod("again", "used")) >= {"a"}


# --- the scheduler's paths agree ------------------------------------------------------------------
def test_the_score_index_and_the_full_cycle_agree_on_volume_pods() -> None:
    state = cluster(
        storage_class(), local_pv("v-b", "b"), local_pv("v-c", "c"), claim("d"), claim("e")
    )
    index = ScoreIndex()
    for name in ("d", "e"):
        raw = pod(f"p-{name}", name)
        full = decide(state, raw)
        fast = index.schedule(
            parse_pod(raw), state, Basis(DEFAULT_POLICY, {}, 0.0, random.Random(0))
        )
        assert isinstance(full, Decision) and isinstance(fast, Decision)
        assert full.node in {"b", "c"} and fast.node in {"b", "c"}


def narrowing(state: ClusterState, raw: dict[str, Any]) -> frozenset[str] | None:
    from loadwise.framework.context import CycleContext

    return DEFAULT_PROFILE.only_hostnames(
        CycleContext(parse_pod(raw), state, Basis(DEFAULT_POLICY))
    )


def test_local_volumes_narrow_the_nodes_to_visit_and_anything_else_does_not() -> None:
    state = cluster(
        storage_class(),
        storage_class("dynamic", provisioner="csi.example.com"),
        local_pv("v-b", "b"),
        local_pv("v-c", "c"),
        claim("d"),
        claim("e", cls="dynamic"),
        nodes=("a", "b", "c", "d", "e"),
    )
    assert narrowing(state, pod("p", "d")) == {"b", "c"}  # the free local PVs' hosts
    assert narrowing(state, pod("p", "e")) is None  # provisioning may pick any node
    assert narrowing(state, pod("p", "d", "e")) == {"b", "c"}
    assert narrowing(state, pod("p")) is None
    anywhere = local_pv("v-any", "b")
    anywhere["spec"]["nodeAffinity"] = None  # a free PV of the class not pinned to a host
    state.storage.on_volume_event("ADDED", anywhere)
    assert narrowing(state, pod("p", "d")) is None


def hosted(name: str, host: str, zone: str) -> dict[str, Any]:
    raw = node(name, zone)
    raw["metadata"]["labels"][HOST] = host
    return raw


def test_the_index_agrees_with_the_full_cycle_when_local_volumes_narrow_the_nodes() -> None:
    """Local PVs on some of 40 nodes (a few hostname labels differ from the node's name, two
    nodes share one), measured loads that make some nodes hot, pods with and without a
    preferred node affinity, each placed with its PVs assumed before the next: the index walks
    or visits the PVs' hosts alone and must decide as the full cycle, passed-over hot nodes
    included; a claim no PV can serve gets the full cycle's message."""
    walked = visited = 0
    for seed in range(30):
        rng = random.Random(seed)
        names = [f"n{i}" for i in range(40)]
        hosts = {n: n if i % 7 else f"host-{n}" for i, n in enumerate(names)}
        hosts["n9"] = hosts["n8"]  # two nodes with one hostname label
        pvs = [
            local_pv(f"v{k}", hosts[rng.choice(names)], size=f"{rng.randint(1, 20)}Gi")
            for k in range(rng.randint(4, 20))
        ]
        claims = [claim(f"c{k}", size=f"{rng.randint(1, 25)}Gi") for k in range(12)]
        state = cluster(storage_class(), *pvs, *claims, nodes=())
        for i, name in enumerate(names):
            state.upsert_node(hosted(name, hosts[name], f"z{i % 3}"))
        samples = {n: NodeSample(rng.random(), rng.random() * 0.6, 0.0) for n in names}
        binder = VolumeBinder(None, state.storage, lambda uid: True, state.nodes.get)  # type: ignore[arg-type]
        index = ScoreIndex()
        within, narrowed = index._walk_within, index._narrowed

        def counted_walk(*args: Any, within: Any = within) -> Any:
            nonlocal walked
            found = within(*args)
            walked += found is not None
            return found

        def counted_narrowing(*args: Any, narrowed: Any = narrowed) -> Any:
            nonlocal visited
            found = narrowed(*args)
            visited += found is not None
            return found

        index._walk_within = counted_walk  # type: ignore[method-assign]
        index._narrowed = counted_narrowing  # type: ignore[method-assign]
        free = list(range(12))
        for k in range(10):
            used = rng.sample(free, min(len(free), rng.randint(1, 2)))
            raw = pod(f"p{k}", *(f"c{j}" for j in used))
            if k % 2:
                term = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}
                preferred = [{"weight": 50, "preference": term}]
                raw["spec"]["affinity"] = {
                    "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}
                }
            parsed = parse_pod(raw)
            basis = Basis(DEFAULT_POLICY, samples, 1.0, random.Random(k))
            full = schedule_one(parsed, state, basis)
            fast = index.schedule(parsed, state, replace(basis, rng=random.Random(k)))
            assert type(fast) is type(full), (seed, k)
            if isinstance(full, Unschedulable):
                assert isinstance(fast, Unschedulable) and fast.message == full.message, (seed, k)
                continue
            assert isinstance(fast, Decision), (seed, k)
            assert (fast.node, fast.hot_skipped, fast.all_hot) == (
                full.node,
                full.hot_skipped,
                full.all_hot,
            ), (seed, k)
            binder.assume(parsed, full.node)
            state.assume(parsed, full.node)
            free = [j for j in free if j not in used]
    assert walked > 40 and visited == 300  # every pod narrowed; a third walked and placed


def test_preemption_does_not_help_a_pod_refused_at_prefilter() -> None:
    state = cluster(storage_class())
    outcome = preempt(
        parse_pod(pod("p", "missing")), state, DEFAULT_PROFILE.filters, [], {}, random.Random(0)
    )
    assert outcome.message == "0/3 nodes are available: 3 Preemption is not helpful for scheduling."


def test_a_volume_pre_bound_to_the_claim_decides_even_where_others_would_fit() -> None:
    """FindMatchingVolume: a PV whose claimRef names the claim is the only candidate; if it
    does not fit the node, no other PV is taken there (the claim's author chose it)."""
    pre = local_pv("pre", "c")
    pre["spec"]["claimRef"] = {"namespace": "ns", "name": "d"}
    state = cluster(storage_class(), pre, local_pv("free-a", "a"), claim("d"))
    assert feasible(state, pod("p", "d")) == {"c"}
    zonal = local_pv("zonal", "x")
    zonal["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] = [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}
    ]
    state = state_with(node("a", "z1"), node("b", "z2"))
    state.storage.on_class_event("ADDED", storage_class())
    state.storage.on_volume_event("ADDED", zonal)
    state.storage.on_claim_event("ADDED", claim("d"))
    assert feasible(state, pod("p", "d")) == {"a"}  # indexed as not pinned to a host


def test_volume_attachments_without_a_pod_count_against_the_limit() -> None:
    """kube-scheduler counts a node's VolumeAttachments of CSI PVs that no pod there accounts
    for (a volume still attached after its pod left)."""
    state = cluster(storage_class("csi", provisioner="csi.example"), claim("new", "csi"))
    state.storage.on_csi_node_event(
        "ADDED",
        {
            "metadata": {"name": "a"},
            "spec": {"drivers": [{"name": "csi.example", "allocatable": {"count": 1}}]},
        },
    )
    attached = {
        "metadata": {"name": "old", "resourceVersion": "1"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "storageClassName": "csi",
            "csi": {"driver": "csi.example", "volumeHandle": "h-old"},
        },
        "status": {"phase": "Released"},
    }
    state.storage.on_volume_event("ADDED", attached)
    assert "a" in feasible(state, pod("p", "new"))
    attachment = {
        "metadata": {"name": "va-1"},
        "spec": {
            "attacher": "csi.example",
            "nodeName": "a",
            "source": {"persistentVolumeName": "old"},
        },
    }
    state.storage.on_attachment_event("ADDED", attachment)
    assert feasible(state, pod("p", "new")) == {"b", "c"}
    state.storage.on_attachment_event("DELETED", attachment)
    assert "a" in feasible(state, pod("p", "new"))


def test_in_tree_volumes_count_under_their_csi_driver_where_the_node_has_a_csinode() -> None:
    """CSI migration (kube-scheduler 1.37's NodeVolumeLimits): an EBS PV bound to a placed pod,
    and an inline GCE PD, count against the CSI drivers' limits of a node with a CSINode."""
    state = cluster(storage_class("gp2", provisioner="kubernetes.io/aws-ebs"), claim("new", "gp2"))
    for name in ("a", "b"):
        state.storage.on_csi_node_event(
            "ADDED",
            {
                "metadata": {"name": name},
                "spec": {
                    "drivers": [
                        {"name": "ebs.csi.aws.com", "allocatable": {"count": 1}},
                        {"name": "pd.csi.storage.gke.io", "allocatable": {"count": 1}},
                    ]
                },
            },
        )
    ebs = {
        "metadata": {"name": "ebs-1", "resourceVersion": "1"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "storageClassName": "gp2",
            "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"},
            "claimRef": {"namespace": "ns", "name": "used", "uid": "c-used"},
        },
        "status": {"phase": "Bound"},
    }
    state.storage.on_volume_event("ADDED", ebs)
    state.storage.on_claim_event("ADDED", claim("used", "gp2", volume="ebs-1"))
    holder = pod("holder", "used")
    holder["spec"]["nodeName"] = "a"
    state.observe_bound(parse_pod(holder, placed=True), terminal=False)
    # a new EBS claim (its class names the in-tree plugin): a is full, c has no CSINode
    assert feasible(state, pod("p", "new")) == {"b", "c"}
    disk = {"name": "d", "gcePersistentDisk": {"pdName": "disk-1"}}
    user = pod("gce", volumes=[disk])
    user["spec"]["nodeName"] = "b"
    state.observe_bound(parse_pod(user, placed=True), terminal=False)
    other = {"name": "d", "gcePersistentDisk": {"pdName": "disk-2"}}
    assert feasible(state, pod("q", volumes=[other])) == {"a", "c"}  # b's one GCE slot taken


def _migrated_csinode(state: ClusterState, name: str, plugins: str) -> None:
    annotations = {"storage.alpha.kubernetes.io/migrated-plugins": plugins}
    state.storage.on_csi_node_event(
        "ADDED", {"metadata": {"name": name, "annotations": annotations}, "spec": {"drivers": []}}
    )


def _bound_in_tree_pv(source: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "disk", "resourceVersion": "1", **meta},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "storageClassName": "std",
            "claimRef": {"namespace": "ns", "name": "data", "uid": "c-data"},
            **source,
        },
        "status": {"phase": "Bound"},
    }


def test_a_bound_in_tree_volume_needs_the_csi_zone_key_where_its_plugin_is_migrated() -> None:
    """kube-scheduler's tryTranslatePVToCSI: on a node whose CSINode lists the plugin as
    migrated, the PV's zone requirement is tested under the CSI driver's topology key."""
    ebs_zone = "topology.ebs.csi.aws.com/zone"
    b = node("b", "us-east-1a")
    b["metadata"]["labels"][ebs_zone] = "us-east-1a"
    state = state_with(node("a", "us-east-1a"), b, node("c", "us-east-1a"))
    for name in ("a", "b"):
        _migrated_csinode(state, name, "kubernetes.io/gce-pd,kubernetes.io/aws-ebs")
    pv = _bound_in_tree_pv({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"}})
    pv["spec"]["nodeAffinity"] = {
        "required": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-east-1a"]}]}
            ]
        }
    }
    state.storage.on_class_event("ADDED", storage_class("std", "Immediate"))
    state.storage.on_volume_event("ADDED", pv)
    state.storage.on_claim_event("ADDED", claim("data", "std", volume="disk"))
    # a: migrated, no CSI zone label; c: no CSINode, so the in-tree affinity is tested as is
    assert feasible(state, pod("p", "data")) == {"b", "c"}
    result = decide(state, pod("p", "data"))
    assert isinstance(result, Decision) and result.node in {"b", "c"}


def test_a_gce_disk_zoned_by_labels_only_gets_the_csi_zone_and_a_bad_region_is_an_error() -> None:
    gke_zone = "topology.gke.io/zone"
    beta_zone = "failure-domain.beta.kubernetes.io/zone"
    nodes = []
    for name, zone in (("a", "us-central1-a"), ("b", "us-central1-c"), ("c", "us-central1-b")):
        raw = node(name)
        raw["metadata"]["labels"][beta_zone] = zone
        if name != "c":  # c lacks the CSI driver's key: VolumeZone takes it, the PV's affinity not
            raw["metadata"]["labels"][gke_zone] = zone
        nodes.append(raw)
    state = state_with(*nodes)
    for name in ("a", "b", "c"):
        _migrated_csinode(state, name, "kubernetes.io/gce-pd")
    regional = "us-central1-a__us-central1-b"
    pv = _bound_in_tree_pv({"gcePersistentDisk": {"pdName": "pd"}}, labels={beta_zone: regional})
    state.storage.on_class_event("ADDED", storage_class("std", "Immediate"))
    state.storage.on_volume_event("ADDED", pv)
    state.storage.on_claim_event("ADDED", claim("data", "std", volume="disk"))
    assert feasible(state, pod("p", "data")) == {"a"}
    pv["metadata"]["labels"] = {beta_zone: "us-central1-a__europe-west1-b"}
    state.storage.on_volume_event("MODIFIED", pv)
    assert feasible(state, pod("p", "data")) == set()  # kube-scheduler's error status
