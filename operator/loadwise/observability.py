"""The scheduler's own Prometheus metrics (served by secure_serving).

Where a metric means what a kube-scheduler metric means, it has kube-scheduler's name, labels
and buckets (pkg/scheduler/metrics/metrics.go), so dashboards and alerts written for
kube-scheduler work on loadwise; `profile` is the scheduler name, as kube-scheduler's profiles
are. What only loadwise has is `loadwise_*`, with a `policy` label where decisions differ by
policy. docs/operations.md ("Metrics, logs and the dashboard") lists them all.
"""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

# kube-scheduler exposes no *_created series; they would only double what is scraped.
disable_created_metrics()  # type: ignore[no-untyped-call]


def _exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    """component-base's ExponentialBuckets."""
    return tuple(start * factor**i for i in range(count))


# --- kube-scheduler's names ---------------------------------------------------------------------
SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts",
    "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not "
    "be scheduled, while 'error' means an internal scheduler problem.",
    ["result", "profile"],
)
ATTEMPT_SECONDS = Histogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
    ["result", "profile"],
    buckets=_exponential(0.001, 2, 15),
)
ALGORITHM_SECONDS = Histogram(
    "scheduler_scheduling_algorithm_duration_seconds",
    "Scheduling algorithm latency in seconds (one in-memory cycle: filter, score, pick).",
    # kube-scheduler's buckets start at 1 ms; a loadwise cycle is usually under one.
    buckets=(0.0001, 0.00025, 0.0005, *_exponential(0.001, 2, 15)),
)
EXTENSION_POINT_SECONDS = Histogram(
    "scheduler_framework_extension_point_duration_seconds",
    "Latency for running all plugins of a specific extension point (loadwise: Bind, the "
    "Binding API call).",
    ["extension_point", "status", "profile"],
    buckets=_exponential(0.0001, 2, 12),
)
PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts",
    "Total preemption attempts in the cluster till now",
)
PREEMPTION_VICTIMS = Histogram(
    "scheduler_preemption_victims",
    "Number of selected preemption victims",
    buckets=_exponential(1, 2, 7),
)
PENDING = Gauge(
    "scheduler_pending_pods",
    "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; "
    "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
    "unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the "
    "number of unschedulable pods that the scheduler never attempted to schedule because they "
    "are gated.",
    ["queue"],
)
QUEUES = ("active", "backoff", "unschedulable", "gated")
_PENDING = {queue: PENDING.labels(queue) for queue in QUEUES}


def pending_changed(queue: str, count: int) -> None:
    """The pending gauge of one queue, as it changes (in flight is not pending, nor in
    kube-scheduler; gated pods are counted as they are asked for, by the scheduler's profile)."""
    gauge = _PENDING.get(queue)
    if gauge is not None:
        gauge.set(count)


SLI_SECONDS = Histogram(
    "scheduler_pod_scheduling_sli_duration_seconds",
    "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue "
    "and might involve multiple scheduling attempts.",
    ["attempts"],
    buckets=_exponential(0.01, 2, 20),
)
POD_ATTEMPTS = Histogram(
    "scheduler_pod_scheduling_attempts",
    "Number of attempts to successfully schedule a pod.",
    buckets=_exponential(1, 2, 5),
)

