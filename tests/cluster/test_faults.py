"""Faults, small: two operator replicas (real processes, leader election) schedule a burst into a
nearly full cluster while a real fault hits; the outcome is read from the API server's truth.
The same rows as `bench/faults`, shrunk. Each test has its own control plane (some restart or
cut the API server), so none disturbs the session cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loadwise_dev.engines import faults as faultbench

pytestmark = [pytest.mark.cluster, pytest.mark.faults]  # slow: `make quick` skips them

# Short lease timings keep a kill -9 takeover within a CI budget (client-go's rule holds:
# retry < renew deadline < lease duration).
SETTINGS = faultbench.Settings.small(
    nodes=4,
    burst_seconds=4.0,
    probe_seconds=3.0,
    settle_quiet=3.0,
    settle_timeout=25.0,
    lease_duration=6.0,
    renew_deadline=4.0,
    retry_period=1.0,
    outage_short=4.0,
    black_hole=12.0,
)


async def run(name: str) -> dict[str, Any]:
    result = await faultbench.run_row(SETTINGS, faultbench.rows(SETTINGS)[name])
    assert "error" not in result, result["error"]
    return result


def explain(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1, default=str)[:6000]


def assert_invariants(result: dict[str, Any]) -> None:
    """No pod lost or bound twice, no node over-committed, no crash, accounting exact."""
    why = explain(result)
    assert result["created"] > 0 and result["bound"] > 0, why
    assert result["lost"] == 0, why
    assert result["bound_twice"] == 0, why
    assert result["overcommitted_nodes"] == 0, why
    assert not result["crashed"], why
    leaks = [v for v in result["leaked_by_replica"].values() if v is not None]
    assert leaks, "no replica exports loadwise_accounted_cpu_millicores\n" + why
    assert all(v == 0 for v in leaks), why


async def test_leader_kill9_takeover_without_overcommit() -> None:
    result = await run("kill9")
    assert_invariants(result)
    why = explain(result)
    extra = result["fault_extra"]
    assert extra["lease_seen"], "no leader Lease before the kill\n" + why
    assert extra["takeover_s"] is not None, why
    assert extra["takeover_s"] <= SETTINGS.lease_duration + 2, why
    assert result["resume_s"] is not None, why
    assert result["resume_s"] <= SETTINGS.lease_duration + 2, why


async def test_apiserver_restart_binding_resumes() -> None:
    result = await run("apiserver-short")
    assert_invariants(result)
    why = explain(result)
    assert result["resume_s"] is not None and result["resume_s"] <= 30, why
    assert "api_unreachable" in result["degraded_metric_reasons"], why


async def test_black_hole_detected_and_binding_resumes() -> None:
    result = await run("blackhole")
    assert_invariants(result)
    why = explain(result)
    assert "api_unreachable" in result["degraded_metric_reasons"], why
    assert "ApiServerUnreachable" in result["warning_reasons"], why
    assert result["resume_s"] is not None and result["resume_s"] <= 30, why


async def test_watch_expired_410_relists_without_leak() -> None:
    result = await run("watch-410")
    assert_invariants(result)
    why = explain(result)
    assert result["fault_extra"]["raw_watch_410"] in ("HTTP 410", "ERROR 410"), why
    assert any(v > 0 for v in result["relists_logged"].values()), why
    assert result["resume_s"] is not None and result["resume_s"] <= 30, why


async def test_crd_installed_late() -> None:
    result = await run("crd-late")
    assert_invariants(result)
    why = explain(result)
    assert "crd_missing" in result["degraded_metric_reasons"], why
    assert "CrdMissing" in result["warning_reasons"], why
    assert result["metrics_resume_s"] is not None, why


async def test_all_policies_deleted_still_load_aware() -> None:
    result = await run("policies-deleted")
    assert_invariants(result)
    why = explain(result)
    assert "no_policy" in result["degraded_metric_reasons"], why
    assert "NoPolicy" in result["warning_reasons"], why
    # Load-aware scoring goes on with fresh samples: no policy object drives the refresh.
    assert result["metrics_resume_s"] is not None, why
    assert result.get("metrics_age_max_s") is not None, why
    assert result["metrics_age_max_s"] <= 5, why
