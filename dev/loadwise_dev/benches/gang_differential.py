"""Differential testing of gangs against the real kube-scheduler 1.37 (GenericWorkload on, its
GangScheduling plugin): are the same groups placed, and is every member's node feasible?

bench/gang-differential [--seed S] [--scenarios N] [--groups G] [--preemption] [--json PATH]

Each scenario is bench/differential's: random nodes (labels, taints, capacity, some cordoned)
and placed pods (ports, anti-affinity). Then its groups, one after the other, each on the same
cluster for both schedulers: a PodGroup (`scheduling.k8s.io/v1beta1`, gang policy) and 2-6
members made from one random pod template of bench/differential (requests, node selectors and
affinity, tolerations, host ports, pod affinity and anti-affinity, spread), so members compete
with each other as a real gang's do. A tenth of the groups ask for more members than come, a
twentieth name a PodGroup that is never created: both schedulers must leave those waiting.
1. loadwise's copy (its PodGroup and members, `schedulerName: loadwise-scheduler`): once
   settled, the group is placed (at least minCount members bound, every other member bound or
   marked Unschedulable), refused (every member marked Unschedulable, none bound) or waiting
   (neither, after a quiet spell); then it is deleted;
2. kube-scheduler's copy (the same, `default-scheduler`), settled and deleted alike;
3. agreement: the same outcome. When loadwise placed the group, a third copy with each placed
   member pinned to loadwise's node (bench/differential's `pin`) and minCount the number placed
   must be placed whole by kube-scheduler: every member's node feasible by its filters, with the
   siblings counted as kube-scheduler counts them.

--preemption: half the placed pods have a low priority class and half the groups (their
PodGroup and members) a higher one, so a group that does not fit may preempt (KEP-5710): the
outcome compared is then whether the group ends placed. The placed pods a copy evicted are
re-created on their nodes before the next copy, so each sees the same cluster; a member
nominated by its preemption has not settled yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import manifests
from ..kube import Kube, KubeError
from . import differential as diff

GROUPS = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{diff.NS}/podgroups"
PODS = f"/api/v1/namespaces/{diff.NS}/pods"
GANG_STREAM = 0x4671  # the groups' own random stream (KEP-4671)
CLASSES = {"gd-low": 10, "gd-mid": 500}  # with --preemption
QUIET = 4.0  # seconds with no member bound or marked: the group waits
SETTLE = 30.0  # longest wait for a group to settle


@dataclass(frozen=True)
class Group:
    name: str
    template: dict[str, Any]
    members: int
    min_count: int
    podgroup: bool  # False: its PodGroup is never created
    priority_class: str | None = None  # the PodGroup's and its members' (--preemption)


@dataclass(frozen=True)
class Outcome:
    verdict: str  # "placed", "refused", "waiting"
    nodes: dict[str, str]  # member index -> node, for the members bound
    messages: tuple[str, ...] = ()


def gen_group(rng: random.Random, name: str, preemption: bool = False) -> Group:
    template = diff.gen_pod(rng, "x")
    members = rng.randint(2, 6)
    roll = rng.random()
    if roll < 0.05:
        return Group(name, template, members, members, podgroup=False)
    if roll < 0.15:
        return Group(name, template, members, members + rng.randint(1, 2), podgroup=True)
    minimum = rng.randint(max(1, members - 2), members)
    if preemption and rng.random() < 0.5:
        template["spec"]["priorityClassName"] = "gd-mid"
        return Group(name, template, members, minimum, True, "gd-mid")
    return Group(name, template, members, minimum, True)


def member(group: Group, prefix: str, index: int, scheduler: str) -> dict[str, Any]:
    pod = copy.deepcopy(group.template)
    pod["metadata"]["name"] = f"{prefix}-{index}"
    pod["spec"]["schedulerName"] = scheduler
    return manifests.in_group(pod, prefix)


async def settle(kube: Kube, prefix: str, count: int, min_count: int) -> Outcome:
    """Wait until the group's members are placed, refused or quietly waiting (module doc)."""
    deadline = time.monotonic() + SETTLE
    quiet_until = time.monotonic() + QUIET
    while True:
        pods = {
            p["metadata"]["name"]: p
            for p in await kube.list(PODS)
            if p["metadata"]["name"].startswith(f"{prefix}-")
        }
        nodes = {
            name.rsplit("-", 1)[1]: str(p["spec"]["nodeName"])
            for name, p in pods.items()
            if p["spec"].get("nodeName")
        }
        nominated = [n for n, p in pods.items() if (p.get("status") or {}).get("nominatedNodeName")]
        marked = [  # a member nominated by its preemption has not settled yet
            name
            for name, p in pods.items()
            if manifests.marked_unschedulable(p) and name not in nominated
        ]
        messages = tuple(sorted({_message(pods[m]) for m in marked}))
        if len(nodes) >= min_count and len(nodes) + len(marked) + len(nominated) >= count:
            # placed: the minimum is bound; members past it that preempt may take their time
            return Outcome("placed", nodes, messages)
        if not nodes and len(marked) >= count:
            return Outcome("refused", nodes, messages)
        now = time.monotonic()
        if not nodes and not marked and not nominated and now >= quiet_until:
            return Outcome("waiting", nodes)
        if nodes or marked or nominated:
            quiet_until = now + QUIET
        if now > deadline:
            return Outcome(f"unsettled: {len(nodes)} bound, {len(marked)} marked", nodes, messages)
        await asyncio.sleep(0.1)


