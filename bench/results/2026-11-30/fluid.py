"""A bound on bench/gang's time to run a group, from a run's JSON: its groups, in arrival order,
on a fleet of one pool of cores (no node boundaries, no metrics, no scheduler latency), each
started as soon as its requests fit (later groups may pass one that does not fit: backfill),
running from then until START + its runtime. Printed: to run p50 and p90 for the whole fleet's
cores, for the cores of the nodes whose background is not busy (base below 50%), and for as
many of those as members may fill without bringing a node past COOL. START: seconds from
bound to running (default 5.5, KWOK's start alone; both schedulers' groups took 8.4-8.8 s on average
in each run of gang-history-*.json, their binds and status round trips included).

python3 fluid.py RUN.json [START [ORDER]]   (ORDER: arrival, smallest or shortest first)
"""

from __future__ import annotations

import heapq
import json
import math
import sys
from collections.abc import Callable
from typing import Any

USE = 0.45  # executors use 25-65% of their CPU requests (engines/gang.py): the mean
COOL = 0.75  # a node's CPU its members may fill up to, at its background's crest (80%: hot)
ORDERS: dict[str, Callable[[dict[str, Any]], float]] = {  # which waiting group is tried first
    "arrival": lambda plan: float(plan["arrival"]),
    "smallest": lambda plan: float(plan["cpu_m"]),
    "shortest": lambda plan: float(plan["runtime"]),
}
START = 5.5  # seconds from bound to running: KWOK's 1-6 s start for the last of many members
STEP = 0.1


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def cool_cores(node: dict[str, Any]) -> float:
    """The cores of requests a node takes before members using USE of them bring it, at its
    background's crest, to COOL."""
    crest = node["base"] + node["swing"]
    return float(min(node["cores"], max(0.0, node["cores"] * (COOL - crest) / USE)))


def simulate(
    plans: list[dict[str, Any]], cores: float, start: float = START, order: str = "arrival"
) -> tuple[float, float]:
    pending = sorted(plans, key=lambda p: p["arrival"])
    waiting: list[dict[str, Any]] = []
    running: list[tuple[float, float]] = []  # (ends, cores)
    free, now = cores, 0.0
    to_run: list[float] = []
    while len(to_run) < len(plans):
        while pending and pending[0]["arrival"] <= now:
            waiting.append(pending.pop(0))
        while running and running[0][0] <= now:
            free += heapq.heappop(running)[1]
        waiting.sort(key=ORDERS[order])
        for plan in list(waiting):
            need = plan["cpu_m"] / 1000
            if need <= free:
                free -= need
                waiting.remove(plan)
                to_run.append(now - plan["arrival"] + start)
                heapq.heappush(running, (now + start + plan["runtime"], need))
        now += STEP
    return percentile(to_run, 0.5), percentile(to_run, 0.9)


def main() -> None:
    start = float(sys.argv[2]) if len(sys.argv) > 2 else START
    order = sys.argv[3] if len(sys.argv) > 3 else "arrival"
    with open(sys.argv[1]) as file:
        data = json.load(file)
    nodes = data["node_plans"]
    quiet = [n for n in nodes if n["base"] < 0.5]
    for name, cores in (
        ("all nodes", sum(n["cores"] for n in nodes)),
        ("not busy", sum(n["cores"] for n in quiet)),
        (f"not busy, to {COOL:.0%} at crest", sum(cool_cores(n) for n in quiet)),
    ):
        p50, p90 = simulate(data["group_plans"], cores, start, order)
        print(
            f"seed {data['seed']} {name} ({cores:.0f} cores):"
            f" to run p50 {p50:.1f} s, p90 {p90:.1f} s"
        )


if __name__ == "__main__":
    main()
