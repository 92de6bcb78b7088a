"""bench/gang's pure parts: the scenario as a function of its arguments (room for about 60% of
the groups at once, arrivals faster than the fleet drains), the members' bodies, what a group's
watched pods make of its times, the figures (partial spans, the most at once, deadlocks, groups
per second), the ground truth per node, and the table."""

from __future__ import annotations

from types import ModuleType

import pytest

from loadwise_dev.engines import gang
from loadwise_dev.engines.gang import GroupTimes, PodSeen
from loadwise_dev.kwok_usage import BACKGROUND_NS

from ...helpers import load_bench


def _bench() -> ModuleType:
    return load_bench("gang")


def test_scenario_is_a_function_of_its_arguments_and_leaves_room_for_60_percent() -> None:
    one = gang.make_scenario(1, 50)
    assert one == gang.make_scenario(1, 50)
    assert one != gang.make_scenario(2, 50)
    assert one.fit_share == pytest.approx(gang.FIT_SHARE, abs=0.03)
    assert all(4 <= len(g.members) - 1 <= 32 for g in one.groups)
    assert all(g.minimum == len(g.members) for g in one.groups)  # all members by default
    assert {g.tenant for g in one.groups} == set(one.tenants) == set(gang.tenant_names(4))
    arrivals = [g.arrival for g in one.groups]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0 and arrivals[-1] <= one.window
    # Twice as fast as the fleet could run them: the work over the window is twice the fleet.
    work = sum(g.cpu * g.runtime for g in one.groups)
    assert work / one.window / one.capacity == pytest.approx(2.0, rel=0.02)
    assert {n.cores for n in one.nodes} <= set(gang.CORES)


