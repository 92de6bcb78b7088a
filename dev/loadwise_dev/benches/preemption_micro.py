"""In-process cost of one preemption decision (the PostFilter's dry runs), in ms.

bench/preemption_micro [--nodes 1000,5000] [--placed-per-node 10] [--seed S]

No API server: a ClusterState with N nodes of 4 cpu over 10 zones, each full with placed pods of
400m at priorities 0, 10 and 100 (distinct start times), then one pod of priority 1000 asking
for 1 cpu, which fits nowhere: framework.preemption.preempt chooses the node and victims, as the
scheduler does for it, once plain and once with a zone spread constraint (DoNotSchedule, whose
counts the dry runs update). kube-scheduler examines max(10% of the nodes, 100) candidates, as
this does: 100 at 1000 nodes, 500 at 5000.
"""

from __future__ import annotations

import argparse
import random
import time

from loadwise.framework.plugin import Preemption
from loadwise.framework.preemption import preempt
from loadwise.framework.profile import DEFAULT_PROFILE
from loadwise.framework.types import parse_pod
from loadwise.scheduler.state import ClusterState
from loadwise_dev import manifests

ZONE = "topology.kubernetes.io/zone"


def cluster(nodes: int, per_node: int, rng: random.Random) -> ClusterState:
    state = ClusterState()
    for i in range(nodes):
        state.upsert_node(manifests.node(f"n{i}", cpu="4", labels={ZONE: f"z{i % 10}"}))
    for k in range(nodes * per_node):
        raw = manifests.pod(f"p{k}", cpu="400m", labels={"app": f"a{k % 7}"})
        raw["metadata"]["uid"] = f"u{k}"
        raw["spec"]["nodeName"] = f"n{k // per_node}"
        raw["spec"]["priority"] = rng.choice([0, 10, 100])
        raw["status"] = {
            "startTime": f"2026-11-24T{k // 3600 % 24:02d}:{k // 60 % 60:02d}:{k % 60:02d}Z"
        }
        state.observe_bound(parse_pod(raw, placed=True), terminal=False)
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", default="1000,5000")
    parser.add_argument("--placed-per-node", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("| nodes | pod | ms | candidates found | victims |")
    print("| --- | --- | --- | --- | --- |")
    for nodes in (int(n) for n in args.nodes.split(",")):
        rng = random.Random(args.seed)
        state = cluster(nodes, args.placed_per_node, rng)
        for spread in (False, True):
            raw = manifests.pod("vip", cpu="1", labels={"app": "a1"})
            raw["metadata"]["uid"] = "vip"
            raw["spec"]["priority"] = 1000
            if spread:
                raw["spec"]["topologySpreadConstraints"] = [
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "a1"}},
                    }
                ]
            pod = parse_pod(raw)
            started = time.perf_counter()
            result = preempt(pod, state, DEFAULT_PROFILE.filters, [], {}, random.Random(1))
            took = (time.perf_counter() - started) * 1000
            assert isinstance(result, Preemption), result
            kind = "zone spread" if spread else "plain"
            print(
                f"| {nodes} | {kind} | {took:.0f} | {result.candidates} | {len(result.victims)} |"
            )


if __name__ == "__main__":
    main()
