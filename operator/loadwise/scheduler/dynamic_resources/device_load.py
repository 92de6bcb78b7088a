"""Devices chosen by their measured load: what kube-scheduler's allocator (first fit in slice
order) and the GPU schedulers that rank by allocated share do not do.

Each device's utilisation comes from Prometheus (NVIDIA's DCGM exporter's
`DCGM_FI_DEV_GPU_UTIL` by default), a series per device whose `device_label` (`UUID`) matches
the ResourceSlice device attribute `device_attribute` (`uuid`, in any domain), and so does the
share of its memory in use (`DCGM_FI_DEV_FB_USED` over used plus free): a device is as busy as
the larger of the two (a GPU whose memory is nearly full is no place for another job). The
figures become the allocator's device scores (helper.py's `scores`): it offers each node's
devices coolest first, so of the devices that satisfy a claim the coolest are allocated;
feasibility is the allocator's own, unchanged. Refreshed at most once a metrics interval, and
only while pods with claims are scheduled; a failed query keeps the last figures and says so in
the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ...usage.prometheus import PrometheusSource
from .helper import AllocatorProcess
from .objects import DeviceObjects

log = logging.getLogger(__name__)


class DeviceLoad:
    def __init__(self, sources: Iterable[object], interval: float) -> None:
        """`sources`: the metrics sources; the first Prometheus one with a device query is
        asked."""
        self.source = next(
            (s for s in sources if isinstance(s, PrometheusSource) and s.device_query), None
        )
        self.interval = interval
        self.by_name: dict[str, float] = {}  # device name (the label's value) -> percent
        self.scores: dict[str, float] = {}  # driver/pool/device -> percent, as last sent
        self._asked = -float("inf")
        self._start = 0  # the allocator's start the scores were sent to (a new one has none)
        self.last_error = ""

    async def refresh_if_due(self, objects: DeviceObjects, allocator: AllocatorProcess) -> None:
        """Ask Prometheus again when a metrics interval has passed, and send the allocator the
        devices' scores when they changed (slices or figures)."""
        source = self.source
        if source is None:
            return
        now = time.monotonic()
        if now - self._asked >= self.interval:
            self._asked = now
            try:
                series = await source.instant(source.device_query)
                if source.device_memory_query:
                    series += await source.instant(source.device_memory_query)
            except Exception as exc:  # devices are then ranked by the last figures
                if str(exc) != self.last_error:
                    log.warning("device utilisation query failed: %s", exc)
                self.last_error = str(exc)
            else:
                self.last_error = ""
                self.by_name = busiest(series, source.device_label)
        scores = device_scores(objects.slices.values(), source.device_attribute, self.by_name)
        if scores != self.scores or allocator.starts != self._start:
            answer = await allocator.call("scores", deviceScores=scores)
            if not answer.get("error"):
                self.scores, self._start = scores, allocator.starts

    def of(self, device: str) -> float | None:
        """A device's utilisation in percent (driver/pool/device), if measured."""
        return self.scores.get(device)


def busiest(series: Iterable[tuple[Mapping[str, str], float]], label: str) -> dict[str, float]:
    """Each device's figure: the largest of its series (utilisation, memory in use)."""
    found: dict[str, float] = {}
    for labels, value in series:
        name = labels.get(label)
        if name and value == value:  # NaN (0/0 of an idle exporter): no figure
            found[name] = max(found.get(name, value), value)
    return found


def device_scores(
    slices: Iterable[Mapping[str, Any]], attribute: str, by_name: Mapping[str, float]
) -> dict[str, float]:
    """driver/pool/device -> utilisation, for every device whose attribute names a series."""
    if not by_name:
        return {}
    scores: dict[str, float] = {}
    suffix = "/" + attribute
    for raw in slices:
        spec = raw.get("spec") or {}
        driver, pool = spec.get("driver"), (spec.get("pool") or {}).get("name")
        for device in spec.get("devices") or ():
            attributes = device.get("attributes") or {}
            for key, value in attributes.items():
                if key != attribute and not key.endswith(suffix):
                    continue
                if not isinstance(value, Mapping):
                    continue
                name = next((str(v) for v in value.values() if v is not None), None)
                if name is not None and name in by_name:
                    scores[f"{driver}/{pool}/{device.get('name')}"] = by_name[name]
                break
    return scores
