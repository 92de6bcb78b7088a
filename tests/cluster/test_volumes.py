"""Pods with claims, end to end against the real API server and kube-controller-manager (its PV
binder, PVC protection and ephemeral-volume controllers): loadwise binds local PVs of a
WaitForFirstConsumer class, the PV controller completes the binding, and the pod runs on the
volume's node; a provisioner that fails is retried, one that succeeds ends it; a pod pinned by
its volume to a hot node still goes there."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from loadwise.explain import _explain
from loadwise_dev import manifests
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.kube import Kube, KubeError

from .conftest import OperatorFactory
from .util import events, wait_bound, wait_event, wait_operator_metrics

pytestmark = pytest.mark.cluster

PVS = "/api/v1/persistentvolumes"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
LOCAL, DYNAMIC = "lw-local", "lw-dynamic"
FAKE_PROVISIONER = "test.loadwise.io/fake"  # played by the test itself


def local_pv(name: str, node: str, size: str = "1Gi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": LOCAL,
            "local": {"path": f"/mnt/{name}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }


def claim(name: str, ns: str, cls: str = LOCAL, size: str = "1Gi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls,
            "resources": {"requests": {"storage": size}},
        },
    }


def with_volumes(raw: dict[str, Any], *volumes: dict[str, Any]) -> dict[str, Any]:
    raw["spec"]["volumes"] = list(volumes)
    raw["spec"]["containers"][0]["volumeMounts"] = [
        {"name": v["name"], "mountPath": f"/data/{v['name']}"} for v in volumes
    ]
    return raw


@pytest.fixture
async def storage(kube: Kube) -> AsyncIterator[None]:
    """Two classes (local PVs without a provisioner; one the test provisions by hand), and
    every PV removed afterwards (they are cluster-scoped: the namespace does not take them)."""
    for name, provisioner in ((LOCAL, "kubernetes.io/no-provisioner"), (DYNAMIC, FAKE_PROVISIONER)):
        with contextlib.suppress(KubeError):
            await kube.create(
                CLASSES,
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": name},
                    "provisioner": provisioner,
                    "volumeBindingMode": "WaitForFirstConsumer",
                },
            )
    yield
    for pv in await kube.list(PVS):
        with contextlib.suppress(KubeError):
            await kube.delete(f"{PVS}/{pv['metadata']['name']}")


async def wait_claim_bound(kube: Kube, ns: str, name: str, timeout: float = 30) -> str:
    async def bound() -> str | None:
        got = await kube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}")
        if (got.get("status") or {}).get("phase") == "Bound":
            return str(got["spec"]["volumeName"])
        return None

    return await wait_for(bound, timeout, what=f"claim {name} bound")


async def test_local_volumes_are_bound_where_the_pod_goes_and_pin_it_there(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, storage: None
) -> None:
    await local_cluster.add_node(kube, "kw-cool", cpu_usage=0.1)
    await local_cluster.add_node(kube, "kw-hot", cpu_usage=0.95)
    await local_cluster.add_node(kube, "kw-none", cpu_usage=0.1)
    for pv, node in (("pv-cool", "kw-cool"), ("pv-hot", "kw-hot")):
        await kube.create(PVS, local_pv(pv, node))
    await local_cluster.wait_metrics({"kw-cool": 0.1, "kw-hot": 0.95})
    async with operator() as runtime:
        await wait_operator_metrics(runtime, {"kw-cool": 0.1, "kw-hot": 0.95})
        # Two feasible nodes (a PV each): the cool one is chosen, its PV bound to the claim.
        await kube.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim("data-0", ns))
        pod = with_volumes(
            manifests.pod("db-0", namespace=ns),
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
        )
        await kube.create(f"/api/v1/namespaces/{ns}/pods", pod)
        assert (await wait_bound(kube, ns, ["db-0"]))["db-0"] == "kw-cool"
        assert await wait_claim_bound(kube, ns, "data-0") == "pv-cool"
        pv = await kube.get(f"{PVS}/pv-cool")
        assert pv["spec"]["claimRef"]["name"] == "data-0"
        assert pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"

        # Only the hot node has a free PV now: the pod goes there all the same, and says so.
        await kube.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim("data-1", ns))
        pinned = with_volumes(
            manifests.pod("db-1", namespace=ns),
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-1"}},
        )
        await kube.create(f"/api/v1/namespaces/{ns}/pods", pinned)
        assert (await wait_bound(kube, ns, ["db-1"]))["db-1"] == "kw-hot"
        assert await wait_claim_bound(kube, ns, "data-1") == "pv-hot"
        scheduled = await wait_event(kube, ns, "db-1", "Scheduled")
        assert "every feasible node is hot" in scheduled["message"]
        # explain reads the claims too: the other nodes fail on the volume's node affinity
        output = await _explain(f"{ns}/db-1", local_cluster.operator_config())
        assert f"{ns}/db-1 -> kw-hot" in output
        assert "node(s) didn't match PersistentVolume's node affinity" in output

        # The claim of db-0 is bound: a new pod of it (a StatefulSet's pod re-created) goes
        # back to the volume's node.
        await kube.delete_pod_now(ns, "db-0")
        again = with_volumes(
            manifests.pod("db-0b", namespace=ns),
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
        )
        await kube.create(f"/api/v1/namespaces/{ns}/pods", again)
        assert (await wait_bound(kube, ns, ["db-0b"]))["db-0b"] == "kw-cool"

        # No PV left anywhere: kube-scheduler's reason, and the pod waits.
        await kube.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim("data-2", ns))
        waiting = with_volumes(
            manifests.pod("db-2", namespace=ns),
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-2"}},
        )
        await kube.create(f"/api/v1/namespaces/{ns}/pods", waiting)
        failed = await wait_event(kube, ns, "db-2", "FailedScheduling")
        assert "node(s) didn't find available persistent volumes to bind" in failed["message"]
        # A PV appears on the cool node: the pod is placed without any other event.
        await kube.create(PVS, local_pv("pv-late", "kw-none"))
        assert (await wait_bound(kube, ns, ["db-2"]))["db-2"] == "kw-none"


async def test_a_missing_claim_and_an_ephemeral_volume(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, storage: None
) -> None:
    await local_cluster.add_node(kube, "kw-a")
    await kube.create(PVS, local_pv("pv-eph", "kw-a"))
    async with operator():
        missing = with_volumes(
            manifests.pod("lonely", namespace=ns),
            {"name": "data", "persistentVolumeClaim": {"claimName": "nobody"}},
        )
        await kube.create(f"/api/v1/namespaces/{ns}/pods", missing)
        failed = await wait_event(kube, ns, "lonely", "FailedScheduling")
        assert failed["message"].startswith(
            '0/1 nodes are available: persistentvolumeclaim "nobody" not found.'
        )
        # Generic ephemeral volume: the controller makes the claim, owned by the pod; then
        # it is bound as any claim, and goes with the pod.
        template = {
            "metadata": {"labels": {"scratch": "yes"}},
            "spec": claim("x", ns)["spec"],
        }
        scratch = with_volumes(
            manifests.pod("job", namespace=ns),
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}},
        )
        await kube.create(f"/api/v1/namespaces/{ns}/pods", scratch)
        assert (await wait_bound(kube, ns, ["job"]))["job"] == "kw-a"
        assert await wait_claim_bound(kube, ns, "job-scratch") == "pv-eph"


async def test_a_failed_provisioning_is_retried_and_a_successful_one_binds(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory, storage: None
) -> None:
    """The test plays the provisioner of a dynamic class: first it fails (removes the
    selected-node annotation, as external-provisioner does), then it provisions a PV on the
    node loadwise selected; the PV controller binds it and loadwise then binds the pod."""
    await local_cluster.add_node(kube, "kw-a")
    await local_cluster.add_node(kube, "kw-b")
    path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
    await kube.create(path, claim("dyn", ns, DYNAMIC))
    async with operator(volume_bind_timeout=60.0):
        pod = with_volumes(
            manifests.pod("app", namespace=ns),
            {"name": "data", "persistentVolumeClaim": {"claimName": "dyn"}},
        )
        await kube.create(f"/api/v1/namespaces/{ns}/pods", pod)

        async def selected() -> str | None:
            got = await kube.get(f"{path}/dyn")
            return (got["metadata"].get("annotations") or {}).get(
                "volume.kubernetes.io/selected-node"
            )

        first = await wait_for(selected, 30, what="selected-node set")
        assert first in ("kw-a", "kw-b")
        unbound = await kube.get(f"/api/v1/namespaces/{ns}/pods/app")
        assert not unbound["spec"].get("nodeName")  # PreBind waits: the pod is not bound yet
        # the provisioner fails: it takes the annotation back
        await kube.merge_patch(
            f"{path}/dyn",
            {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": None}}},
        )

        async def prebind_failed() -> Any:
            found = await events(kube, ns, "app", "FailedScheduling")
            return next((e for e in found if "provisioning failed" in e["message"]), None)

        failed = await wait_for(prebind_failed, 30, what="PreBind failure reported")
        assert 'running PreBind plugin "VolumeBinding"' in failed["message"]
        node = await wait_for(selected, 30, what="selected-node set again")
        pv = local_pv("pv-dyn", node)
        pv["spec"]["storageClassName"] = DYNAMIC
        got = await kube.get(f"{path}/dyn")
        pv["spec"]["claimRef"] = {
            "namespace": ns,
            "name": "dyn",
            "uid": got["metadata"]["uid"],
        }
        await kube.create(PVS, pv)
        assert (await wait_bound(kube, ns, ["app"], timeout=60))["app"] == node
        assert await wait_claim_bound(kube, ns, "dyn") == "pv-dyn"


async def test_a_statefulset_gets_volumes_from_a_real_provisioner_where_loadwise_puts_it(
    kube: Kube, local_cluster: LocalCluster, ns: str, operator: OperatorFactory
) -> None:
    """Rancher's local-path-provisioner (a process here; its helper pods completed by KWOK):
    each replica's claim is provisioned on the node loadwise chose, the cooler one first, and a
    replica deleted comes back to its volume's node."""
    from loadwise_dev.local_path import STORAGE_CLASS, LocalPath

    provisioner = await LocalPath(local_cluster.cp).start(kube)
    try:
        await local_cluster.add_node(kube, "kw-cool", cpu_usage=0.1)
        await local_cluster.add_node(kube, "kw-warm", cpu_usage=0.5)
        await local_cluster.wait_metrics({"kw-cool": 0.1, "kw-warm": 0.5})
        async with operator() as runtime:
            await wait_operator_metrics(runtime, {"kw-cool": 0.1, "kw-warm": 0.5})
            template = manifests.pod("x", namespace=ns)
            template["spec"]["containers"][0]["volumeMounts"] = [
                {"name": "data", "mountPath": "/data"}
            ]
            claim_template = claim("data", ns, STORAGE_CLASS)
            del claim_template["apiVersion"], claim_template["kind"]
            claim_template["metadata"] = {"name": "data"}
            await kube.create(
                f"/apis/apps/v1/namespaces/{ns}/statefulsets",
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "metadata": {"name": "db"},
                    "spec": {
                        "replicas": 1,
                        "serviceName": "db",
                        "selector": {"matchLabels": {"app": "db"}},
                        "template": {
                            "metadata": {"labels": {"app": "db"}},
                            "spec": template["spec"],
                        },
                        "volumeClaimTemplates": [claim_template],
                    },
                },
            )
            assert (await wait_bound(kube, ns, ["db-0"], timeout=60))["db-0"] == "kw-cool"
            volume = await wait_claim_bound(kube, ns, "data-db-0")
            pv = await kube.get(f"{PVS}/{volume}")
            terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
            assert terms[0]["matchExpressions"][0]["values"] == ["kw-cool"]
            assert pv["spec"]["hostPath"]["path"].startswith(str(provisioner.volumes))
            assert pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == (
                "rancher.io/local-path"
            )
            # The cool node turns hot: the replica re-created still goes back to its volume.
            assert local_cluster.usage is not None
            await local_cluster.usage.set_background(kube, "kw-cool", 0.95, 0.0)
            await local_cluster.wait_metrics({"kw-cool": 0.95})
            await wait_operator_metrics(runtime, {"kw-cool": 0.95})
            uid = (await kube.get(f"/api/v1/namespaces/{ns}/pods/db-0"))["metadata"]["uid"]
            await kube.delete_pod_now(ns, "db-0")

            async def recreated() -> str | None:
                with contextlib.suppress(KubeError):
                    got = await kube.get(f"/api/v1/namespaces/{ns}/pods/db-0")
                    if got["metadata"]["uid"] != uid and got["spec"].get("nodeName"):
                        return str(got["spec"]["nodeName"])
                return None

            assert await wait_for(recreated, 60, what="db-0 re-created and bound") == "kw-cool"
    finally:
        provisioner.stop()
