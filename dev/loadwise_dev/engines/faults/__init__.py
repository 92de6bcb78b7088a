"""Fault benchmark harness: real faults injected into a real control plane while two
operator replicas (real processes, leader election unless a row says otherwise) schedule a burst
into a nearly full cluster; the result is read from the API server's truth.

Used by `bench/faults` (every row, a table and JSON), `bench/soak` and tests/cluster/test_faults.py
(small versions). One `Env` per row: its own control plane (etcd, kube-apiserver,
controller-manager), KWOK playing its nodes and serving their usage, Prometheus, a TCP proxy in
front of Prometheus and (optionally) one in front of the API server for the operators only, the
replicas, a sampler of their /metrics, and watches of pods and events that time-stamp binds and
Scheduled events as the harness sees them.

Per row: warm up (one pod bound), start the burst (paced), inject the fault mid-burst, end it,
create probe pods at a steady rate (so "first bind after the fault" and "first load-aware bind
after it" are measurable), let it settle, then measure:
- lost: pending pods of ours that would fit on some node by requests (truth.py's checker); a pod
  that fits nowhere because the cluster is full is not lost;
- bound_twice: more than one Scheduled event for one pod UID, or one naming another node;
- overcommitted_nodes: bound non-terminal pods' requests above allocatable (cpu, memory, pods,
  any resource);
- leaked_millicpu: each live replica's loadwise_accounted_cpu_millicores minus the requests of
  bound non-terminal pods on existing nodes (the leader's, and the standby's if it exports it);
- resume_s, metrics_resume_s, crashed, degradation_visible (a Warning event other than
  FailedScheduling since the fault began AND loadwise_degraded{reason}=1 in some scrape).
"""

from __future__ import annotations

from .breakers import (
    black_hole,
    crd_late,
    kill9,
    no_fault,
    odd_objects,
    policies_deleted,
    ports_released,
    prometheus_down,
    raw_watch_status,
    restart_all,
    s_lease,
    sigterm,
    watch_gone,
)
from .env import Env
from .model import (
    BY_METRICS,
    EXPIRED_LOG,
    LEASE_NAME,
    LEASE_NAMESPACE,
    NS,
    POLICIES,
    SCHEDULER,
    STALE_LOG,
    STARTED_LOG,
    SYSTEM_NS,
    Fault,
    OnEvent,
    Row,
    Settings,
)
from .rows import (
    COLUMNS,
    converge,
    lost_later,
    measure,
    render,
    rows,
    run_bench,
    run_row,
    settle,
    targets,
    to_json,
)
from .timeline import Bind, ScheduledEvent, Timeline, Watcher

__all__ = [
    "BY_METRICS",
    "COLUMNS",
    "EXPIRED_LOG",
    "LEASE_NAME",
    "LEASE_NAMESPACE",
    "NS",
    "POLICIES",
    "SCHEDULER",
    "STALE_LOG",
    "STARTED_LOG",
    "SYSTEM_NS",
    "Bind",
    "Env",
    "Fault",
    "OnEvent",
    "Row",
    "ScheduledEvent",
    "Settings",
    "Timeline",
    "Watcher",
    "black_hole",
    "converge",
    "crd_late",
    "kill9",
    "lost_later",
    "measure",
    "no_fault",
    "odd_objects",
    "policies_deleted",
    "ports_released",
    "prometheus_down",
    "raw_watch_status",
    "render",
    "restart_all",
    "rows",
    "run_bench",
    "run_row",
    "s_lease",
    "settle",
    "sigterm",
    "targets",
    "to_json",
    "watch_gone",
]
