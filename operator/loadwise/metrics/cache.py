"""MetricsCache: per-node usage samples, refreshed in bulk, read by the scorers without I/O.

A refresh that fails keeps the previous samples; they age out against each policy's maximum age,
and the scorers then fall back to requests. Scheduling never waits on the metrics source.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodeSample:
    cpu: float  # utilisation fraction 0..1
    memory: float  # utilisation fraction 0..1
    timestamp: float  # wall-clock time of the measurement: staleness is judged from it
    # Pods placed before this time are fully in the figures; later ones are not (rate windows,
    # scrape intervals), so the scorer adds their estimate. Defaults to `timestamp`.
    covers_until: float | None = None

    @property
    def coverage(self) -> float:
        return self.timestamp if self.covers_until is None else self.covers_until


class MetricsSource(Protocol):
    name: str

    async def fetch(self) -> dict[str, NodeSample]:
        """All nodes' latest usage in one bulk request."""
        ...


class MetricsCache:
    def __init__(self, source: MetricsSource | None, interval: float) -> None:
        self.source = source
        self.interval = interval
        self.samples: dict[str, NodeSample] = {}
        self.last_success: float | None = None
        self.last_attempt: float | None = None
        self.last_error: str | None = None
        self.refreshes = 0
        self._lock = asyncio.Lock()

    async def refresh_if_due(self, now: float | None = None) -> bool:
        """Refresh unless it was done within this interval (the start-up refresh and the
        operator's periodic task share the cache). Returns True if it refreshed."""
        if self.source is None:
            return False
        async with self._lock:
            now = time.time() if now is None else now
            if self.last_attempt is not None and now - self.last_attempt < self.interval * 0.9:
                return False
            self.last_attempt = now
            await self.refresh()
            return True

    async def refresh(self) -> None:
        if self.source is None:
            return
        try:
            fresh = await self.source.fetch()
        except Exception as exc:  # any failure degrades scoring; it must not stop scheduling
            self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.warning("metrics refresh from %s failed: %s", self.source.name, self.last_error)
            return
        # A new mapping, never mutated afterwards: readers detect a refresh by identity.
        self.samples = {**self.samples, **fresh}
        self.last_success = time.time()
        self.last_error = None
        self.refreshes += 1
