"""Operator settings, read from LOADWISE_* environment variables (the chart sets them)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .metrics.prometheus import (
    DEFAULT_CPU_QUERY,
    DEFAULT_MEMORY_QUERY,
    DEFAULT_POD_CPU_QUERY,
    DEFAULT_POD_MEMORY_QUERY,
)

PREFIX = "LOADWISE_"
_DIMENSION_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scheduler_name: str = Field("loadwise-scheduler", min_length=1)
    # Enabled node-metrics sources; each policy picks one (spec.metrics.source). Empty: none.
    metrics_sources: tuple[Literal["prometheus", "metrics-server"], ...] = ("prometheus",)
    prometheus_url: str = "http://prometheus-server.monitoring.svc"
    prometheus_cpu_query: str = DEFAULT_CPU_QUERY
    prometheus_memory_query: str = DEFAULT_MEMORY_QUERY
    prometheus_node_label: str = "node"
    # Further node dimensions: name -> PromQL giving per-node utilisation 0..1 with the node
    # label (JSON object in the environment), e.g. {"disk-io": "..."}.
    prometheus_dimensions: dict[str, str] = Field(default_factory=dict)
    # Per-pod usage, for learned per-workload estimates: series labelled namespace and pod;
    # CPU in cores, memory in bytes.
    prometheus_pod_cpu_query: str = Field(DEFAULT_POD_CPU_QUERY, min_length=1)
    prometheus_pod_memory_query: str = Field(DEFAULT_POD_MEMORY_QUERY, min_length=1)
    # Learn what each workload's pods really use (one more metrics request per refresh).
    learn_usage: bool = True
    prometheus_timeout: float = Field(5.0, gt=0)
    # How long before a query a placement must be to show fully in its figures: the rate
    # window plus the scrape interval (default query: 1m window, node-exporter at 15 s).
    metrics_lag: float = Field(75.0, ge=0)
    metrics_interval: float = Field(10.0, gt=0)
    bind_concurrency: int = Field(64, ge=1, le=4096)
    initial_backoff: float = Field(1.0, gt=0)
    max_backoff: float = Field(10.0, gt=0)
    unschedulable_timeout: float = Field(60.0, gt=0, le=300)
    # Repeated FailedScheduling events for one pod with the same message are at most this often.
    failure_event_interval: float = Field(60.0, ge=0)
    http_host: str = "0.0.0.0"  # HTTPS and plain HTTP ports; in a pod: all; tests: 127.0.0.1
    # Plain, unauthenticated /metrics, /healthz, /readyz: local development only; 0 disables.
    http_port: int = Field(0, ge=0, le=65535)
    # Relist pods and nodes this often to drop objects whose DELETED event was lost.
    reconcile_interval: float = Field(300.0, gt=0)
    log_level: str = "INFO"
    # Leader election on a coordination.k8s.io Lease, with kube-scheduler's defaults. Every
    # replica keeps its state warm; only the leader schedules and writes.
    leader_elect: bool = True
    lease_name: str = Field("loadwise-scheduler", min_length=1)
    lease_namespace: str = Field("default", min_length=1)  # the chart: the release namespace
    lease_duration: float = Field(15.0, gt=0)
    renew_deadline: float = Field(10.0, gt=0)
    retry_period: float = Field(2.0, gt=0)
    identity: str = ""  # this replica's name in the Lease; default: pod name or hostname + random
    # The operator's own Pod (the chart sets both from the downward API): operator-level
    # Warning events and the loadwise.io/Degraded condition go on it.
    pod_name: str = ""
    pod_namespace: str = ""
    # How often the API server is probed (GET /readyz on a fresh connection): a failed probe
    # is how a silent network black hole is told apart from a quiet cluster.
    api_probe_interval: float = Field(2.0, gt=0)

    @model_validator(mode="after")
    def _election_timing(self) -> Config:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")
        return self

    @field_validator("metrics_sources", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip() and v.strip() != "none")
        return value

    @field_validator("prometheus_dimensions", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError as exc:
                raise ValueError(f"not a JSON object: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("must be an object of name -> PromQL query")
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
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        values = {
            name: env[PREFIX + name.upper()]
            for name in cls.model_fields
            if PREFIX + name.upper() in env
        }
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{PREFIX}{str(e['loc'][0]).upper()}: {e['msg']}"
                if e["loc"]
                else f"{PREFIX}*: {e['msg']}"
                for e in exc.errors()
            )
            raise ValueError(f"invalid settings: {problems}") from None

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
