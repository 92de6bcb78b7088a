"""SchedulingPolicy: the pydantic model, pod matching, and the set of live policies.

The model is the one source of truth: `loadwise.policies.crd_schema` turns its JSON schema
into the CRD that the API server enforces, so the server and the operator refuse the same
objects with the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from ..usage.sources import NAMES
from .node_pools import NodePool
from .priority_bands import PriorityBand
from .rebalance_settings import Rebalance
from .selector_model import LabelSelector
from .spec_model import SpecModel as _Model

GROUP = "loadwise.io"
VERSION = "v1alpha1"
PLURAL = "schedulingpolicies"
KIND = "SchedulingPolicy"

if TYPE_CHECKING:
    SourceName = str
else:  # the registered metrics sources' names (usage/sources.py)
    SourceName = Literal[NAMES]


class Weights(_Model):
    """How much each resource's utilisation counts in a node's load score."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.cpu + self.memory > 0",
                    "message": "at least one of weights.cpu and weights.memory must be above 0",
                }
            ]
        }
    )

    cpu: float = Field(1.0, ge=0, le=100, description="Weight of CPU utilisation (0..100).")
    memory: float = Field(1.0, ge=0, le=100, description="Weight of memory utilisation (0..100).")

    @model_validator(mode="after")
    def _not_all_zero(self) -> Weights:
        if self.cpu + self.memory <= 0:
            raise ValueError("at least one of weights.cpu and weights.memory must be above 0")
        return self


class MetricsSettings(_Model):
    """Where node usage comes from and how fresh it must be for load-aware scoring."""

    source: SourceName = Field(
        "prometheus",
        description="Which of the operator's metrics sources this policy reads. A source the "
        "operator does not run leaves every node scored by requests (see status).",
    )
    max_age_seconds: int = Field(
        60,
        ge=1,
        le=3600,
        description="A node sample older than this is stale; the node is then scored by its "
        "requests instead of its measured usage.",
    )
    aggregation: Literal["latest", "avg", "p90", "p95", "max"] = Field(
        "latest",
        description="How a node's load is judged, for its score and the hot test: its latest "
        "sample, or the average, 90th or 95th percentile or maximum of its samples over "
        "windowSeconds (a node that idles between bursts looks cool by its latest sample). "
        "A replica that starts fills the window from Prometheus' history (in the background, "
        "after its first refresh); metrics-server keeps none, so there the window holds what "
        "the replica fetched since it started: shorter at first.",
    )
    window_seconds: int = Field(
        600,
        ge=60,
        le=3600,
        description="The window of an aggregation other than latest, in seconds.",
    )


class HotThresholds(_Model):
    """Utilisation above which a node is hot: hot nodes get no new pods while any feasible node
    is below its thresholds; when every feasible node is hot, the least loaded one is used (so a
    pod never waits on load alone: cluster-autoscaler would not see it). 100 disables."""

    cpu: float = Field(80, ge=1, le=100, description="Percent CPU utilisation.")
    memory: float = Field(90, ge=1, le=100, description="Percent memory utilisation.")


class TargetUtilization(_Model):
    """Pack: the utilisation a node is filled up to (measured load plus the estimate) before
    the next node is used. The hot thresholds still apply above it."""

    cpu: float = Field(70, ge=1, le=100, description="Percent CPU utilisation.")
    memory: float = Field(80, ge=1, le=100, description="Percent memory utilisation.")


class DeviceSettings(_Model):
    """How the devices of dynamic resource allocation (GPUs) are chosen, by their measured
    utilisation (the operator's device query, DCGM_FI_DEV_GPU_UTIL by default)."""

    hot_threshold: float = Field(
        90,
        ge=1,
        le=100,
        description="Percent utilisation above which a device is hot: a node whose devices "
        "for the pod would include a hot one is passed over while another feasible node's "
        "would not, as hot nodes are; on each node the coolest devices that fit are taken. "
        "100 disables.",
    )
    strategy: Literal["Spread", "Pack"] = Field(
        "Spread",
        description="Spread: prefer nodes whose devices for the pod are the least busy. "
        "Pack: prefer nodes with the fewest devices left free after the pod, so whole nodes "
        "stay free for pods asking many devices.",
    )