# --- loadwise's own -----------------------------------------------------------------------------
BUILD_INFO = Gauge(
    "loadwise_build_info",
    "Always 1; the labels say which loadwise and which Python run.",
    ["version", "python"],
)
POD_GROUP_DECISIONS = Counter(
    "loadwise_pod_group_decisions_total",
    "Decisions on pod groups (gangs), by result: placed (its minimum reached), unschedulable "
    "(nothing of it kept), hot_wait (it would fit only on a hot node and waits for cool room "
    "coming or its policy's gangHotWaitSeconds), error (its members disagree on scheduler or "
    "priority).",
    ["result"],
)
POD_GROUPS_WAITING = Gauge(
    "loadwise_pod_groups_waiting",
    "Pod groups whose members are held back: their PodGroup is missing, or fewer members than "
    "its minimum exist.",
)
POD_GROUPS_TIMED_OUT = Counter(
    "loadwise_pod_groups_timed_out_total",
    "Times a pod group's members waited past its timeout and were told why.",
)
PLACEMENTS = Counter(
    "loadwise_placements",
    "Placement decisions by policy and by what the chosen node was scored on: 'metrics' (a "
    "fresh sample plus the estimate) or 'requests' (no fresh sample: the fallback).",
    ["policy", "basis"],
)
HOT_PASSED_OVER = Counter(
    "loadwise_hot_nodes_passed_over",
    "Feasible nodes passed over because they were hot, summed over decisions, by policy.",
    ["policy"],
)
ALL_HOT = Counter(
    "loadwise_all_nodes_hot",
    "Decisions where every feasible node was hot and the least loaded one was taken.",
    ["policy"],
)
ESTIMATE_CPU = Histogram(
    "loadwise_placement_estimate_cpu_ratio",
    "CPU the estimate added to the chosen node's measured utilisation (fraction of "
    "allocatable): pods placed since its sample, and the pod being placed. Nodes scored by "
    "metrics only.",
    ["policy"],
    buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0),
)
POLICY_METRICS_AVAILABLE = Gauge(
    "loadwise_policy_metrics_available",
    "1 while the policy's MetricsAvailable condition is True (written by the leader).",
    ["policy"],
)
POLICY_FRESH_NODES = Gauge(
    "loadwise_policy_fresh_nodes",
    "Nodes whose sample from the policy's source is younger than its metrics.maxAgeSeconds.",
    ["policy"],
)
POLICY_HOT_NODES = Gauge(
    "loadwise_policy_hot_nodes",
    "Nodes over one of the policy's hot thresholds by its load figures (its source and "
    "aggregation; nodes with a fresh sample only), as the leader last reported.",
    ["policy"],
)
NODE_UTILISATION = Gauge(
    "loadwise_node_utilisation_ratio",
    "How the nodes' measured utilisation (0..1) is spread, by source and resource: stat min, "
    "median, p90, max and stddev over the nodes with a sample younger than 5 minutes.",
    ["source", "resource", "stat"],
)
SOFT_TAINTED_NODES = Gauge(
    "loadwise_soft_tainted_nodes",
    "Nodes the leader keeps soft-tainted (loadwise.io/hot:PreferNoSchedule): hot under the "
    "default policy at soft_taint_hot_refreshes refreshes in a row, not yet cool long enough.",
)
SOFT_TAINT_WRITES = Counter(
    "loadwise_soft_taint_writes",
    "Soft taints added to and removed from nodes (op add or remove).",
    ["op"],
)
SHADOW_PODS = Counter(
    "loadwise_shadow_pods",
    "Shadow trial: pods the watched scheduler placed that loadwise judged (placed on a node "
    "hot for the pod, by its policy: hot yes or no).",
    ["hot"],
)
SHADOW_WOULD = Counter(
    "loadwise_shadow_would",
    "Shadow trial: where loadwise would have placed those pods (outcome hot, cool, or "
    "unschedulable), with same_node true when it is the node the watched scheduler chose.",
    ["outcome", "same_node"],
)
# Every label set from the start (0 until a shadow trial counts), as Prometheus advises for
# counters: the dashboard's panel has a series to show in any mode.
for _hot in ("yes", "no"):
    SHADOW_PODS.labels(_hot)
for _outcome in ("hot", "cool", "unschedulable"):
    for _same in ("true", "false"):
        SHADOW_WOULD.labels(_outcome, _same)