def test_scenario_with_a_group_count_and_a_minimum_share() -> None:
    some = gang.make_scenario(3, 10, groups=7, min_share=0.5)
    assert len(some.groups) == 7
    for group in some.groups:
        executors = len(group.members) - 1
        assert group.minimum == 1 + -(-executors // 2)


def test_background_drifts_within_bounds() -> None:
    node = gang.NodePlan("n", 4, base=0.75, swing=0.2, period=60, phase=0, memory=0.2)
    assert node.background(0) == 0.75
    assert node.background(15) == 0.95  # the crest, a quarter period in
    low = gang.NodePlan("n", 4, base=0.05, swing=0.1, period=60, phase=0, memory=0.2)
    assert low.background(45) == 0.02  # never below


def test_member_body_joins_its_group_and_declares_its_use() -> None:
    scenario = gang.make_scenario(1, 5, groups=1)
    group = scenario.groups[0]
    body = gang.member_body(group, group.members[0], 2, "loadwise-scheduler")
    assert body["metadata"]["name"] == "r2-g000-driver"
    assert body["metadata"]["namespace"] == group.tenant
    assert body["spec"]["schedulingGroup"] == {"podGroupName": "r2-g000"}
    assert body["spec"]["schedulerName"] == "loadwise-scheduler"
    assert body["metadata"]["annotations"]["kwok.x-k8s.io/usage-cpu"] == (
        f"{group.members[0].use_cpu}m"
    )


def test_a_tenants_last_job_is_drawn_apart_from_the_groups() -> None:
    """The prelude's past job: executors of the tenant, in no group, using 25-65% of their
    requests, the same for every run of a seed and scheduler but for their names."""
    scenario = gang.make_scenario(1, 5, groups=3)
    tenant = scenario.tenants[0]
    bodies = gang.past_job(scenario, tenant, 8, 1, "kube-scheduler")
    assert len(bodies) == 8 and gang.make_scenario(1, 5, groups=3) == scenario
    assert {b["metadata"]["namespace"] for b in bodies} == {tenant}
    assert bodies[0]["metadata"]["name"] == "r1-past-00"
    for body in bodies:
        spec = body["spec"]
        assert "schedulingGroup" not in spec and spec["schedulerName"] == "default-scheduler"
        assert spec["restartPolicy"] == "Never"
        cpu = int(spec["containers"][0]["resources"]["requests"]["cpu"].removesuffix("m"))
        use = int(body["metadata"]["annotations"]["kwok.x-k8s.io/usage-cpu"].removesuffix("m"))
        assert 0.25 * cpu - 1 <= use <= 0.65 * cpu + 1
    again = gang.past_job(scenario, tenant, 8, 2, "loadwise")
    assert [b["spec"]["containers"] for b in again] == [b["spec"]["containers"] for b in bodies]
    other = gang.past_job(scenario, scenario.tenants[1], 8, 1, "loadwise")
    assert [b["metadata"]["annotations"] for b in other] != [
        b["metadata"]["annotations"] for b in again
    ]


def test_group_times_from_its_watched_pods() -> None:
    plan = gang.make_scenario(1, 5, groups=1, min_share=0.0).groups[0]  # minimum: the driver
    seen = gang.GroupSeen(plan, "r0-g000")
    pods = [PodSeen(plan.tenant, f"r0-g000-{m.suffix}", "", False, False, 1, None)
            for m in plan.members]  # fmt: skip
    for i, pod in enumerate(pods):
        seen.see(pod, float(i))
    assert seen.times().complete == len(pods) - 1 and seen.times().placed is None
    pods[0].node = "n1"
    seen.see(pods[0], 10.0)
    pods[0].running = True
    assert not seen.ready.is_set()
    seen.see(pods[0], 12.0)
    times = seen.times()
    assert (times.first_bound, times.placed, times.running) == (10.0, 10.0, 12.0)
    assert seen.ready.is_set()


def test_partial_groups_deadlocks_and_the_most_at_once() -> None:
    times = [
        GroupTimes(5, 5, complete=0.0, first_bound=1.0, placed=1.05, running=4.0),  # in flight
        GroupTimes(5, 5, complete=0.0, first_bound=2.0, placed=6.0, running=9.0),  # 4 s partial
        GroupTimes(5, 5, complete=1.0, first_bound=5.0, placed=None, running=None),  # stuck
        GroupTimes(5, 5, complete=1.0, first_bound=None, placed=None, running=None),  # waits
    ]
    assert gang.partial_spans(times, end=60.0) == [(2.0, 6.0), (5.0, 60.0)]
    figures = gang.summarise(times, start=0.0, end=60.0)
    assert figures["placed"] == 2 and figures["not_placed"] == 2
    assert figures["partial_groups"] == 2
    assert figures["partial_group_s"] == 59.0
    assert figures["partial_max"] == 2
    assert figures["deadlocks"] == 1
    assert figures["groups_per_s"] == round(2 / 60, 3)  # some never placed: the whole run
    assert figures["to_bound_p50_s"] == 1.05 and figures["to_run_p90_s"] == 9.0
    assert gang.most_at_once([(0, 1), (1, 2)]) == 1  # one ends as the next starts


def test_groups_per_second_when_all_were_placed() -> None:
    times = [GroupTimes(2, 2, 0.0, 1.0, 1.0, 2.0), GroupTimes(2, 2, 0.0, 4.0, 4.0, 5.0)]
    assert gang.summarise(times, start=0.0, end=100.0)["groups_per_s"] == 0.5


def test_node_cpu_counts_started_pods_and_the_background_apart() -> None:
    pods = [
        PodSeen(BACKGROUND_NS, "background-a", "a", True, False, 3000, None),
        PodSeen("spark-a", "x", "a", True, False, 1000, ("spark-a", "g")),
        PodSeen("spark-a", "y", "a", False, False, 1000, ("spark-a", "g")),  # not started
        PodSeen("spark-a", "z", "a", True, True, 1000, ("spark-a", "g")),  # going
        PodSeen("spark-a", "w", "elsewhere", True, False, 1000, None),
    ]
    cpu, background = gang.node_cpu(pods, {"a": 4000, "b": 4000})
    assert cpu == {"a": 1.0, "b": 0.0}
    assert background == {"a": 0.75, "b": 0.0}


def test_table_shows_both_schedulers_and_the_ratio() -> None:
    scenario = gang.make_scenario(1, 4, groups=2)
    row = gang.summarise([GroupTimes(2, 2, 0.0, 1.0, 1.0, 2.0)] * 2, 0.0, 10.0)
    row.update(hot_node_s=40.0, pods_hot_node_s=20.0, background_hot_node_s=10.0, cpu_mean=0.5)
    theirs = dict(row, hot_node_s=100.0, pods_hot_node_s=80.0)
    ours = dict(row, loadwise={"placements_by_metrics": 4.0, "all_hot": 1.0})
    data = gang.as_json(scenario, {"loadwise": ours, "kube-scheduler": theirs}, 10.0, 25.0)
    text = _bench().table(data)  # type: ignore[attr-defined]
    assert "loadwise" in text and "kube-scheduler" in text and "2/2" in text
    assert "hot node-s loadwise / kube-scheduler: 0.40 (target <= 0.50); by pods: 0.25" in text
    assert "4 member placements (0 on requests alone), 1 with every feasible node hot" in text