class SpreadByLabel(_Model):
    """Pods whose value of this label is equal (one tenant, one team) are spread across nodes."""

    label_key: str = Field(
        min_length=1, max_length=317, description="The pod label key, e.g. tenant."
    )
    weight: float = Field(
        2,
        ge=0.1,
        le=100,
        description="Weight of this spreading against the load score (weight 4) and "
        "kube-scheduler's preferences (weights 2-3).",
    )


_DIMENSION_NAME = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"


class Dimension(_Model):
    """A utilisation dimension beyond CPU and memory, declared by the operator's settings
    (for Prometheus, LOADWISE_PROMETHEUS_DIMENSIONS: name -> a PromQL query giving each node's
    utilisation; each metrics source declares the dimensions it measures)."""

    name: str = Field(
        pattern=_DIMENSION_NAME,
        max_length=63,
        description="The dimension's name in the operator's settings, e.g. gpu.",
    )
    weight: float = Field(1, ge=0, le=100, description="Weight in the load score (0..100).")
    hot_threshold: float = Field(
        100, ge=1, le=100, description="Percent utilisation above which a node is hot."
    )


def _listed_once(key: str, message: str) -> dict[str, Any]:
    """The CEL rule that refuses a list naming one `key` twice (the model checks it too)."""
    rule = f"self.all(x, self.exists_one(y, y.{key} == x.{key}))"
    return {"x-kubernetes-validations": [{"rule": rule, "message": message}]}


def _unique(values: list[str], what: str) -> None:
    seen = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{what} {value!r} is listed twice")
        seen.add(value)