def _message(pod: dict[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return str(condition.get("message") or "")
    return ""


async def try_group(
    kube: Kube, group: Group, prefix: str, scheduler: str, pins: dict[str, str] | None = None
) -> Outcome:
    """Create one copy of the group (pinned member by member with `pins`), settle, delete."""
    indexes = sorted(pins, key=int) if pins is not None else [str(i) for i in range(group.members)]
    min_count = len(indexes) if pins is not None else group.min_count
    if group.podgroup or pins is not None:
        extra = {"priorityClassName": group.priority_class} if group.priority_class else {}
        await kube.create(GROUPS, manifests.pod_group(prefix, diff.NS, min_count, **extra))
    try:
        for index in indexes:
            body = member(group, prefix, int(index), scheduler)
            if pins is not None:
                body = diff.pin(body, pins[index])
            await kube.create(PODS, body)
        return await settle(kube, prefix, len(indexes), min_count)
    finally:
        for index in indexes:
            await kube.delete_pod_now(diff.NS, f"{prefix}-{index}")
        with contextlib.suppress(KubeError):
            await kube.delete(f"{GROUPS}/{prefix}")


@dataclass
class Report:
    groups: int = 0
    agree: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)  # loadwise's
    members_placed: int = 0
    pinned_placed: int = 0  # placed groups whose pinned copy kube-scheduler placed whole
    evicted: dict[str, int] = field(
        default_factory=lambda: {"loadwise": 0, "kube_scheduler": 0}
    )  # victims of each scheduler's group preemptions (their Preempted events)
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "agree": self.agree,
            "agreement": round(self.agree / self.groups, 4) if self.groups else 1.0,
            "loadwise_verdicts": self.verdicts,
            "members_placed": self.members_placed,
            "placed_groups_feasible_pinned": self.pinned_placed,
            "pods_evicted_by_group_preemption": self.evicted,
            "seconds": round(self.seconds, 1),
            "disagreements": self.disagreements,
        }


async def reset(kube: Kube) -> None:
    for raw in await kube.list(GROUPS):
        with contextlib.suppress(KubeError):
            await kube.delete(f"{GROUPS}/{raw['metadata']['name']}")
    await diff.reset(kube)


async def priority_classes(kube: Kube) -> None:
    for name, value in CLASSES.items():
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value}  # fmt: skip
        with contextlib.suppress(KubeError):  # 409: there already
            await kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", body)


async def preempted(kube: Kube) -> int:
    """`Preempted` events so far (both schedulers write one on each victim; a NoExecute taint's
    evictions, which both copies meet alike, are another reason)."""
    count = 0
    for ns in (diff.NS, diff.NS_B):
        events = await kube.list(f"/api/v1/namespaces/{ns}/events")
        count += sum(1 for event in events if event.get("reason") == "Preempted")
    return count


async def restore(kube: Kube, existing: list[dict[str, Any]]) -> int:
    """Re-create the placed pods a copy evicted (its preemption, or a NoExecute taint):
    returns how many."""
    present = {(p["metadata"]["namespace"], p["metadata"]["name"])
               for ns in (diff.NS, diff.NS_B)
               for p in await kube.list(f"/api/v1/namespaces/{ns}/pods")}  # fmt: skip
    missing = [p for p in existing
               if (p["metadata"]["namespace"], p["metadata"]["name"]) not in present]  # fmt: skip
    for pod in missing:
        await kube.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)
    if missing:
        await asyncio.sleep(0.5)  # both schedulers see them again
    return len(missing)