REBALANCE_HOT_NODES = Gauge(
    "loadwise_rebalance_hot_nodes",
    "Nodes being relieved under the policy: hot at its rebalance.hotRefreshes refreshes in a "
    "row and not yet cool for coolRefreshes (leader only).",
    ["policy"],
)
REBALANCE_WOULD_EVICT = Counter(
    "loadwise_rebalance_would_evict",
    "Pods the dry run of rebalancing would have evicted (a WouldEvict event each; a plan is "
    "counted when it changes, not at every refresh).",
    ["policy"],
)
REBALANCE_EVICTIONS = Counter(
    "loadwise_rebalance_evictions",
    "Pods rebalancing evicted, by policy and the resource over its hot threshold that made "
    "it (cpu, memory, or both joined by +).",
    ["policy", "reason"],
)
REBALANCE_EVICTIONS_REFUSED = Counter(
    "loadwise_rebalance_evictions_refused",
    "Evictions rebalancing asked for that did not happen: disruption-budget (HTTP 429, tried "
    "again later), gone (the pod was gone), error (anything else; nothing moved).",
    ["policy", "reason"],
)
EVENTS_DROPPED = Counter(
    "loadwise_events_dropped_total",
    "Scheduled events not written: the event buffer was full, or the API server refused them "
    "every time it was asked (12 tries over about 75 s).",
)
METRICS_REFRESH = Counter(
    "loadwise_metrics_refresh_total",
    "Node metrics refreshes by source and result.",
    ["source", "result"],
)
METRICS_REFRESH_SECONDS = Histogram(
    "loadwise_metrics_refresh_duration_seconds",
    "Wall time of a metrics refresh (its requests, decoding and learning), by source.",
    ["source"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LOOP_LAG = Histogram(
    "loadwise_event_loop_lag_seconds",
    "How late the event loop woke a 100 ms timer: the longest anything held the loop that "
    "scheduling, watches and refreshes share.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
SOURCE_UP = Gauge(
    "loadwise_metrics_source_up", "1 if the source's last refresh succeeded, else 0.", ["source"]
)
LAST_REFRESH = Gauge(
    "loadwise_metrics_last_success_timestamp_seconds",
    "Unix time of the source's last successful refresh (time() minus it: the freshness).",
    ["source"],
)
LEADER = Gauge("loadwise_leader", "1 while this replica holds the leader Lease and schedules.")
DEGRADED = Gauge(
    "loadwise_degraded",
    "1 while a degradation is active (no_policy, crd_missing, api_unreachable, metrics_source, "
    "stale_reservations).",
    ["reason"],
)
ACCOUNTED_PODS = Gauge(
    "loadwise_accounted_pods", "Pods the scheduler's state holds on nodes (bound or assumed)."
)
ACCOUNTED_CPU = Gauge(
    "loadwise_accounted_cpu_millicores",
    "CPU requests the scheduler's state holds on existing nodes (bound or assumed pods), "
    "millicores.",
)
STALE_RESERVATIONS = Gauge(
    "loadwise_stale_reservations",
    "Reservations the last audit found with no bind behind them or older than the bind "
    "timeout plus the longest backoff (released then; anything but 0 is a bug).",
)
RESERVATIONS_RELEASED = Counter(
    "loadwise_stale_reservations_released_total",
    "Reservations released by the audit because no bind settled them in time.",
)
API_UNREACHABLE_SECONDS = Counter(
    "loadwise_api_unreachable_seconds_total",
    "Seconds the API server did not answer this replica's probes.",
)
REPORT_ERRORS = Counter(
    "loadwise_report_errors_total",
    "Status patches (policies, the operator's condition) that failed; retried next interval.",
)
FRESH_NODES = Gauge(
    "loadwise_metrics_nodes",
    "Nodes whose metrics sample counts (the default policy's maxAgeSeconds), by source.",
    ["source"],
)
LEARNED_WORKLOADS = Gauge(
    "loadwise_learned_workloads", "Workloads with a learned usage estimate, by source.", ["source"]
)


def version() -> str:
    try:
        return metadata.version("loadwise")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


BUILD_INFO.labels(version(), platform.python_version()).set(1)
for _queue in QUEUES:
    PENDING.labels(_queue).set(0)
