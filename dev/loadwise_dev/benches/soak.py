"""Soak: create/delete churn at a steady rate on a running 2-replica setup (leader election),
sampling the leader's RSS and open fds, the pending-pods gauge and error counters.

bench/soak [--minutes M] [--rate R] [--lifetime S] [--interval S] [--json PATH] [--png PATH]
           [--product DIR]

Same environment as bench/faults (loadwise_dev.engines.faults.Env): its own control plane,
Prometheus, 20 simulated nodes, two `loadwise run` processes. Pods (10m/16Mi, so the cluster never
fills) are created at R/s and force-deleted S seconds after creation. Every `--interval` seconds
each replica is sampled: VmRSS and open fds from /proc, `scheduler_pending_pods`,
`scheduler_schedule_attempts_total{result="error"}`, `loadwise_events_dropped_total`,
`loadwise_accounted_pods`, and whether it leads. At the end the invariants are read from the API
(pending pods that fit, over-committed nodes, accounted CPU against the API's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from loadwise_dev import manifests
from loadwise_dev.engines import faults as faultbench
from loadwise_dev.replicas import labelled, metric

log = logging.getLogger("soak")


async def churn(
    env: faultbench.Env, rate: float, lifetime: float, until: float, counts: dict[str, int]
) -> None:
    """Create at `rate`/s, delete each pod `lifetime` s after it was created."""
    sem = asyncio.Semaphore(64)
    tasks: set[asyncio.Task[None]] = set()
    started = time.monotonic()
    i = 0

    async def create(name: str) -> None:
        body = manifests.pod(name, namespace=faultbench.NS, cpu="10m", memory="16Mi")
        async with sem:
            ok = await env.create_pod(body, time.monotonic() + 30, count=False)
        counts["created" if ok else "create_failed"] += 1
        if not ok:
            return
        await asyncio.sleep(lifetime)
        async with sem:
            try:
                await env.k.delete_pod_now(faultbench.NS, name)
                counts["deleted"] += 1
            except Exception:
                counts["delete_failed"] += 1

    while time.monotonic() < until:
        due = started + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(create(f"soak-{i:07d}"))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += 1
    await asyncio.gather(*tasks, return_exceptions=True)


async def sample_forever(
    env: faultbench.Env, interval: float, started: float, series: list[dict[str, Any]]
) -> None:
    while True:
        holder = await env.lease_holder()
        for replica in list(env.replicas):
            sample = await env.sampler.scrape(replica)
            raw = env.sampler.raw.get(replica.identity) if sample.reachable else None
            attempts = labelled(raw, "scheduler_schedule_attempts_total", "result")
            series.append(
                {
                    "t": round(time.monotonic() - started, 1),
                    "replica": replica.identity,
                    "leader": replica.identity == holder,
                    "rss_mib": None if sample.rss_kib is None else round(sample.rss_kib / 1024, 1),
                    "fds": sample.fds,
                    "pending": sum(sample.pending.values()) if sample.pending else None,
                    # the series appears with the first error: 0 until then
                    "errors": attempts.get("error", 0.0) if raw is not None else None,
                    "scheduled": attempts.get("scheduled"),
                    "events_dropped": metric(raw, "loadwise_events_dropped_total"),
                    "accounted_pods": sample.accounted_pods,
                }
            )
        await asyncio.sleep(interval)


def summarise(series: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    leader_rows = [row for row in series if row["leader"]]
    result: dict[str, dict[str, Any]] = {}
    for key in ("rss_mib", "fds", "pending", "errors", "events_dropped", "accounted_pods"):
        values = [row[key] for row in leader_rows if row[key] is not None]
        result[key] = (
            {"first": values[0], "last": values[-1], "max": max(values), "samples": len(values)}
            if values
            else {"first": None, "last": None, "max": None, "samples": 0}
        )
    return result


def chart(series: list[dict[str, Any]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [("rss_mib", "RSS MiB"), ("fds", "open fds"), ("pending", "pending pods"),
            ("errors", "schedule errors (total)")]  # fmt: skip
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 9), sharex=True)
    replicas = sorted({row["replica"] for row in series})
    for ax, (key, label) in zip(axes, keys, strict=True):
        for replica in replicas:
            rows = [r for r in series if r["replica"] == replica and r[key] is not None]
            if rows:
                ax.plot([r["t"] for r in rows], [r[key] for r in rows], label=replica)
        leads = [r for r in series if r["leader"] and r[key] is not None]
        if leads:
            ax.scatter([r["t"] for r in leads], [r[key] for r in leads], s=4, c="k")
        ax.set_ylabel(label)
    axes[0].legend(title="replica (dots: leader)")
    axes[-1].set_xlabel("seconds")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    settings = faultbench.Settings(seed=args.seed, product=args.product, log_level="WARNING")
    row = faultbench.Row("soak", faultbench.no_fault, "soak", expect_degradation=False)
    env = faultbench.Env(settings, row)
    series: list[dict[str, Any]] = []
    counts = {"created": 0, "create_failed": 0, "deleted": 0, "delete_failed": 0}
    try:
        await env.start()
        for _ in range(2):
            await env.add_replica()
        warm = await env.warm_up()
        leader = await env.wait_leader(20)
        started = time.monotonic()
        sampler = asyncio.create_task(sample_forever(env, args.interval, started, series))
        await churn(env, args.rate, args.lifetime, started + args.minutes * 60, counts)
        elapsed = time.monotonic() - started
        await asyncio.sleep(10)  # let the last deletions and binds land
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        truth = await env.truth(events=False)
        holder = await env.lease_holder()
        accounted = {}
        for replica in env.replicas:
            sample = await env.sampler.scrape(replica)
            accounted[replica.identity] = sample.accounted_cpu
        requested = truth.requested_cpu()
        return {
            "minutes": args.minutes,
            "rate": args.rate,
            "lifetime_s": args.lifetime,
            "churn_seconds": round(elapsed, 1),
            "achieved_create_rate": round(counts["created"] / elapsed, 1),
            "counts": counts,
            "warm_up_s": warm,
            "leader_at_start": leader,
            "leader_at_end": holder,
            "crashed": [r.identity for r in [*env.retired, *env.replicas] if r.crashed],
            "lost": len(truth.lost()),
            "overcommitted_nodes": len(truth.overcommitted()),
            "pending_ours": len(truth.pending_ours()),
            "requested_millicpu": requested,
            "leaked_by_replica": {
                i: None if a is None else round(a - requested) for i, a in accounted.items()
            },
            "summary_leader": summarise(series),
            "series": series,
        }
    finally:
        await env.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=100.0, help="pods created per second")
    parser.add_argument("--lifetime", type=float, default=10.0, help="seconds before deletion")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--png", dest="png_path")
    parser.add_argument("--product", help="run the operators from this source dir (PYTHONPATH)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from .faults import product_commit

    commit = product_commit(args.product)
    print(f"measuring: {commit}", flush=True)
    data = asyncio.run(soak(args))
    data["commit"] = commit
    brief = {k: v for k, v in data.items() if k != "series"}
    print(json.dumps(brief, indent=1, default=str))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(data, indent=1, default=str))
    if args.png_path:
        chart(data["series"], args.png_path, f"soak {args.minutes:g} min at {args.rate:g} pods/s")
    failed = data["crashed"] or data["lost"] or data["overcommitted_nodes"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