class SchedulingPolicySpec(_Model):
    """Which pods a policy governs and how nodes are scored for them."""

    weights: Weights = Field(
        default_factory=Weights, description="Weights of CPU and memory utilisation in the score."
    )
    hot_thresholds: HotThresholds = Field(
        default_factory=HotThresholds, description="When a node counts as hot."
    )
    load_share: int = Field(
        80,
        ge=0,
        le=100,
        description="Percent of a node's score that comes from measured load; the rest comes "
        "from requested/allocatable (kube-scheduler-like balance). 0 ignores metrics.",
    )
    placement_estimate: float = Field(
        1.5,
        ge=0,
        le=10,
        description="Pods placed since a node's last sample, and the pod being placed, add "
        "this factor times their CPU requests to the node's measured CPU (metrics lag "
        "bindings; without it bursts herd onto the node that looked idlest). Above 1 by "
        "default: bursty pods often use more CPU than they request, and underestimating makes "
        "hot nodes while overestimating only spreads a burst wider until the next sample. "
        "0 disables. A workload's learned usage, else its namespace's learned ratio of use to "
        "requests, replaces it (learnedEstimate).",
    )
    memory_estimate: float = Field(
        1.0,
        ge=0,
        le=10,
        description="The memory counterpart of placementEstimate (x memory requests). 1 by "
        "default: memory use above requests is rare and short-lived (under memory pressure the "
        "kubelet evicts such pods first), and overestimating memory would fence cool nodes "
        "off behind the memory hot threshold. 0 disables.",
    )
    scheduler_name: str | None = Field(
        None,
        min_length=1,
        description="Governs only pods with this spec.schedulerName; unset: all of ours.",
    )
    namespace_selector: LabelSelector = Field(
        default_factory=LabelSelector,
        description="Governs pods in namespaces with these labels; empty selects all.",
    )
    pod_selector: LabelSelector = Field(
        default_factory=LabelSelector,
        description="Pods (of this scheduler) the policy governs; empty selects all of them.",
    )
    precedence: int = Field(
        0,
        ge=-1000,
        le=1000,
        description="When several policies select a pod, the highest precedence wins; ties go "
        "to the policy whose name sorts first. Fallback policies come after all others.",
    )
    fallback: bool = Field(
        False,
        description="A fallback policy (the chart's own is one) governs a pod only when no "
        "other policy selects it, whatever their precedences and names; among fallbacks, "
        "precedence then name decide as usual.",
    )
    metrics: MetricsSettings = Field(
        default_factory=MetricsSettings, description="Freshness rules for node metrics."
    )
    strategy: Literal["Spread", "Pack"] = Field(
        "Spread",
        description="Spread: prefer the least loaded node. Pack: prefer the fullest node whose "
        "load stays under targetUtilization, so other nodes stay empty for the autoscaler; "
        "when none does, the least loaded. Pack turns off kube-scheduler's system default "
        "spreading for the pods it governs.",
    )
    target_utilization: TargetUtilization = Field(
        default_factory=TargetUtilization, description="Pack: fill nodes up to this."
    )
    spread_by: list[SpreadByLabel] = Field(
        default_factory=list,
        max_length=8,
        description="Label keys (e.g. tenant) whose pods with equal values are spread across "
        "nodes, combined with the load score and the hot thresholds.",
        json_schema_extra=_listed_once("labelKey", "each labelKey may be listed once"),
    )
    dimensions: list[Dimension] = Field(
        default_factory=list,
        max_length=8,
        description="Extra utilisation dimensions (declared in the operator's settings) that "
        "count in the load score and the hot test. A node without a value counts as 0.",
        json_schema_extra=_listed_once("name", "each dimension name may be listed once"),
    )
    pools: list[NodePool] = Field(
        default_factory=list,
        max_length=16,
        description="Node pools with hot thresholds of their own (the first pool a node is in "
        'applies); a node\'s annotation loadwise.io/hot-thresholds (e.g. "cpu=70,memory=85") '
        "overrides them.",
        json_schema_extra=_listed_once("name", "each pool name may be listed once"),
    )
    priority_bands: list[PriorityBand] = Field(
        default_factory=list,
        max_length=8,
        description="Pods by priority with hot thresholds of their own, judged by the whole "
        "node's use or by their band's and higher bands' only (a pod is in the band of the "
        "highest minPriority at or below its priority; below every band, the policy's rules).",
        json_schema_extra={
            "x-kubernetes-validations": [
                *_listed_once("name", "each band name may be listed once")[
                    "x-kubernetes-validations"
                ],
                *_listed_once("minPriority", "two bands may not start at the same minPriority")[
                    "x-kubernetes-validations"
                ],
            ]
        },
    )
    rebalance: Rebalance = Field(
        default_factory=Rebalance,
        description="Moving pods off nodes that stay hot (off by default).",
    )
    devices: DeviceSettings = Field(
        default_factory=DeviceSettings,
        description="Devices allocated through ResourceClaims: when one is hot, spread or pack.",
    )
    gang_hot_wait_seconds: int | None = Field(
        None,
        ge=0,
        le=3600,
        description="A pod group (gang) whose minimum fits only with a member on a hot node "
        "(every feasible node hot for it) waits for cool room, holding nothing, instead of "
        "taking the least loaded nodes at once: a gang runs at the pace of its slowest member. "
        "Unset: it waits only while cool room is coming, at most 120s: a node is hot only by "
        "the estimates of pods its samples do not show yet, or pods that run to completion "
        "(restartPolicy Never or OnFailure) hold the hot members' requests, or departing pods "
        "free requests at a measured rate that frees as much within the wait; a member that "
        "would only bring its node within 10 points of a hot threshold (5 once the node's "
        "two-minute peak covers its whole window) waits at most 30s, for the same signs. N: up "
        "to N seconds for a hot member, "
        "whatever is coming. 0: no wait. After the wait it is placed as it fits.",
    )
    learned_estimate: bool = Field(
        True,
        description="Estimate a new pod's usage from what running pods of its workload (same "
        "controller) use, as the metrics source reports it (each pod judged like nodes: by "
        "metrics.aggregation over metrics.windowSeconds); for a workload not known yet (or a "
        "pod without a controller), its requests times what the namespace's measured pods use "
        "of theirs (the mean across them, at least 5 pods; kept for an hour after they go, for "
        "a batch tenant's next job); requests x placementEstimate when nothing is known.",
    )

    @model_validator(mode="after")
    def _unique_lists(self) -> SchedulingPolicySpec:
        _unique([s.label_key for s in self.spread_by], "spreadBy labelKey")
        _unique([d.name for d in self.dimensions], "dimension")
        _unique([p.name for p in self.pools], "pool")
        _unique([b.name for b in self.priority_bands], "priority band")
        _unique([str(b.min_priority) for b in self.priority_bands], "priority band minPriority")
        # (bands are ranges from their minPriority to the next one's: equal starts overlap)
        declared = {d.name for d in self.dimensions}
        named = [(f"pool {p.name}", p.hot_thresholds) for p in self.pools]
        named += [(f"priority band {b.name}", b.hot_thresholds) for b in self.priority_bands]
        for what, thresholds in named:
            for name in thresholds.dimensions:
                if name not in declared:
                    raise ValueError(
                        f"{what}: hotThresholds.dimensions names {name!r}, which "
                        "spec.dimensions does not declare"
                    )
        return self


