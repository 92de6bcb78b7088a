"""Differential test: loadwise's preemption against the real kube-scheduler's DefaultPreemption,
on generated cases (each built twice, one copy per scheduler). The larger run is
`bench/preemption`.

This suite's control plane runs kube-controller-manager, whose disruption controller owns
PodDisruptionBudget status: the cases' budgets (integer minAvailable over Ready pods) are those
whose status it computes predictably, and the harness waits for exactly that status
(`pdb_controller=True`) instead of writing it.

Agreement must be exact: kube-scheduler is deterministic on these cases except among nodes its
ranking ties, and there the harness accepts another tied node only when kube-scheduler itself,
given that node alone, picks the same victims.
"""

from __future__ import annotations

import pytest

from loadwise_dev.benches import preemption as preemption_diff
from loadwise_dev.cluster import LocalCluster
from loadwise_dev.kube import Kube

from .conftest import OperatorFactory
from .test_differential import kube_scheduler  # noqa: F401 - the fixture, used by name

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kube_scheduler")]


async def test_loadwise_preempts_as_kube_scheduler_does(
    kube: Kube, local_cluster: LocalCluster, clean: None, operator: OperatorFactory
) -> None:
    async with operator():
        report = await preemption_diff.run(
            kube,
            seed=7,
            cases=40,
            sides=("default-scheduler", local_cluster.operator_config().scheduler_name),
            pdb_controller=True,
        )
    assert report.agreement == 1.0, preemption_diff.summary(report)
    # The generator must exercise both outcomes and the rules that shape victims, or
    # agreement would mean little.
    mix = report.mix
    assert mix["ks preempted"] >= 20 and mix["ks none"] >= 5, preemption_diff.summary(report)
    for tag in (
        "pdb",
        "never",
        "unresolvable-only",
        "affinity",
        "spread",
        "twin",
        "pod-level requests",
        "resizing",
        "devices",
        "device held by a lower-priority pod",
    ):
        assert mix[tag] >= 1, (tag, preemption_diff.summary(report))
