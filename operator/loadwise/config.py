"""Operator settings, read from LOADWISE_* environment variables (the chart sets them) or flags.

The models below, with each metrics source's own (usage/sources.py lists them), are the only
list of settings: `loadwise run --help`, the flags and the check for unknown LOADWISE_*
variables are all made from them, so a setting is documented where it is defined. They are
grouped by concern (setting_groups.py); each keeps its flat name.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .env_vars import PREFIX, service_link
from .setting_groups import SettingsGroup, explicit, flat_fields, flat_name, flatten, nest
from .usage.source_kind import SourceSettings
from .usage.sources import NAMES, MetricsSources

# Python's level names; charts/loadwise/values.schema.json's logLevel enum must be the same
# (tests/unit/test_chart_values.py compares them).
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
if TYPE_CHECKING:
    SourceName = str
else:  # the registered sources' names (usage/sources.py)
    SourceName = Literal[NAMES]

# LOADWISE_* variables that are not operator settings: read by hack/ensure-tools,
# hack/build-image and the development harness (dev/), and exported by
# `hack/ensure-tools --print-env`. tests/unit/test_settings.py checks every LOADWISE_* name the
# repository uses is a setting or listed here.
TOOLING_VARIABLES = frozenset(
    {
        "LOADWISE_CACHE",
        "LOADWISE_IMAGE",
        "LOADWISE_K8S_BIN",
        "LOADWISE_KEEP_LOGS",
        "LOADWISE_VENV",
        "LOADWISE_DEV_STATE",
    }
)


class MetricsSettings(SettingsGroup):
    """Which metrics sources run, and how their figures are refreshed and read."""

    prefix = "metrics_"
    flat_names: ClassVar[Mapping[str, str]] = {
        "enabled": "metrics_sources",
        "learn_usage": "learn_usage",
        "backfill": "metrics_backfill",
    }

    enabled: tuple[SourceName, ...] = Field(
        ("prometheus",),
        description=f"node-metrics sources to enable, comma-separated ({', '.join(NAMES)}; "
        "'none' or empty: none); each policy picks one",
    )
    lag: float | None = Field(
        None,
        ge=0,
        description="seconds before a query a placement must be to show fully in its figures: "
        "the rate window plus the scrape interval (empty: derived from the scrape interval "
        "Prometheus reports when the CPU query's window is $window, else 75)",
    )
    interval: float = Field(
        10.0, ge=1, description="seconds between node-metrics refreshes (at least 1)"
    )
    learn_usage: bool = Field(
        True,
        description="learn what each workload's pods really use and estimate new pods by it "
        "(one more metrics request per refresh)",
    )

    backfill: bool = Field(
        True,
        description="fill policies' windows from Prometheus' history when a replica starts "
        "and for nodes first seen (at most 30 instant queries a window); false: from this "
        "replica's own samples only, as with metrics-server",
    )

    @field_validator("lag", mode="before")
    @classmethod
    def _derived_lag(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("enabled", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        """Comma-separated, each source once (in the order first named)."""
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip() and v.strip() != "none"]
        return tuple(dict.fromkeys(value)) if isinstance(value, (list, tuple)) else value


class SchedulingSettings(SettingsGroup):
    """How pods are bound, retried, preempted and moved."""

    preemption: bool = Field(
        True,
        description="kube-scheduler's DefaultPreemption: a pod that fits nowhere may evict "
        "pods of lower priority (gracefully, PodDisruptionBudgets weighed); false: never, as "
        "a kube-scheduler profile can disable it (and loadwise then needs no pods delete and "
        "reads no PodDisruptionBudgets)",
    )
    rebalance_evictions: bool = Field(
        False,
        description="let policies with spec.rebalance.mode Evict evict (pods/eviction, and the "
        "ledger ConfigMap <lease_name>-rebalance in lease_namespace); false: they only report "
        "what they would move (the chart: rebalancing.evictions)",
    )
    soft_taints: bool = Field(
        False,
        description="keep a loadwise.io/hot=true:PreferNoSchedule taint on nodes hot under the "
        "default policy, so other schedulers avoid them too (nodes update; the chart: "
        "softTaints.enabled)",
    )
    soft_taint_hot_refreshes: int = Field(
        3, ge=1, le=100, description="metrics refreshes a node must be hot in a row to be tainted"
    )
    soft_taint_cool_refreshes: int = Field(
        5,
        ge=1,
        le=100,
        description="metrics refreshes a tainted node must be cool in a row to lose the taint",
    )
    shadow: bool = Field(
        False,
        description="a shadow trial: schedule nothing and write nothing; for each pod another "
        "scheduler (shadow_of) places, decide where loadwise would have placed it and report "
        "both (metrics, /shadow, `loadwise shadow report`); read-only RBAC (the chart: "
        "shadow.enabled)",
    )
    shadow_of: str = Field(
        "default-scheduler",
        min_length=1,
        description="the shadow trial's scheduler: the pods whose spec.schedulerName is this",
    )
    bind_concurrency: int = Field(64, ge=1, le=4096, description="bindings in flight at once")
    initial_backoff: float = Field(
        1.0, gt=0, description="seconds before a pod whose bind failed is retried (doubling)"
    )
    max_backoff: float = Field(10.0, gt=0, description="longest retry backoff, seconds")
    volume_bind_timeout: float = Field(
        600.0,
        gt=0,
        le=3600,
        description="seconds PreBind waits for a pod's claims to be bound (by the PV controller "
        "or a provisioner) before the pod is retried (kube-scheduler's bindTimeoutSeconds)",
    )
    unschedulable_timeout: float = Field(
        60.0,
        gt=0,
        le=300,
        description="seconds an unschedulable pod stays parked without a cluster event before "
        "it is tried again",
    )
    failure_event_interval: float = Field(
        60.0,
        ge=0,
        description="seconds between repeated identical FailedScheduling events for one pod",
    )
    device_settle: float = Field(
        1.0,
        ge=0,
        le=30,
        description="seconds PreBind waits, after writing devices on a pool where another "
        "scheduler allocated devices in the last 10 minutes, before checking that none of them "
        "went to another claim meanwhile (then it undoes its own and retries the pod); 0: no "
        "check after writing",
    )
    gang_wait_timeout: float = Field(
        60.0,
        gt=0,
        description="seconds a pod group's members may wait for their PodGroup or its minimum "
        "of members before each is told why (again at that interval; coscheduling's "
        "scheduleTimeoutSeconds, when set, instead)",
    )


class ElectionSettings(SettingsGroup):
    """Leader election on a Lease."""

    leader_elect: bool = Field(
        True,
        description="elect a leader on a coordination.k8s.io Lease (every replica keeps its "
        "state warm; only the leader schedules and writes)",
    )
    lease_name: str = Field(
        "loadwise-scheduler", min_length=1, description="name of the leader-election Lease"
    )
    lease_namespace: str = Field(
        "default",
        min_length=1,
        description="namespace of the leader-election Lease (the chart: the release namespace)",
    )
    lease_duration: float = Field(
        15.0, gt=0, description="seconds a leader's Lease holds without renewal"
    )
    renew_deadline: float = Field(
        10.0, gt=0, description="seconds the leader keeps trying to renew before it steps down"
    )
    retry_period: float = Field(
        2.0, gt=0, description="seconds between attempts to acquire or renew the Lease"
    )

    @model_validator(mode="after")
    def _timing(self) -> ElectionSettings:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")
        return self


class ReplicaSettings(SettingsGroup):
    """This replica: who it is, and how it watches the API server."""

    identity: str = Field(
        "",
        description="this replica's name in the Lease (default: pod name, else hostname "
        "plus a random suffix)",
    )
    pod_name: str = Field(
        "",
        description="the operator's own Pod (the chart sets it from the downward API): "
        "operator-level Warning events and the loadwise.io/Degraded condition go on it",
    )
    pod_namespace: str = Field("", description="the operator's own Pod's namespace")
    api_probe_interval: float = Field(
        2.0,
        gt=0,
        description="seconds between API server probes (GET /readyz on a fresh connection), "
        "which tell a network black hole from a quiet cluster",
    )
    reconcile_interval: float = Field(
        300.0,
        gt=0,
        description="seconds between relists of pods and nodes (drops objects whose DELETED "
        "event was lost)",
    )


class ServingSettings(SettingsGroup):
    """The ports of /metrics, /healthz and /readyz (served like kube-scheduler's secure port:
    loadwise.secure_serving)."""

    http_host: str = Field(
        "0.0.0.0",
        description="address the HTTPS (secure_port) and plain HTTP ports listen on (in a "
        "pod: all)",
    )
    http_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="plain-HTTP port of /metrics, /healthz and /readyz with no authentication, "
        "for local development only (see secure_port); 0 disables",
    )
    secure_port: int = Field(
        10259,
        ge=0,
        le=65535,
        description="HTTPS port of /metrics, for a bearer token allowed to get the non-resource "
        "URL /metrics (checked by TokenReview and SubjectAccessReview), and of /healthz and "
        "/readyz, open to all; 0 disables",
    )
    tls_cert_file: str = Field(
        "",
        description="PEM certificate (chain) of the HTTPS port; empty: a self-signed one made "
        "at start-up",
    )
    tls_private_key_file: str = Field("", description="PEM private key of tls_cert_file")

    @model_validator(mode="after")
    def _serving(self) -> ServingSettings:
        if bool(self.tls_cert_file) != bool(self.tls_private_key_file):
            raise ValueError("tls_cert_file and tls_private_key_file go together")
        if self.secure_port and self.secure_port == self.http_port:
            raise ValueError("secure_port and http_port must differ")
        return self


class LogSettings(SettingsGroup):
    """What the log says, and how."""

    prefix = "log_"

    level: LogLevel = Field(
        "INFO",
        description="log level: DEBUG, INFO, WARNING, ERROR or CRITICAL (any case); DEBUG adds "
        "a line per pod decision (bound, unschedulable)",
    )
    format: Literal["text", "json"] = Field(
        "text",
        description="text, or json: one object per line with ts, level, logger, msg and "
        "fields such as pod, node and policy",
    )

    @field_validator("level", mode="before")
    @classmethod
    def _level_name(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value


class Config(BaseModel):
    """Every setting, by concern. Set them by their flat names: `from_env` (LOADWISE_*
    variables and flags) or `of` (keyword arguments)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheduler_name: str = Field(
        "loadwise-scheduler",
        min_length=1,
        description="pods whose spec.schedulerName is this are scheduled by loadwise",
    )
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    sources: MetricsSources = Field(default_factory=MetricsSources)
    scheduling: SchedulingSettings = Field(default_factory=SchedulingSettings)
    election: ElectionSettings = Field(default_factory=ElectionSettings)
    replica: ReplicaSettings = Field(default_factory=ReplicaSettings)
    serving: ServingSettings = Field(default_factory=ServingSettings)
    logging: LogSettings = Field(default_factory=LogSettings)

    @classmethod
    def of(cls, **settings: Any) -> Config:
        """Settings by their flat names (those of LOADWISE_* without the prefix), the rest at
        their defaults."""
        return cls.model_validate(nest(cls, settings))

    def but(self, **settings: Any) -> Config:
        """These settings with some changed, by flat name: what was given when they were made
        and these, the rest (and what a preset fills in) derived again."""
        return type(self).of(**{**explicit(self), **settings})

    def flat(self) -> dict[str, Any]:
        """Flat name -> value of every setting."""
        return flatten(self)

    def enabled_sources(self) -> list[SourceSettings]:
        """The settings of the metrics sources LOADWISE_METRICS_SOURCES enables, in its order."""
        by_name = {kind.source_name: kind for kind in self.sources.each()}
        return [by_name[name] for name in self.metrics.enabled]

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, flags: Mapping[str, Any] | None = None
    ) -> Config:
        """Settings from LOADWISE_* variables, each overridden by a flag's value (by flat
        name) when given. Unknown LOADWISE_* variables are refused: a typo would otherwise
        leave its setting at the default without a word."""
        env = os.environ if env is None else env
        unknown = unknown_variables(env)
        if unknown:
            raise ValueError("; ".join(unknown))
        values: dict[str, Any] = {
            f.name: env[env_name(f.name)] for f in flat_fields(cls) if env_name(f.name) in env
        }
        given = {name: value for name, value in (flags or {}).items() if value is not None}
        values.update(given)
        try:
            return cls.of(**values)
        except ValidationError as exc:
            problems = []
            for e in exc.errors():
                name = flat_name(cls, tuple(e["loc"]))
                where = _origin(name, given) if name is not None else f"{PREFIX}*"
                problems.append(f"{where}: {e['msg']}")
            raise ValueError(f"invalid settings: {'; '.join(problems)}") from None

    def to_env(self) -> dict[str, str]:
        """These settings as the LOADWISE_* variables `from_env` reads back (the dev cluster
        and tests start `loadwise run` processes with them)."""
        return {env_name(name): env_value(value) for name, value in self.flat().items()}


def env_name(field: str) -> str:
    return PREFIX + field.upper()


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _origin(field: str, flags: Mapping[str, Any]) -> str:
    return flag_name(field) if field in flags else env_name(field)


def env_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """One message per LOADWISE_* variable that names no setting, with the closest names."""
    known = [env_name(f.name) for f in flat_fields(Config)]
    problems = []
    for variable in sorted(env):
        if not variable.startswith(PREFIX) or variable in known or variable in TOOLING_VARIABLES:
            continue
        if service_link(variable, env):
            continue
        close = difflib.get_close_matches(variable, known, n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(f"unknown setting {variable}{hint}; `loadwise run --help` lists them")
    return problems
