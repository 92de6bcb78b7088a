"""Faults: real faults injected mid-burst into a nearly full cluster scheduled by two
loadwise replicas (real processes, leader election unless the row says otherwise); the result is
read from the API server's truth. The harness is loadwise_dev.engines.faults.

bench/faults [--rows a,b,c] [--json PATH] [--seed S] [--small] [--product DIR]

Rows: kill9, sigterm, apiserver-short, apiserver-long, prometheus, blackhole, watch-410,
restart-pending, crd-late, policies-deleted, port-taken, no-election, odd-objects.
Each row runs on a fresh control plane; prints one JSON line per row as it finishes, then the
markdown table with pass/fail per row. `--product DIR` runs the operators from another source
tree (e.g. `git archive HEAD operator | tar -x -C DIR`, then DIR/operator), so a run measures one
commit while the working tree changes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loadwise_dev.engines import faults as faultbench


def product_commit(product: str | None) -> str:
    root = Path(__file__).resolve().parents[3]  # the repository
    head = subprocess.run(
        ["git", "-C", str(root), "log", "-1", "--oneline"], capture_output=True, text=True
    ).stdout.strip()
    if product:
        return f"operators from {product} (harness at {head})"
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "operator/loadwise"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return head + (" + uncommitted changes in operator/loadwise" if dirty else "")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", help="comma-separated row names (default: all)")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--small", action="store_true", help="fewer nodes and pods, short faults")
    parser.add_argument("--product", help="run the operators from this source dir (PYTHONPATH)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    make = faultbench.Settings.small if args.small else faultbench.Settings
    settings = make(seed=args.seed, product=args.product)
    names = args.rows.split(",") if args.rows else list(faultbench.rows(settings))
    commit = product_commit(args.product)
    print(f"measuring: {commit}", flush=True)
    started = time.monotonic()

    def show(result: dict[str, Any]) -> None:
        brief = {k: v for k, v in result.items() if k != "logs"}
        print(json.dumps(brief, default=str), flush=True)

    results = asyncio.run(faultbench.run_bench(settings, names, show))
    table = faultbench.render(results)
    print()
    print(table)
    print(f"\n{len(results)} rows in {time.monotonic() - started:.0f} s; {commit}")
    if args.json_path:
        data = faultbench.to_json(
            settings, results, commit=commit, seconds=round(time.monotonic() - started)
        )
        Path(args.json_path).write_text(json.dumps(data, indent=1, default=str))
    return 0 if all(r.get("pass") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
