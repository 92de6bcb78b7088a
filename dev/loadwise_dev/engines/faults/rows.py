"""The rows: which fault each runs and what it must show, running one, measuring it, the table and
JSON."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ...truth import meta, spec
from .breakers import (
    _apiserver_down,
    black_hole,
    crd_late,
    kill9,
    no_fault,
    odd_objects,
    policies_deleted,
    ports_released,
    prometheus_down,
    restart_all,
    sigterm,
    watch_gone,
)
from .env import Env
from .model import (
    EXPIRED_LOG,
    STALE_LOG,
    STARTED_LOG,
    Fault,
    Row,
    Settings,
)

log = logging.getLogger(__name__)


def rows(settings: Settings) -> dict[str, Row]:
    s = settings
    lease = s.lease_duration
    return {
        r.name: r
        for r in [
            Row(
                "kill9",
                kill9,
                "leader kill -9",
                takeover=True,
                resume_target=lease + 2,
                expect_degradation=False,
            ),
            Row(
                "sigterm",
                sigterm,
                "leader SIGTERM (graceful hand-over)",
                takeover=True,
                resume_target=2.0,
                expect_degradation=False,
            ),
            Row(
                "apiserver-short",
                _apiserver_down(lambda x: x.outage_short),
                f"kube-apiserver down {s.outage_short:.0f} s",
            ),
            Row(
                "apiserver-long",
                _apiserver_down(lambda x: x.outage_long),
                f"kube-apiserver down {s.outage_long:.0f} s",
            ),
            Row(
                "apiserver-sigterm",
                _apiserver_down(lambda x: x.outage_long, kill=False),
                f"kube-apiserver stopped by SIGTERM, down {s.outage_long:.0f} s",
            ),
            Row("prometheus", prometheus_down, f"Prometheus down {s.prometheus_outage:.0f} s"),
            Row(
                "blackhole", black_hole, f"network black hole {s.black_hole:.0f} s", api_proxy=True
            ),
            Row(
                "watch-410",
                watch_gone,
                "watch expired (410) while pods deleted, nodes replaced",
                api_proxy=True,
                watch_cache=False,
                expect_degradation=False,
            ),
            Row(
                "restart-pending",
                restart_all,
                "operators restarted with pods pending",
                expect_degradation=False,
            ),
            Row(
                "crd-late",
                crd_late,
                "CRD installed after operator start-up",
                crd_before_start=False,
            ),
            Row(
                "policies-deleted",
                policies_deleted,
                "every policy deleted",
                probe_delay=10.0,
                metrics_age_check=True,
            ),
            Row(
                "port-taken",
                ports_released,
                "metrics port taken at start-up",
                ports_taken=True,
                expect_degradation=False,
            ),
            Row(
                "no-election",
                no_fault,
                "two operators without leader election",
                leader_elect=False,
                expect_degradation=False,
                resume_target=None,
                fill=1.3,  # more than fits, all at once: where two unaware schedulers collide
                burst_seconds=0.5,
            ),
            Row(
                "odd-objects",
                odd_objects,
                "1000+ odd pods, nodes, policies mixed in",
                expect_degradation=False,
                resume_target=None,
            ),
        ]
    }


# --- running a row -------------------------------------------------------------------------------
async def run_row(settings: Settings, row: Row) -> dict[str, Any]:
    env = Env(settings, row)
    result: dict[str, Any] = {"fault": row.name, "description": row.description}
    try:
        await env.start()
        await _run(env, row, result)
    except Exception as exc:
        log.exception("row %s failed", row.name)
        result["error"] = repr(exc)
    finally:
        result["logs"] = {r.identity: _tail(r.log_text()) for r in [*env.retired, *env.replicas]}
        await env.stop()
    return result


def _tail(text: str, lines: int = 12) -> list[str]:
    interesting = [
        line
        for line in text.splitlines()
        if any(w in line for w in ("ERROR", "CRITICAL", "Traceback", "WARNING", "Error"))
    ]
    return interesting[-lines:]


async def _run(env: Env, row: Row, result: dict[str, Any]) -> None:
    s = env.settings
    for _ in range(row.replicas):
        await env.add_replica(start=False)
    if row.ports_taken:
        env.take_ports()
    for replica in env.replicas:
        replica.start()
    warm = await env.warm_up(60.0 if row.crd_before_start else 20.0)
    result["warm_up_s"] = None if warm is None else round(warm, 2)
    result["leader_at_start"] = await env.wait_leader(5.0) if row.leader_elect else None
    bodies = env.burst_bodies(row.fill if row.fill is not None else s.fill)
    burst_seconds = row.burst_seconds if row.burst_seconds is not None else s.burst_seconds
    burst = asyncio.create_task(env.paced(bodies, burst_seconds))
    await asyncio.sleep(burst_seconds / 2)
    trickle = asyncio.create_task(env.trickle())  # a pod every 2 s while the fault lasts
    fault = await row.inject(env)
    trickle.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await trickle
    result["fault_s"] = round(fault.end - fault.start, 2)
    probes = asyncio.create_task(
        env.paced(env.probe_bodies(), s.probe_seconds, start_delay=row.probe_delay)
    )
    await burst
    await probes
    settled = await settle(env)
    result["settle_s"] = round(settled, 1)
    await asyncio.sleep(2 * s.metrics_interval + 1)  # a scrape after the last change
    await measure(env, row, fault, result)


async def settle(env: Env) -> float:
    """Until no bind for `settle_quiet` s and no pending pod of ours would fit, or the timeout;
    returns the seconds it took."""
    s = env.settings
    started = time.monotonic()
    while True:
        last = env.timeline.binds[-1].t if env.timeline.binds else started
        now = time.monotonic()
        if now - last >= s.settle_quiet:
            truth = await env.truth(events=False)
            if not truth.lost():
                return now - started
        if now - started > s.settle_timeout:
            return now - started
        await asyncio.sleep(1.0)


async def measure(env: Env, row: Row, fault: Fault, result: dict[str, Any]) -> None:
    s = env.settings
    truth = await env.truth()
    timeline = env.timeline
    ours = {meta(p)["name"]: p for p in truth.pods if truth.ours(p)}
    created = [n for n in env.created if n in ours]
    bound = [n for n in created if spec(ours[n]).get("nodeName")]
    lost = truth.lost()
    twice = truth.bound_twice()
    over = truth.overcommitted()
    holder = await env.lease_holder()
    requested = truth.requested_cpu()
    accounted: dict[str, float | None] = {}
    for replica in env.replicas:
        sample = await env.sampler.scrape(replica) if replica.alive else None
        accounted[replica.identity] = sample.accounted_cpu if sample is not None else None
    leaked = {i: (None if a is None else round(a - requested)) for i, a in accounted.items()}
    if holder in leaked:
        leader_leak = leaked[holder or ""]
    else:  # no leader (no election, or none now): the largest leak of any replica
        known = [v for v in leaked.values() if v is not None]
        leader_leak = max(known, key=abs) if known else None
    crashed = [r.identity for r in [*env.retired, *env.replicas] if r.crashed]
    warnings = truth.warnings(since=fault.wall_start)
    reasons_metric = env.sampler.degraded_reasons(fault.start)
    # resume: first bind after the fault's end (after the fault's start by the new leader for
    # kill/SIGTERM: attributed by the Scheduled event's reportingInstance when it names
    # replicas, else the first bind after the old leader's process exited)
    resume = None
    basis = "first bind after fault end"
    if row.takeover:
        new_leader = fault.extra.get("new_leader")
        by_instance = [
            timeline.bind_time(e.uid)
            for e in timeline.scheduled
            if new_leader and e.instance == new_leader
        ]
        after = [t for t in by_instance if t is not None and t >= fault.start]
        if after:
            resume = min(after) - fault.start
            basis = "first bind whose Scheduled event names the new leader"
        else:
            old_exit = fault.start + (fault.extra.get("old_exit_s") or 0.0)
            first = timeline.first_bind_after(old_exit)
            resume = None if first is None else first.t - fault.start
            basis = "first bind after the old leader exited"
    else:
        first = timeline.first_bind_after(fault.end)
        resume = None if first is None else first.t - fault.end
    if row.takeover:  # load-aware binds by the new leader: from its first bind on
        since = fault.start + (resume or 0.0)
        load_aware = timeline.first_load_aware_after(since)
        metrics_resume = None if load_aware is None else load_aware - fault.start
    else:
        load_aware = timeline.first_load_aware_after(fault.end)
        metrics_resume = None if load_aware is None else load_aware - fault.end
    ages = timeline.metrics_ages_after(fault.end + 10.0) if row.metrics_age_check else []
    result.update(
        created=len(created),
        bound=len(bound),
        lost=len(lost),
        bound_twice=len(twice),
        overcommitted_nodes=len(over),
        leaked_millicpu=leader_leak,
        leaked_by_replica=leaked,
        resume_s=None if resume is None else round(resume, 2),
        resume_basis=basis,
        metrics_resume_s=None if metrics_resume is None else round(metrics_resume, 2),
        crashed=bool(crashed),
        crashed_replicas=crashed,
        degradation_visible=bool(warnings) and bool(reasons_metric),
        warning_reasons=sorted({str(w.get("reason")) for w in warnings}),
        degraded_metric_reasons=sorted(reasons_metric),
        leader_at_end=holder,
        requested_millicpu=requested,
        accounted_millicpu=accounted,
        scheduled_instances=sorted(timeline.instances()),
        by_requests_during_fault=timeline.by_requests_between(fault.start, fault.end),
        lost_examples=lost[:5],
        bound_twice_examples=twice[:5],
        overcommitted_examples=dict(list(over.items())[:5]),
        pending_ours=len(truth.pending_ours()),
        create_errors=env.create_errors,
        fault_extra=fault.extra,
        relists_logged={r.identity: r.log_count(EXPIRED_LOG) for r in env.replicas},
        # Reservations the audit had to release: each one is the invariant broken (and healed).
        stale_reservations={
            r.identity: r.log_count(STALE_LOG) for r in [*env.retired, *env.replicas]
        },
        loops_started={r.identity: r.log_count(STARTED_LOG) for r in [*env.retired, *env.replicas]},
        exit_codes={r.identity: r.returncode for r in env.retired},
        harness_watch_reconnects=sum(w.reconnects for w in env.watchers),
    )
    if ages:
        result["metrics_age_max_s"] = max(ages)
    if any(v for v in leaked.values()):  # does it converge later? (the figure above stands)
        result["leak_converged_s"] = await converge(env)
    if result["lost"]:  # are they bound later?
        result["lost_bound_later_s"] = await lost_later(env)
    result["targets"] = targets(s, row, result)
    result["pass"] = all(v for v in result["targets"].values() if v is not None)


async def converge(env: Env, timeout: float = 60.0) -> float | None:
    """Seconds until every live replica's accounted CPU equals the API's, or None."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        requested = (await env.truth(events=False)).requested_cpu()
        values = [(await env.sampler.scrape(r)).accounted_cpu for r in env.replicas if r.alive]
        if values and all(v is not None and round(v) == requested for v in values):
            return round(time.monotonic() - started, 1)
        await asyncio.sleep(2.0)
    return None


