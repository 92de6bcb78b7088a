"""Operator settings, read from LOADWISE_* environment variables (the chart sets them) or flags.

The model below is the only list of settings: `loadwise run --help`, the flags and the check for
unknown LOADWISE_* variables are all made from it, so a setting is documented where it is defined.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .env_vars import PREFIX, service_link
from .usage.prometheus import (
    DEFAULT_CPU_QUERY,
    DEFAULT_MEMORY_QUERY,
    DEFAULT_POD_CPU_QUERY,
    DEFAULT_POD_MEMORY_QUERY,
    PRESETS,
)

# Python's level names; charts/loadwise/values.schema.json's logLevel enum must be the same
# (tests/unit/test_chart_values.py compares them).
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
# Prometheus stacks whose labels the built-in queries know (usage/prometheus.py PRESETS; the
# chart's metrics.preset enum must be the same).
PrometheusPreset = Literal["node-exporter", "kube-prometheus", "kube-prometheus-stack"]
_DIMENSION_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")

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


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scheduler_name: str = Field(
        "loadwise-scheduler",
        min_length=1,
        description="pods whose spec.schedulerName is this are scheduled by loadwise",
    )
    metrics_sources: tuple[Literal["prometheus", "metrics-server"], ...] = Field(
        ("prometheus",),
        description="node-metrics sources to enable, comma-separated (prometheus, "
        "metrics-server; 'none' or empty: none); each policy picks one",
    )
    prometheus_url: str = Field(
        "",
        description="Prometheus base URL (empty: the preset's: node-exporter "
        "http://prometheus-server.monitoring.svc, kube-prometheus "
        "http://prometheus-k8s.monitoring.svc:9090, kube-prometheus-stack "
        "http://prometheus-operated.monitoring.svc:9090)",
    )
    prometheus_cpu_query: str = Field(
        DEFAULT_CPU_QUERY,
        min_length=1,
        description="PromQL giving each node's CPU utilisation 0..1, labelled by the node "
        "label; $window stands for four scrape intervals, at least 1m",
    )
    prometheus_memory_query: str = Field(
        DEFAULT_MEMORY_QUERY,
        min_length=1,
        description="PromQL giving each node's memory utilisation 0..1, labelled by the node label",
    )
    prometheus_node_label: str = Field(
        "node",
        description="the label in the query results that holds the Node's name (default: "
        "the preset's)",
    )
    prometheus_preset: PrometheusPreset = Field(
        "node-exporter",
        description="whose labels the built-in node queries read: node-exporter (series "
        "labelled `node`), kube-prometheus (node-exporter's `instance` is the node name) or "
        "kube-prometheus-stack (the kubelet's cAdvisor series); the queries and the node "
        "label, when set, override it",
    )
    prometheus_dimensions: dict[str, str] = Field(
        default_factory=dict,
        description="further node dimensions as a JSON object of name -> PromQL (utilisation "
        '0..1 with the node label), e.g. {"gpu": "avg by (node) (DCGM_FI_DEV_GPU_UTIL) / 100"}',
    )
    prometheus_pod_cpu_query: str = Field(
        DEFAULT_POD_CPU_QUERY,
        min_length=1,
        description="PromQL giving each pod's CPU use in cores, labelled namespace and pod "
        "(for learned per-workload estimates)",
    )
    prometheus_pod_memory_query: str = Field(
        DEFAULT_POD_MEMORY_QUERY,
        min_length=1,
        description="PromQL giving each pod's memory use in bytes, labelled namespace and pod",
    )
    learn_usage: bool = Field(
        True,
        description="learn what each workload's pods really use and estimate new pods by it "
        "(one more metrics request per refresh)",
    )
    prometheus_timeout: float = Field(
        5.0, gt=0, description="seconds before a Prometheus query is given up"
    )
    prometheus_ca_file: str = Field(
        "", description="PEM file of the CA(s) that sign an https Prometheus URL's certificate"
    )
    prometheus_bearer_token_file: str = Field(
        "",
        description="file holding a bearer token sent to Prometheus, read again for every "
        "query (rotated tokens); not with a username",
    )
    prometheus_username: str = Field("", description="basic auth user name for Prometheus")
    prometheus_password_file: str = Field(
        "", description="file holding the basic auth password (with a username)"
    )
    prometheus_headers: dict[str, str] = Field(
        {},
        description="extra HTTP headers for Prometheus as a JSON object, e.g. a tenant for "
        'Thanos, Cortex or Mimir: {"X-Scope-OrgID": "team-a"}',
    )
    metrics_lag: float | None = Field(
        None,
        ge=0,
        description="seconds before a query a placement must be to show fully in its figures: "
        "the rate window plus the scrape interval (empty: derived from the scrape interval "
        "Prometheus reports when the CPU query's window is $window, else 75)",
    )
    metrics_interval: float = Field(
        10.0, ge=1, description="seconds between node-metrics refreshes (at least 1)"
    )
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
    reconcile_interval: float = Field(
        300.0,
        gt=0,
        description="seconds between relists of pods and nodes (drops objects whose DELETED "
        "event was lost)",
    )
    log_level: LogLevel = Field(
        "INFO",
        description="log level: DEBUG, INFO, WARNING, ERROR or CRITICAL (any case); DEBUG adds "
        "a line per pod decision (bound, unschedulable)",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="text, or json: one object per line with ts, level, logger, msg and "
        "fields such as pod, node and policy",
    )
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

    @model_validator(mode="after")
    def _preset(self) -> Config:
        """The preset's URL, queries and node label where not set (empty counts as not set)."""
        url, cpu, memory, label = PRESETS[self.prometheus_preset]
        for name, value in (
            ("prometheus_url", url),
            ("prometheus_cpu_query", cpu),
            ("prometheus_memory_query", memory),
            ("prometheus_node_label", label),
        ):
            if name not in self.model_fields_set or not getattr(self, name):
                object.__setattr__(self, name, value)  # frozen: set once, while validating
        return self

    @model_validator(mode="after")
    def _election_timing(self) -> Config:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")
        return self

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_name(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator(
        "prometheus_cpu_query",
        "prometheus_memory_query",
        "prometheus_pod_cpu_query",
        "prometheus_pod_memory_query",
        mode="before",
    )
    @classmethod
    def _stripped(cls, value: Any) -> Any:
        """A query of only whitespace is refused (min_length), not sent to Prometheus."""
        return value.strip() if isinstance(value, str) else value

    @field_validator("metrics_lag", mode="before")
    @classmethod
    def _derived_lag(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("metrics_sources", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip() and v.strip() != "none")
        return value

    @model_validator(mode="after")
    def _prometheus_auth(self) -> Config:
        if self.prometheus_bearer_token_file and self.prometheus_username:
            raise ValueError(
                "prometheus_bearer_token_file and prometheus_username: set one of them, not both"
            )
        if bool(self.prometheus_username) != bool(self.prometheus_password_file):
            raise ValueError("prometheus_username and prometheus_password_file go together")
        files = ("prometheus_ca_file", "prometheus_bearer_token_file", "prometheus_password_file")
        for field in files:
            path = getattr(self, field)
            if path and not os.access(path, os.R_OK):
                raise ValueError(f"{field}: {path} is not a readable file")
        return self

    @field_validator("prometheus_dimensions", "prometheus_headers", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError as exc:
                raise ValueError(f"not a JSON object: {exc}") from None
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError("must be a JSON object of names to strings")
        return value

    @field_validator("prometheus_dimensions")
    @classmethod
    def _dimension_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, query in value.items():
            if not _DIMENSION_NAME.fullmatch(name):
                raise ValueError(
                    f"dimension name {name!r} must be lowercase letters, digits and '-', "
                    "starting with a letter (at most 63)"
                )
            if name in ("cpu", "memory"):
                raise ValueError(f"dimension name {name!r} is built in")
            if not query.strip():
                raise ValueError(f"dimension {name!r} has an empty query")
        return value

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, flags: Mapping[str, Any] | None = None
    ) -> Config:
        """Settings from LOADWISE_* variables, each overridden by a flag's value (by field
        name) when given. Unknown LOADWISE_* variables are refused: a typo would otherwise
        leave its setting at the default without a word."""
        env = os.environ if env is None else env
        unknown = unknown_variables(env)
        if unknown:
            raise ValueError("; ".join(unknown))
        values: dict[str, Any] = {
            name: env[env_name(name)] for name in cls.model_fields if env_name(name) in env
        }
        given = {name: value for name, value in (flags or {}).items() if value is not None}
        values.update(given)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{_origin(str(e['loc'][0]), given)}: {e['msg']}"
                if e["loc"]
                else f"{PREFIX}*: {e['msg']}"
                for e in exc.errors()
            )
            raise ValueError(f"invalid settings: {problems}") from None

    def to_env(self) -> dict[str, str]:
        """These settings as the LOADWISE_* variables `from_env` reads back (the dev cluster
        and tests start `loadwise run` processes with them)."""
        return {env_name(name): env_value(getattr(self, name)) for name in type(self).model_fields}

    # Served like kube-scheduler's secure port (loadwise.secure_serving).
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
    def _serving(self) -> Config:
        if bool(self.tls_cert_file) != bool(self.tls_private_key_file):
            raise ValueError("tls_cert_file and tls_private_key_file go together")
        if self.secure_port and self.secure_port == self.http_port:
            raise ValueError("secure_port and http_port must differ")
        return self


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
    known = [env_name(name) for name in Config.model_fields]
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
