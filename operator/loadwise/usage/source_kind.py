"""What a metrics source declares: its settings (a SettingsGroup whose fields keep their flat
LOADWISE_* names), the API permissions it needs, and how it is built (the source it builds says
which node dimensions it measures beyond CPU and memory). usage/sources.py lists the sources;
nothing else in the operator names them (the chart does: docs/architecture.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import ClassVar

from ..kube.permission import Permission
from ..kube.transport import Http
from ..setting_groups import SettingsGroup
from .cache import MetricsSource


@dataclass(frozen=True)
class BuildContext:
    """What a source may use besides its settings."""

    transport: Http  # the API server's (a source served through it, as metrics.k8s.io)
    known_nodes: Callable[[], Collection[str]]  # the cluster's node names, once `ready`
    allocatable: Callable[[str], Mapping[str, int] | None]  # a node's, once `ready`
    lag: float | None  # LOADWISE_METRICS_LAG: None, derived by the source or its default
    ready: asyncio.Event | None  # set once the cluster state is listed


class SourceSettings(SettingsGroup):
    """A metrics source: subclass it (the fields are its settings) and add one line to
    usage/sources.py's MetricsSources."""

    # Its name in LOADWISE_METRICS_SOURCES and a policy's spec.metrics.source.
    source_name: ClassVar[str]
    # What it needs granted while enabled (checked at start-up; the chart must grant it).
    permissions: ClassVar[tuple[Permission, ...]] = ()

    def refresh_timeout(self) -> float:
        """Seconds a refresh may take before it is given up (readiness allows for it)."""
        return 5.0

    def build(self, context: BuildContext) -> MetricsSource:
        raise NotImplementedError

    def describe(self, lag: float | None) -> str:
        """Where it reads, for explain's settings line."""
        return self.source_name

    def where(self) -> str:
        """Where it is read from, in a few words (its URL, say)."""
        return self.source_name

    def reach_hint(self) -> str:
        """How to let `loadwise explain`, run outside the cluster, reach it."""
        return ""
