"""A session-wide real control plane (etcd + kube-apiserver + controller-manager on loopback), KWOK
playing the kubelet of its simulated nodes and serving their usage as cAdvisor series, and a real
Prometheus scraping them; the operator runs in-process per test."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from loadwise.runtime import Runtime
from loadwise_dev.cluster import LocalCluster, running_operator
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.kwok import Kwok

POLICIES = "/apis/loadwise.io/v1alpha1/schedulingpolicies"
_names = itertools.count()


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(kwok_usage=True).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kwok(local_cluster: LocalCluster) -> Kwok:
    """KWOK playing the kubelet of the session cluster's simulated nodes (add_node)."""
    assert local_cluster.kwok is not None
    return local_cluster.kwok


@pytest.fixture(scope="session")
async def kube(local_cluster: LocalCluster) -> AsyncIterator[Kube]:
    async with local_cluster.kube() as client:
        await local_cluster.install_crd(client)
        yield client


@pytest.fixture
async def clean(kube: Kube, local_cluster: LocalCluster) -> None:
    """Each test starts with no nodes and no policies, so placements are its own."""
    for policy in await kube.list(POLICIES):
        name = policy["metadata"]["name"]
        with contextlib.suppress(KubeError):
            await kube.delete(f"{POLICIES}/{name}")
    nodes = await kube.list("/api/v1/nodes")
    for node in nodes:
        await local_cluster.remove_node(kube, node["metadata"]["name"])
    if nodes and local_cluster.kwok is not None:
        # A new KWOK: its usage counters are per pod *name* and outlive the pod (a background
        # pod made again for a node of the same name would start with a jump of the whole
        # time between), and it can miss a deletion (Kwok.restart).
        await asyncio.to_thread(local_cluster.kwok.restart)


@pytest.fixture
async def ns(kube: Kube, local_cluster: LocalCluster, clean: None) -> AsyncIterator[str]:
    name = f"t{next(_names)}"
    await kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    await local_cluster.wait_namespace(kube, name)
    yield name
    # Pods on a node that is only an API object have no kubelet to finish a graceful deletion:
    # force-delete the pods, then the namespace.
    await kube.delete_all_pods(name)
    await kube.delete(f"/api/v1/namespaces/{name}")


OperatorFactory = Callable[..., contextlib.AbstractAsyncContextManager[Runtime]]


@pytest.fixture
def operator(local_cluster: LocalCluster) -> OperatorFactory:
    """`async with operator(**config_overrides) as runtime:` runs the operator in this loop."""

    def start(**overrides: Any) -> contextlib.AbstractAsyncContextManager[Runtime]:
        return running_operator(
            local_cluster.operator_config(**overrides), local_cluster.cp.kubeconfig
        )

    return start
