"""The scaling table: bench/throughput (backlog) at several cluster sizes, one row per run.

bench/scaling [--nodes 100,500,1000,5000] [--pods 5000] [--memory 1000:20000,5000:50000]
              [--runners kube-scheduler,loadwise] [--markdown PATH]

Each size is its own `bench/throughput --mode backlog` run (a fresh control plane). The memory
rows add already-bound pods (nodes:existing), which both schedulers must list and hold. JSON of
every run goes to bench/out/scaling-*.json; the table is printed as Markdown.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"


def run(nodes: int, pods: int, existing: int, runners: str) -> dict[str, Any]:
    path = OUT / f"scaling-{nodes}n-{pods}p-{existing}e.json"
    command = [
        str(ROOT / "bench" / "throughput"),
        "--mode=backlog",
        f"--nodes={nodes}",
        f"--pods={pods}",
        f"--existing-pods={existing}",
        f"--runners={runners}",
        f"--json={path}",
    ]
    print("+", " ".join(command[1:]), file=sys.stderr, flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def rows(data: dict[str, Any]) -> list[str]:
    out = []
    for name, result in data["runners"].items():
        out.append(
            f"| {data['nodes']} | {data['existing_pods']} | {data['pods']} | {name} "
            f"| {result.get('pods_per_s')} | {result.get('sched_cpu_ms_per_pod')} "
            f"| {result.get('first_bind_s')} | {result.get('peak_rss_mb')} |"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", default="100,500,1000,5000")
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--memory", default="1000:20000,5000:50000")
    parser.add_argument("--runners", default="kube-scheduler,loadwise")
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    plan = [(int(n), 0) for n in args.nodes.split(",") if n]
    plan += [(int(n), int(e)) for n, e in (m.split(":") for m in args.memory.split(",") if m)]
    table = [
        "| nodes | existing pods | pods | runner | pods/s | CPU ms per pod while binding "
        "| first bind s | peak RSS MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for nodes, existing in plan:
        table += rows(run(nodes, args.pods, existing, args.runners))
        print("\n".join(table[-2:]), file=sys.stderr, flush=True)
    text = "\n".join(table) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
