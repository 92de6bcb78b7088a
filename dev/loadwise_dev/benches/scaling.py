"""Scaling and per-workload tables: bench/throughput at several cluster sizes and workloads,
one row per runner per run.

bench/scaling [--nodes 100,500,1000,5000] [--pods 5000] [--memory 1000:20000,5000:50000]
              [--sizes 5000:150000,15000:150000] [--workloads basic,...] [--relist PODS]
              [--mode backlog|burst] [--pin] [--runners kube-scheduler,loadwise]
              [--markdown PATH]
bench/scaling --render JSON...

Each (size, workload) is its own `bench/throughput` run (a fresh control plane and nodes). The
memory rows add already-bound pods (nodes:existing), which both schedulers must list and hold;
they run the first workload only; `--sizes` rows (nodes:existing too) run every workload, and
alone unless --nodes or --memory are given too.
`--relist PODS` passes on to bench/throughput: the seconds from a forced relist (410) to the
runner's first bind after it. JSON of every run goes to bench/out/scaling-*.json; the table is
printed as Markdown, with loadwise's pods/s over kube-scheduler's and over the ceiling's of the
same run. anti-affinity runs with at most as many pods as nodes. `--render` prints the table of
runs already made (bench/throughput's JSON), running nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]  # the repository
OUT = ROOT / "bench" / "out"


def run(
    nodes: int, pods: int, existing: int, workload: str, args: argparse.Namespace
) -> dict[str, Any]:
    pinned = "-pinned" if args.pin else ""
    path = OUT / f"scaling-{args.mode}-{workload}-{nodes}n-{pods}p-{existing}e{pinned}.json"
    command = [
        str(ROOT / "bench" / "throughput"),
        f"--mode={args.mode}",
        f"--nodes={nodes}",
        f"--pods={pods}",
        f"--existing-pods={existing}",
        f"--workload={workload}",
        f"--runners={args.runners}",
        f"--json={path}",
        *(["--pin"] if args.pin else []),
        *([f"--relist={args.relist}"] if args.relist else []),
    ]
    print("+", " ".join(command[1:]), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    data: dict[str, Any] = json.loads(path.read_text())
    return data


HEADER = [
    "| nodes | existing pods | pods | workload | runner | pods/s | loadwise / ks | loadwise / "
    "ceiling | violations | CPU ms per pod while binding | first bind s | p99 s | drain s "
    "| peak RSS MiB | relist: first bind s |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]


def rows(data: dict[str, Any]) -> list[str]:
    out = []
    for name, result in data["runners"].items():
        ours = name == "loadwise"
        p99 = result.get("p99_ms")
        out.append(
            f"| {data['nodes']} | {data['existing_pods']} | {data['pods']} "
            f"| {data.get('workload', 'basic')} | {name} | {result.get('pods_per_s')} "
            f"| {data.get('ratio_vs_kube_scheduler') if ours else ''} "
            f"| {data.get('ratio_vs_ceiling') if ours else ''} "
            f"| {(result.get('checks') or {}).get('violations')} "
            f"| {result.get('sched_cpu_ms_per_pod') or ''} | {result.get('first_bind_s')} "
            f"| {round(p99 / 1000, 1) if p99 is not None else ''} "
            f"| {result.get('drain_s')} | {result.get('peak_rss_mb') or ''} "
            f"| {(result.get('relist') or {}).get('first_bind_s', '')} |"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", help="default 100,500,1000,5000 unless --sizes is given")
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--memory", help="default 1000:20000,5000:50000 unless --sizes is given")
    parser.add_argument("--workloads", default="basic")
    parser.add_argument("--mode", choices=("backlog", "burst"), default="backlog")
    parser.add_argument("--pin", action="store_true")
    parser.add_argument("--runners", default="kube-scheduler,loadwise")
    parser.add_argument("--sizes", default="", help="nodes:existing pods, every workload")
    parser.add_argument("--relist", type=int, default=0, metavar="PODS")
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--render", nargs="+", metavar="JSON", help="only print these runs")
    args = parser.parse_args()
    if args.render:
        table = list(HEADER)
        for path in args.render:
            table += rows(json.loads(Path(path).read_text()))
        print("\n".join(table))
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    workloads = [w for w in args.workloads.split(",") if w]
    if args.nodes is None:
        args.nodes = "" if args.sizes else "100,500,1000,5000"
    if args.memory is None:
        args.memory = "" if args.sizes else "1000:20000,5000:50000"
    plan = [(int(n), 0, w) for n in args.nodes.split(",") if n for w in workloads]
    plan += [
        (int(n), int(e), workloads[0])
        for n, e in (m.split(":") for m in args.memory.split(",") if m)
    ]
    plan += [
        (int(n), int(e), w)
        for n, e in (m.split(":") for m in args.sizes.split(",") if m)
        for w in workloads
    ]
    table = list(HEADER)
    for nodes, existing, workload in plan:
        # Required anti-affinity by hostname places at most one pod per node.
        pods = min(args.pods, nodes) if workload == "anti-affinity" else args.pods
        data = run(nodes, pods, existing, workload, args)
        table += rows(data)
        print("\n".join(table[-len(data["runners"]) :]), file=sys.stderr, flush=True)
        if args.markdown:  # after each run: a partial table survives an interrupted one
            Path(args.markdown).write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
