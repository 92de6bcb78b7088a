"""Differential test of gangs against the real kube-scheduler 1.37 with GangScheduling: the same
groups placed, refused or left waiting, each placed group's members feasible where loadwise
put them, and (with priorities) groups preempting as a whole. The larger run is
`bench/gang-differential`."""

from __future__ import annotations

import pytest

from loadwise_dev.benches import gang_differential
from loadwise_dev.cluster import LocalCluster
from loadwise_dev.kube import Kube

from .conftest import OperatorFactory
from .test_differential import kube_scheduler  # noqa: F401 - the fixture, used by name

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kube_scheduler")]


@pytest.mark.parametrize("preemption", [False, True], ids=["placement", "preemption"])
async def test_loadwise_places_the_groups_kube_scheduler_places(
    kube: Kube, local_cluster: LocalCluster, clean: None, operator: OperatorFactory,
    preemption: bool,
) -> None:  # fmt: skip
    await gang_differential.priority_classes(kube)
    async with operator():
        report = await gang_differential.run(kube, 7, 4, 4, preemption)
    result = report.as_dict()
    assert report.agree == report.groups == 16, result
    # Every outcome must occur, or agreement would mean little.
    assert set(result["loadwise_verdicts"]) == {"placed", "refused", "waiting"}, result
    if preemption:
        assert result["pods_evicted_by_group_preemption"]["loadwise"] >= 1, result
