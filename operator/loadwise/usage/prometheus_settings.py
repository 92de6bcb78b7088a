"""The Prometheus source's declaration: its settings (LOADWISE_PROMETHEUS_*), the presets that
fill them for the usual Prometheus stacks, its extra dimensions, and how it is built (the
client itself is usage/prometheus.py)."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .cache import MetricsSource
from .prometheus import Connection, PrometheusSource
from .source_kind import BuildContext, SourceSettings

# `$window`: four scrape intervals and at least a minute (usage/scrape_intervals.py).
DEFAULT_CPU_QUERY = '1 - avg by (node) (rate(node_cpu_seconds_total{mode="idle"}[$window]))'
DEFAULT_MEMORY_QUERY = (
    "1 - sum by (node) (node_memory_MemAvailable_bytes)"
    " / sum by (node) (node_memory_MemTotal_bytes)"
)
# Per container first (max), then per pod: a container scraped twice (the kubelet's
# /metrics/cadvisor and /metrics/resource both have it) or seen twice across a restart counts
# once.
DEFAULT_POD_CPU_QUERY = (
    "sum by (namespace, pod) (max by (namespace, pod, container)"
    ' (rate(container_cpu_usage_seconds_total{container!=""}[$window])))'
)
DEFAULT_POD_MEMORY_QUERY = (
    "sum by (namespace, pod) (max by (namespace, pod, container)"
    ' (container_memory_working_set_bytes{container!=""}))'
)
# Where Prometheus serves and what the built-in queries read, per Prometheus stack
# (docs/operations.md, "Prometheus stacks"): (URL, cpu query, memory query, node label).
PRESETS: dict[str, tuple[str, str, str, str]] = {
    # The `prometheus` Helm chart (release `prometheus` in `monitoring`), whose jobs relabel the
    # pod's node name to `node`.
    "node-exporter": (
        "http://prometheus-server.monitoring.svc",
        DEFAULT_CPU_QUERY,
        DEFAULT_MEMORY_QUERY,
        "node",
    ),
    # kube-prometheus (jsonnet), OpenShift: node-exporter's `instance` is the node name; its
    # Prometheus' Service is prometheus-k8s in `monitoring`.
    "kube-prometheus": (
        "http://prometheus-k8s.monitoring.svc:9090",
        '1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[$window]))',
        "1 - sum by (instance) (node_memory_MemAvailable_bytes)"
        " / sum by (instance) (node_memory_MemTotal_bytes)",
        "instance",
    ),
    # kube-prometheus-stack: node-exporter's series name no node; the kubelet's cAdvisor
    # series, labelled `node` by the Prometheus Operator, are scraped by default. A node
    # without pods has no container series: it reads 0, not "no sample". The URL is the
    # Service the Prometheus Operator makes for every Prometheus, whatever the release's name
    # (the chart's own is <release>-kube-prometheus-prometheus).
    "kube-prometheus-stack": (
        "http://prometheus-operated.monitoring.svc:9090",
        "(sum by (node) (max by (node, namespace, pod, container)"
        ' (rate(container_cpu_usage_seconds_total{container!="", pod!=""}[$window])))'
        " or 0 * max by (node) (machine_cpu_cores)) / max by (node) (machine_cpu_cores)",
        "(sum by (node) (max by (node, namespace, pod, container)"
        ' (container_memory_working_set_bytes{container!="", pod!=""}))'
        " or 0 * max by (node) (machine_memory_bytes)) / max by (node) (machine_memory_bytes)",
        "node",
    ),
}
# Prometheus stacks whose labels the built-in queries know (the chart's metrics.preset enum
# must be the same: tests/unit/test_chart_values.py).
PrometheusPreset = Literal["node-exporter", "kube-prometheus", "kube-prometheus-stack"]
_DIMENSION_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")


class PrometheusSettings(SourceSettings):
    """Prometheus (or Thanos, Cortex, Mimir): PromQL over the cluster's own series."""

    source_name = "prometheus"
    prefix = "prometheus_"

    url: str = Field(
        "",
        description="Prometheus base URL (empty: the preset's: node-exporter "
        "http://prometheus-server.monitoring.svc, kube-prometheus "
        "http://prometheus-k8s.monitoring.svc:9090, kube-prometheus-stack "
        "http://prometheus-operated.monitoring.svc:9090)",
    )
    cpu_query: str = Field(
        DEFAULT_CPU_QUERY,
        min_length=1,
        description="PromQL giving each node's CPU utilisation 0..1, labelled by the node "
        "label; $window stands for four scrape intervals, at least 1m",
    )
    memory_query: str = Field(
        DEFAULT_MEMORY_QUERY,
        min_length=1,
        description="PromQL giving each node's memory utilisation 0..1, labelled by the node label",
    )
    node_label: str = Field(
        "node",
        description="the label in the query results that holds the Node's name (default: "
        "the preset's)",
    )
    preset: PrometheusPreset = Field(
        "node-exporter",
        description="whose labels the built-in node queries read: node-exporter (series "
        "labelled `node`), kube-prometheus (node-exporter's `instance` is the node name) or "
        "kube-prometheus-stack (the kubelet's cAdvisor series); the queries and the node "
        "label, when set, override it",
    )
    dimensions: dict[str, str] = Field(
        default_factory=dict,
        description="further node dimensions as a JSON object of name -> PromQL (utilisation "
        '0..1 with the node label), e.g. {"gpu": "avg by (node) (DCGM_FI_DEV_GPU_UTIL) / 100"}',
    )
    pod_cpu_query: str = Field(
        DEFAULT_POD_CPU_QUERY,
        min_length=1,
        description="PromQL giving each pod's CPU use in cores, labelled namespace and pod "
        "(for learned per-workload estimates)",
    )
    pod_memory_query: str = Field(
        DEFAULT_POD_MEMORY_QUERY,
        min_length=1,
        description="PromQL giving each pod's memory use in bytes, labelled namespace and pod",
    )
    device_query: str = Field(
        "DCGM_FI_DEV_GPU_UTIL",
        description="PromQL giving each device's utilisation in percent (NVIDIA's DCGM "
        "exporter by default), one series per device; empty: devices are chosen first-fit, as "
        "kube-scheduler does",
    )
    device_memory_query: str = Field(
        "100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
        description="PromQL giving each device's memory in use, in percent, one series per "
        "device with the same label; a device counts as busy as the larger of its two figures. "
        "Empty: utilisation alone",
    )
    device_label: str = Field(
        "UUID",
        min_length=1,
        description="the label in the device query's results that names the device",
    )
    device_attribute: str = Field(
        "uuid",
        min_length=1,
        description="the ResourceSlice device attribute (in any domain) holding the same "
        "name, matching a series to a device",
    )
    timeout: float = Field(5.0, gt=0, description="seconds before a Prometheus query is given up")
    ca_file: str = Field(
        "", description="PEM file of the CA(s) that sign an https Prometheus URL's certificate"
    )
    bearer_token_file: str = Field(
        "",
        description="file holding a bearer token sent to Prometheus, read again for every "
        "query (rotated tokens); not with a username",
    )
    username: str = Field("", description="basic auth user name for Prometheus")
    password_file: str = Field(
        "", description="file holding the basic auth password (with a username)"
    )
    headers: dict[str, str] = Field(
        {},
        description="extra HTTP headers for Prometheus as a JSON object, e.g. a tenant for "
        'Thanos, Cortex or Mimir: {"X-Scope-OrgID": "team-a"}',
    )

    @model_validator(mode="after")
    def _preset(self) -> PrometheusSettings:
        """The preset's URL, queries and node label where not set (empty counts as not set)."""
        url, cpu, memory, label = PRESETS[self.preset]
        for name, value in (
            ("url", url),
            ("cpu_query", cpu),
            ("memory_query", memory),
            ("node_label", label),
        ):
            if name not in self.model_fields_set or not getattr(self, name):
                object.__setattr__(self, name, value)  # frozen: set once, while validating
        return self

    @field_validator(
        "cpu_query", "memory_query", "pod_cpu_query", "pod_memory_query", mode="before"
    )
    @classmethod
    def _stripped(cls, value: Any) -> Any:
        """A query of only whitespace is refused (min_length), not sent to Prometheus."""
        return value.strip() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _auth(self) -> PrometheusSettings:
        if self.bearer_token_file and self.username:
            raise ValueError(
                "prometheus_bearer_token_file and prometheus_username: set one of them, not both"
            )
        if bool(self.username) != bool(self.password_file):
            raise ValueError("prometheus_username and prometheus_password_file go together")
        for field in ("ca_file", "bearer_token_file", "password_file"):
            path = getattr(self, field)
            if path and not os.access(path, os.R_OK):
                raise ValueError(f"prometheus_{field}: {path} is not a readable file")
        return self

    @field_validator("dimensions", "headers", mode="before")
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

    @field_validator("dimensions")
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

    def connection(self) -> Connection:
        return Connection(
            self.ca_file, self.bearer_token_file, self.username, self.password_file, self.headers
        )

    def refresh_timeout(self) -> float:
        return self.timeout

    def build(self, context: BuildContext) -> MetricsSource:
        return PrometheusSource(self, context.lag, context.known_nodes, context.ready)

    def describe(self, lag: float | None) -> str:
        judged = f"{lag:g}s" if lag is not None else "from the scrape interval"
        return (
            f"Prometheus {self.url} (preset {self.preset}, node label {self.node_label!r}, "
            f"lag {judged})"
        )

    def where(self) -> str:
        return self.url

    def reach_hint(self) -> str:
        return "e.g. LOADWISE_PROMETHEUS_URL through kubectl port-forward"