async def lost_later(env: Env, timeout: float = 60.0) -> float | None:
    """Seconds until no pending pod of ours would fit, or None."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if not (await env.truth(events=False)).lost():
            return round(time.monotonic() - started, 1)
        await asyncio.sleep(2.0)
    return None


def targets(s: Settings, row: Row, r: Mapping[str, Any]) -> dict[str, bool | None]:
    """Each target: True (met), False (missed), None (does not apply or not measurable)."""
    leaks = [v for v in (r.get("leaked_by_replica") or {}).values() if v is not None]
    t: dict[str, bool | None] = {
        "0 lost": r.get("lost") == 0,
        "0 bound twice": r.get("bound_twice") == 0,
        "0 over-committed": r.get("overcommitted_nodes") == 0,
        "0 leaked": (all(v == 0 for v in leaks) if leaks else None),
        "0 stale reservations": not any((r.get("stale_reservations") or {}).values()),
        "no crash": not r.get("crashed"),
        "degradation visible": r.get("degradation_visible") if row.expect_degradation else None,
    }
    if row.resume_target is not None:
        resume = r.get("resume_s")
        t[f"resume <= {row.resume_target:g} s"] = resume is not None and resume <= row.resume_target
    # Rows that take metrics away (Prometheus, or every policy / the CRD): load-aware scoring
    # must be back within one refresh (plus the probes' spacing). After API faults the first
    # bind already is load-aware (resume_s covers them).
    if row.name in ("prometheus", "crd-late", "policies-deleted"):
        limit = s.metrics_interval + 1.0 / s.probe_rate
        value = r.get("metrics_resume_s")
        t[f"load-aware <= {limit:g} s"] = value is not None and value <= limit
    if row.metrics_age_check:
        age = r.get("metrics_age_max_s")
        t["metrics refreshed (age <= 5 s)"] = age is not None and age <= 5
    if row.name == "port-taken":
        loops = r.get("loops_started") or {}
        t["one scheduling loop per process"] = all(v <= 1 for v in loops.values())
        t["schedules while the port is taken"] = r.get("warm_up_s") is not None
    return t


# --- the bench -----------------------------------------------------------------------------------
COLUMNS = [
    "fault", "created", "bound", "lost", "bound_twice", "overcommitted_nodes", "leaked_millicpu",
    "resume_s", "metrics_resume_s", "crashed", "degradation_visible",
]  # fmt: skip


def render(results: Sequence[Mapping[str, Any]]) -> str:
    header = [*COLUMNS, "targets"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for r in results:
        cells = []
        for column in COLUMNS:
            value = r.get(column)
            if column == "fault":
                value = r.get("description") or value
            if column == "degradation_visible" and value is not None:
                reasons = ",".join(r.get("warning_reasons") or []) or "-"
                metric_reasons = ",".join(r.get("degraded_metric_reasons") or []) or "-"
                value = f"{value} (events {reasons}; metric {metric_reasons})"
            cells.append("" if value is None else str(value))
        if "error" in r:
            verdict = f"ERROR {r['error'][:80]}"
        else:
            missed = [k for k, v in (r.get("targets") or {}).items() if v is False]
            verdict = "pass" if not missed else "FAIL: " + ", ".join(missed)
            if r.get("fault") == "no-election":
                verdict += " (expected to fail: no election)"
        cells.append(verdict)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def run_bench(
    settings: Settings, names: list[str], on_row: Callable[[dict[str, Any]], None] | None = None
) -> list[dict[str, Any]]:
    table = rows(settings)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown rows {unknown}; known: {', '.join(table)}")
    results = []
    for name in names:
        started = time.monotonic()
        result = await run_row(settings, table[name])
        result["row_seconds"] = round(time.monotonic() - started, 1)
        results.append(result)
        if on_row is not None:
            on_row(result)
    return results


def to_json(settings: Settings, results: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"settings": asdict(settings), **extra, "faults": results}
