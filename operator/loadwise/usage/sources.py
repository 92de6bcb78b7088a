"""The metrics sources loadwise can read: one field of MetricsSources per source. Adding a
source is its module (a SourceSettings subclass: settings, permissions, dimensions, build) and
one line here; the settings, the flags, a policy's spec.metrics.source, the preflight check and
explain all read this list (docs/architecture.md, "Adding a metrics source")."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from ..setting_groups import SettingsGroup
from .metrics_server import MetricsServerSettings
from .prometheus_settings import PrometheusSettings
from .source_kind import SourceSettings


class MetricsSources(SettingsGroup):
    """Every metrics source's settings (each source's fields keep their own prefix)."""

    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings)
    metrics_server: MetricsServerSettings = Field(default_factory=MetricsServerSettings)

    def each(self) -> Iterator[SourceSettings]:
        for name in type(self).model_fields:
            yield getattr(self, name)


def kinds() -> tuple[type[SourceSettings], ...]:
    return tuple(
        kind
        for info in MetricsSources.model_fields.values()
        if isinstance(kind := info.annotation, type) and issubclass(kind, SourceSettings)
    )


# What LOADWISE_METRICS_SOURCES and a policy's spec.metrics.source may name.
NAMES: tuple[str, ...] = tuple(kind.source_name for kind in kinds())