async def run(
    kube: Kube,
    seed: int,
    scenarios: int,
    groups: int,
    preemption: bool = False,
    only: int | None = None,
) -> Report:
    """`only`: run that scenario alone (the others are generated, not run: a replay)."""
    rng = random.Random(seed)
    gang_rng = random.Random(seed ^ GANG_STREAM)
    report = Report()
    started = time.monotonic()
    for s in range(scenarios):
        nodes = diff.gen_nodes(rng, f"s{s}")
        existing = diff.gen_existing(rng, nodes)
        for pod in existing:
            if preemption and gang_rng.random() < 0.5:
                pod["spec"]["priorityClassName"] = "gd-low"
        made = [gen_group(gang_rng, f"{s}-{g}", preemption) for g in range(groups)]
        if only is not None and s != only:
            continue  # generated all the same: the later scenarios stay what they are
        await reset(kube)
        for node in nodes:
            await kube.create("/api/v1/nodes", node)
        for pod in existing:
            await kube.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)
        await asyncio.sleep(0.5)  # both schedulers' watches catch up with the scenario
        for group in made:
            before = await preempted(kube)
            ours = await try_group(kube, group, f"lw-{group.name}", "loadwise-scheduler")
            await restore(kube, existing)
            middle = await preempted(kube)
            theirs = await try_group(kube, group, f"ks-{group.name}", "default-scheduler")
            await restore(kube, existing)
            report.evicted["loadwise"] += middle - before
            report.evicted["kube_scheduler"] += await preempted(kube) - middle
            feasible = None
            if ours.verdict == "placed":
                pinned = await try_group(
                    kube, group, f"kp-{group.name}", "default-scheduler", ours.nodes
                )
                await restore(kube, existing)
                feasible = pinned.verdict == "placed"
                report.pinned_placed += feasible
            report.groups += 1
            report.verdicts[ours.verdict] = report.verdicts.get(ours.verdict, 0) + 1
            report.members_placed += len(ours.nodes)
            if ours.verdict == theirs.verdict and feasible is not False:
                report.agree += 1
            else:
                report.disagreements.append(
                    {
                        "scenario": s,
                        "group": group.name,
                        "members": group.members,
                        "min_count": group.min_count,
                        "podgroup": group.podgroup,
                        "loadwise": [ours.verdict, ours.nodes, ours.messages],
                        "kube_scheduler": [theirs.verdict, theirs.nodes, theirs.messages],
                        "pinned_feasible": feasible,
                        "spec": group.template["spec"],
                        "nodes": [diff._node_summary(n) for n in nodes],
                    }
                )
    report.seconds = time.monotonic() - started
    await reset(kube)
    return report


async def _run_local(
    seed: int, scenarios: int, groups: int, preemption: bool, only: int | None
) -> Report:
    import logging

    from ..cluster import LocalCluster, running_operator

    logging.basicConfig(level=logging.WARNING)
    cluster = LocalCluster(prometheus=False).start()
    try:
        cluster.cp.start_scheduler(qps=1000, burst=1000)
        async with cluster.kube() as kube:
            await cluster.install_crd(kube)
            await reset(kube)
            await cluster.wait_namespace(kube, diff.NS)
            await priority_classes(kube)
            async with running_operator(cluster.operator_config(), cluster.cp.kubeconfig):
                return await run(kube, seed, scenarios, groups, preemption, only)
    finally:
        cluster.stop()


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description="gangs: loadwise vs kube-scheduler 1.37")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scenarios", type=int, default=10)
    parser.add_argument("--groups", type=int, default=4, help="groups per scenario")
    parser.add_argument("--preemption", action="store_true", help="priorities: groups preempt")
    parser.add_argument("--only", type=int, help="replay this scenario alone")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    report = asyncio.run(
        _run_local(args.seed, args.scenarios, args.groups, args.preemption, args.only)
    )
    result = report.as_dict()
    print(
        f"gang differential vs kube-scheduler: {result['agree']}/{result['groups']} groups agree "
        f"({result['agreement']:.1%}); loadwise: {result['loadwise_verdicts']}, "
        f"{result['members_placed']} members placed; placed groups kube-scheduler placed whole "
        f"when pinned to loadwise's nodes: {result['placed_groups_feasible_pinned']}; "
        f"pods evicted by group preemption: {result['pods_evicted_by_group_preemption']}; "
        f"{result['seconds']}s; seed {args.seed}"
    )
    for d in report.disagreements:
        print(
            f"  disagreement: scenario {d['scenario']} group {d['group']} "
            f"({d['members']} members, minCount {d['min_count']}): loadwise {d['loadwise']!r}, "
            f"kube-scheduler {d['kube_scheduler']!r}, pinned feasible {d['pinned_feasible']}"
        )
    if args.json_path:
        data = {"seed": args.seed, "preemption": args.preemption, **result}
        Path(args.json_path).write_text(json.dumps(data, indent=1))
    return 0 if not report.disagreements else 1


if __name__ == "__main__":
    raise SystemExit(main())
