"""In-process cost of one scheduling cycle for pods with inter-pod constraints, in ms per pod.

bench/cycle_micro [--nodes 1000,5000] [--placed-per-node 2] [--pods 200] [--cases a,b]
                  [--profile CASE] [--check]

No API server: a ClusterState with N nodes over 10 zones and K placed pods, then M pods
scheduled as the scheduler does (ScoreIndex.schedule, then state.assume). Cases: a plain pod
(the batching path, for reference), zone spread DoNotSchedule maxSkew 1 (also with a node
selector, which nodeAffinityPolicy Honor makes count node by node), ScheduleAnyway zone
spread, hostname required anti-affinity, required pod affinity by zone, preferred pod
affinity, and ReplicaSet-owned pods (system default spreading), also with hostname
anti-affinity. `--check` also runs the full
cycle for every pod and asserts the same verdict and best score; `--profile CASE` prints
cProfile's top.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import time
from collections.abc import Callable
from typing import Any

from loadwise.framework.context import Basis
from loadwise.framework.cycle import Decision, schedule_one
from loadwise.framework.index import ScoreIndex
from loadwise.framework.types import PodInfo, parse_pod
from loadwise.policies.policy import DEFAULT_POLICY
from loadwise.scheduler.state import ClusterState
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
ZONES = 10
APPS = ("web", "api", "db", "cache", "batch")
NOW = 1_000_000.0


def cluster(nodes: int, placed_per_node: int, rng: random.Random) -> ClusterState:
    state = ClusterState()
    state.workloads.on_controller_event(
        "replicasets",
        "ADDED",
        {
            "metadata": {"namespace": "default", "name": "rs"},
            "spec": {"selector": {"matchLabels": {"app": "rs"}}},
        },
    )
    for n in range(nodes):
        name = f"node-{n}"
        labels = {ZONE: f"zone-{n % ZONES}", HOSTNAME: name}
        state.upsert_node(manifests.node(name, cpu="32", memory="128Gi", labels=labels))
    for i in range(nodes * placed_per_node):
        raw = manifests.pod(f"placed-{i}", cpu="100m", labels={"app": rng.choice(APPS)})
        raw["metadata"]["uid"] = f"placed-{i}"
        raw["spec"]["nodeName"] = f"node-{rng.randrange(nodes)}"
        state.observe_bound(parse_pod(raw), terminal=False)
    return state


def _term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def _spread(app: str, when: str) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": app}},
        }
    ]


def _plain(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    pass


def _hard_spread(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    spec["topologySpreadConstraints"] = _spread("spread", "DoNotSchedule")


def _hard_spread_selector(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    """nodeAffinityPolicy Honor with a node selector: counted node by node."""
    spec["topologySpreadConstraints"] = _spread("spread", "DoNotSchedule")
    spec["nodeSelector"] = {"kubernetes.io/os": "linux"}


def _soft_spread(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    spec["topologySpreadConstraints"] = _spread("spread", "ScheduleAnyway")


def _host_anti(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    required = {"requiredDuringSchedulingIgnoredDuringExecution": [_term("anti", HOSTNAME)]}
    spec["affinity"] = {"podAntiAffinity": required}


def _zone_affinity(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    required = {"requiredDuringSchedulingIgnoredDuringExecution": [_term("db", ZONE)]}
    spec["affinity"] = {"podAffinity": required}


def _preferred_affinity(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    preferred = [{"weight": 10, "podAffinityTerm": _term("cache", ZONE)}]
    spec["affinity"] = {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}
    }


def _replicaset(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    meta["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "rs",
            "uid": "rs-1",
            "controller": True,
        }
    ]


def _replicaset_anti(spec: dict[str, Any], meta: dict[str, Any]) -> None:
    """A Deployment's pods that also repel each other per node."""
    _replicaset(spec, meta)
    required = {"requiredDuringSchedulingIgnoredDuringExecution": [_term("rs", HOSTNAME)]}
    spec["affinity"] = {"podAntiAffinity": required}


CASES: dict[str, tuple[str, Callable[[dict[str, Any], dict[str, Any]], None]]] = {
    "plain": ("plain", _plain),
    "spread-hard": ("spread", _hard_spread),
    "spread-hard-nodesel": ("spread", _hard_spread_selector),
    "spread-soft": ("spread", _soft_spread),
    "anti-host": ("anti", _host_anti),
    "affinity-zone": ("aff", _zone_affinity),
    "affinity-preferred": ("pref", _preferred_affinity),
    "replicaset": ("rs", _replicaset),
    "replicaset-anti": ("rs", _replicaset_anti),
}


def pods(case: str, count: int) -> list[PodInfo]:
    app, shape = CASES[case]
    out = []
    for i in range(count):
        raw = manifests.pod(f"{case}-{i}", cpu="100m", labels={"app": app})
        raw["metadata"]["uid"] = f"{case}-{i}"
        shape(raw["spec"], raw["metadata"])
        out.append(parse_pod(raw))
    return out


def run(case: str, nodes: int, placed_per_node: int, count: int, check: bool) -> float:
    """ms per pod for `count` pods of `case`."""
    rng = random.Random(1)
    state = cluster(nodes, placed_per_node, rng)
    samples = {
        name: NodeSample(rng.uniform(0.05, 0.6), rng.uniform(0.05, 0.6), NOW - 5)
        for name in state.nodes
    }
    index = ScoreIndex()
    batch = pods(case, count + 1)
    warm = batch.pop()  # builds the shape's heap, as any pod of a new shape does
    index.schedule(warm, state, Basis(DEFAULT_POLICY, samples, NOW, rng))
    elapsed = 0.0
    for pod in batch:
        started = time.perf_counter()
        result = index.schedule(pod, state, Basis(DEFAULT_POLICY, samples, NOW, rng))
        if isinstance(result, Decision):
            state.assume(pod, result.node, at=NOW)
        elapsed += time.perf_counter() - started
        if check:
            if isinstance(result, Decision):
                state.remove_pod(pod.uid)
            slow = schedule_one(pod, state, Basis(DEFAULT_POLICY, samples, NOW, random.Random(0)))
            assert type(slow) is type(result), (case, pod.name, slow, result)
            if isinstance(result, Decision) and isinstance(slow, Decision):
                assert abs(slow.score - result.score) < 1e-6, (case, pod.name)
                state.assume(pod, result.node, at=NOW)
    return elapsed * 1000 / count


def main() -> None:
    # As `loadwise run` does after its imports (cli.run): what is imported by now is out of
    # the collector's sight, so the figures are the operator's.
    gc.freeze()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000")
    parser.add_argument("--placed-per-node", type=int, default=2)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--profile", default="")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        ms = run(args.profile, sizes[0], args.placed_per_node, args.pods, args.check)
        profiler.disable()
        print(f"{args.profile} at {sizes[0]} nodes: {ms:.3f} ms/pod (profiled)")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        return
    print("case".ljust(20) + "".join(f"{n} nodes".rjust(14) for n in sizes) + "   (ms/pod)")
    for case in args.cases.split(","):
        row = [run(case, n, args.placed_per_node, args.pods, args.check) for n in sizes]
        print(case.ljust(20) + "".join(f"{ms:14.3f}" for ms in row), flush=True)


if __name__ == "__main__":
    main()