class Condition(_Model):
    type: str = Field(
        description="Ready (the spec is valid and in use) or MetricsAvailable (the policy's "
        "metrics source gives fresh samples, so scoring is load-aware)."
    )
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(description="Ready: Valid or Invalid. MetricsAvailable: Fresh or Degraded.")
    message: str = Field("", description="Why, in words: the problem or the figures.")
    last_transition_time: str = Field(description="RFC 3339 time of the last change.")
    observed_generation: int = Field(0, description="The generation this condition was set from.")


class SchedulingPolicyStatus(_Model):
    """Written by the operator."""

    observed_generation: int = Field(0, description="The generation the operator last read.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready (valid and in use) and MetricsAvailable, one of each type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    nodes_with_fresh_metrics: int = Field(
        0, description="Nodes whose latest sample is within metrics.maxAgeSeconds."
    )
    last_metrics_refresh: str = Field(
        "",
        description="RFC 3339 time of a recent successful metrics refresh: written with the "
        "status's other changes, and at least every 5 minutes (not at every refresh).",
    )


class Policy:
    """A validated policy as the scheduler uses it."""

    __slots__ = ("name", "spec")

    def __init__(self, name: str, spec: SchedulingPolicySpec) -> None:
        self.name = name
        self.spec = spec

    @property
    def sort_key(self) -> tuple[bool, int, str]:
        """Non-fallback policies first, so a user's policy always beats the chart's default."""
        return (self.spec.fallback, -self.spec.precedence, self.name)


DEFAULT_POLICY = Policy("(built-in default)", SchedulingPolicySpec())


def validation_message(exc: ValidationError) -> str:
    """One line per problem, naming the field by its path in the object (spec.weights.cpu)."""
    lines = []
    for error in exc.errors():
        path = ".".join(str(p) for p in ("spec", *error["loc"]))
        lines.append(f"{path}: {error['msg']}")
    return "; ".join(lines)


def parse_spec(spec: Mapping[str, Any] | None) -> SchedulingPolicySpec:
    """Validate a SchedulingPolicy's spec; raises ValueError with a message a user can act on."""
    try:
        return SchedulingPolicySpec.model_validate(dict(spec or {}))
    except ValidationError as exc:
        raise ValueError(validation_message(exc)) from None
