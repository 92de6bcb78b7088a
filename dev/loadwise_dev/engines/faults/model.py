"""The fault benchmark's vocabulary: its settings, a row (a fault and what it must show), a fault's
times."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .env import Env

log = logging.getLogger(__name__)


NS = "faults"
SYSTEM_NS = "loadwise-system"
POLICIES = "/apis/loadwise.io/v1alpha1/schedulingpolicies"
SCHEDULER = "loadwise-scheduler"
LEASE_NAME = "loadwise-scheduler"
LEASE_NAMESPACE = "default"
BY_METRICS = re.compile(r"by metrics (\d+)s old")
EXPIRED_LOG = "expired; listing again"  # informer.py's log line on a 410 relist
STARTED_LOG = "after process start"  # runtime.py logs it once per started scheduling loop
STALE_LOG = "reservation of "  # scheduler.py's audit releasing a reservation no bind settled


# --- settings ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    nodes: int = 20
    node_cpu: int = 4
    node_memory_gi: int = 16
    fill: float = 0.9  # burst requests / cluster CPU
    burst_seconds: float = 12.0
    probe_seconds: float = 10.0
    probe_rate: float = 4.0
    settle_quiet: float = 6.0
    settle_timeout: float = 60.0
    metrics_interval: float = 1.0
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    outage_short: float = 10.0
    outage_long: float = 90.0
    prometheus_outage: float = 90.0
    black_hole: float = 60.0
    restart_gap: float = 5.0
    port_hold: float = 15.0
    odd_pods: int = 1000
    odd_nodes: int = 12
    odd_policies: int = 14
    invalid_policies: int = 24
    seed: int = 1
    product: str | None = None  # a source tree to run the operators from (PYTHONPATH)
    log_level: str = "INFO"

    @classmethod
    def small(cls, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "nodes": 8,
            "burst_seconds": 6.0,
            "probe_seconds": 5.0,
            "settle_quiet": 4.0,
            "settle_timeout": 30.0,
            "outage_short": 5.0,
            "outage_long": 20.0,
            "prometheus_outage": 20.0,
            "black_hole": 20.0,
            "restart_gap": 3.0,
            "port_hold": 6.0,
            "odd_pods": 300,
            "odd_nodes": 6,
            "odd_policies": 7,
            "invalid_policies": 12,
        }
        values.update(overrides)
        return cls(**values)


@dataclass
class Row:
    name: str
    inject: Callable[[Env], Awaitable[Fault]]
    description: str = ""
    replicas: int = 2
    leader_elect: bool = True
    api_proxy: bool = False  # operators reach the API server through a cuttable proxy
    watch_cache: bool = True
    crd_before_start: bool = True
    ports_taken: bool = False
    fill: float | None = None  # default: Settings.fill
    burst_seconds: float | None = None  # default: Settings.burst_seconds
    expect_degradation: bool = True
    resume_target: float | None = 30.0  # seconds; None: no target
    takeover: bool = False  # resume_s counts binds by the new leader after the fault start
    probe_delay: float = 0.0
    metrics_age_check: bool = False  # "by metrics Ns old" must stay fresh after the fault


@dataclass
class Fault:
    start: float  # monotonic
    end: float
    wall_start: float  # Unix time (events carry wall-clock times)
    extra: dict[str, Any] = field(default_factory=dict)


# --- watches -------------------------------------------------------------------------------------
OnEvent = Callable[[str, dict[str, Any], float], None]
