"""Differential test: loadwise's filter semantics against the real kube-scheduler (the oracle),
on generated clusters and pods. The larger run is `bench/differential`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadwise_dev.benches import differential
from loadwise_dev.cluster import LocalCluster
from loadwise_dev.kube import Kube

from .conftest import OperatorFactory

pytestmark = pytest.mark.cluster


@pytest.fixture
def kube_scheduler(local_cluster: LocalCluster) -> Iterator[None]:
    # Only for this test: elsewhere, default-scheduler pods must stay unscheduled.
    local_cluster.cp.start_scheduler(qps=1000, burst=1000)
    try:
        yield
    finally:
        local_cluster.cp.stop_process("kube-scheduler")


async def test_loadwise_choices_are_feasible_for_kube_scheduler(
    kube: Kube,
    local_cluster: LocalCluster,
    clean: None,
    operator: OperatorFactory,
    kube_scheduler: None,
) -> None:
    async with operator():
        report = await differential.run(
            kube,
            seed=20261122,
            scenarios=4,
            pods_per_scenario=20,
            wait_namespace=lambda ns: local_cluster.wait_namespace(kube, ns),
        )
    assert report.disagreements == []
    # The generator must exercise both outcomes, or agreement would mean little.
    assert report.placed >= 20 and report.refused >= 5, report.as_dict()
    assert report.owned >= 10, report.as_dict()  # system default spreading applies to them
    assert report.pod_level >= 10, report.as_dict()  # pod-level requests (KEP-2837)
    assert report.resized >= 5, report.as_dict()  # placed pods resizing (KEP-1287)
