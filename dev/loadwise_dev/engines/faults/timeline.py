"""What the benchmark watches while a fault runs: binds, Scheduled events, the operator's logs, in
time order."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from ...kube import KubeError
from ...replicas import stop_background
from ...truth import meta, spec
from .model import (
    BY_METRICS,
    SCHEDULER,
    OnEvent,
)

log = logging.getLogger(__name__)


class Watcher:
    """List, then watch a path on the API server directly, reconnecting at once after errors and
    relisting on 410; `on_event(type, object, monotonic arrival time)`."""

    def __init__(
        self, server: str, token: str, ca_file: Path, path: str, on_event: OnEvent
    ) -> None:
        import ssl

        self.url = server + path
        self.on_event = on_event
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._ssl = ssl.create_default_context(cafile=str(ca_file))
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self.version = ""
        self.reconnects = 0
        self.relists = 0

    async def start(self) -> Watcher:
        self._session = aiohttp.ClientSession(
            headers=self._headers,
            connector=aiohttp.TCPConnector(ssl=self._ssl),
            read_bufsize=2**21,
        )
        await self._list()
        self._task = asyncio.create_task(self._run())
        return self

    async def _list(self) -> None:
        assert self._session is not None
        token = ""
        while True:
            params = {"limit": "500"}
            if token:
                params["continue"] = token
            async with self._session.get(self.url, params=params) as resp:
                if resp.status != 200:
                    raise KubeError(resp.status, await resp.text())
                page = json.loads(await resp.read())
            now = time.monotonic()
            for item in page.get("items") or ():
                self.on_event("LISTED", item, now)
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                self.version = page["metadata"]["resourceVersion"]
                return

    async def _run(self) -> None:
        assert self._session is not None
        while True:
            params = {
                "watch": "1",
                "allowWatchBookmarks": "true",
                "resourceVersion": self.version,
                "timeoutSeconds": "300",
            }
            gone = False
            try:
                async with self._session.get(
                    self.url, params=params, timeout=aiohttp.ClientTimeout(total=None)
                ) as resp:
                    if resp.status == 410:
                        gone = True
                    elif resp.status != 200:
                        raise KubeError(resp.status, await resp.text())
                    else:
                        while line := await resp.content.readline():
                            event = json.loads(line)
                            obj = event.get("object") or {}
                            if event.get("type") == "ERROR":
                                gone = obj.get("code") == 410
                                break
                            version = (obj.get("metadata") or {}).get("resourceVersion")
                            if version:
                                self.version = version
                            if event.get("type") != "BOOKMARK":
                                self.on_event(event["type"], obj, time.monotonic())
                if gone:
                    self.relists += 1
                    await self._list()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.reconnects += 1
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        await stop_background(self._task, self._session)


@dataclass
class Bind:
    t: float
    name: str
    uid: str
    node: str


@dataclass
class ScheduledEvent:
    t: float
    pod: str
    uid: str
    message: str
    instance: str


class Timeline:
    """Binds and Scheduled events as the harness saw them arrive."""

    def __init__(self) -> None:
        self.binds: list[Bind] = []
        self.bound_uids: set[str] = set()
        self.scheduled: list[ScheduledEvent] = []
        self._seen_events: set[str] = set()

    def on_pod(self, _: str, pod: dict[str, Any], t: float) -> None:
        node = spec(pod).get("nodeName")
        uid = meta(pod).get("uid", "")
        if node and uid not in self.bound_uids and spec(pod).get("schedulerName") == SCHEDULER:
            self.bound_uids.add(uid)
            self.binds.append(Bind(t, meta(pod)["name"], uid, node))

    def on_event(self, _: str, event: dict[str, Any], t: float) -> None:
        if event.get("reason") != "Scheduled":
            return
        key = meta(event).get("uid", "")
        if key in self._seen_events:
            return
        self._seen_events.add(key)
        involved = event.get("involvedObject") or {}
        self.scheduled.append(
            ScheduledEvent(
                t,
                involved.get("name", ""),
                involved.get("uid", ""),
                event.get("message") or "",
                str(event.get("reportingInstance") or ""),
            )
        )

    def first_bind_after(self, t: float) -> Bind | None:
        return next((b for b in self.binds if b.t >= t), None)

    def bind_time(self, uid: str) -> float | None:
        return next((b.t for b in self.binds if b.uid == uid), None)

    def first_load_aware_after(self, t: float) -> float | None:
        """When the first pod whose Scheduled event says `by metrics` was bound after `t`
        (its bind as seen by the pod watch; the event's arrival if the bind was not seen)."""
        times = []
        for event in self.scheduled:
            if "by metrics" not in event.message:
                continue
            when = self.bind_time(event.uid)
            when = event.t if when is None else when
            if when >= t:
                times.append(when)
        return min(times) if times else None

    def metrics_ages_after(self, t: float) -> list[int]:
        ages = []
        for event in self.scheduled:
            when = self.bind_time(event.uid) or event.t
            match = BY_METRICS.search(event.message)
            if when >= t and match:
                ages.append(int(match.group(1)))
        return ages

    def by_requests_between(self, start: float, end: float) -> int:
        return sum(
            1
            for e in self.scheduled
            if "by requests" in e.message and start <= (self.bind_time(e.uid) or e.t) <= end
        )

    def instances(self) -> set[str]:
        return {e.instance for e in self.scheduled}


# --- the environment -----------------------------------------------------------------------------
