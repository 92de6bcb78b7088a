"""Informer: list, then watch, one kind of object as raw JSON, like client-go's reflector.

Pods, nodes and namespaces stream through here rather than through kopf: the scheduler sees
every pod in the cluster, and kopf's per-event machinery (body wrappers, diffs, handler
selection, progress checks) cost more than a whole scheduling decision. kopf keeps what it is
good at: the SchedulingPolicy handlers and timers.

The watch resumes from the last resourceVersion seen (bookmarks keep it current); when that is
too old (410 Gone) the kind is listed again and `on_relisted` receives every key present, so
objects deleted while nobody watched are dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from .transport import ApiError, Transport

log = logging.getLogger(__name__)

OnEvent = Callable[[str | None, Mapping[str, Any]], None]  # (ADDED/MODIFIED/DELETED/None, object)
OnRelisted = Callable[[set[str]], None]  # keys present in a fresh list

WATCH_SECONDS = 290  # server-side timeout of one watch request; it is then resumed
PAGE = 500


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def ignore(_: str | None, __: Mapping[str, Any]) -> None:
    """An on_event for listing keys only."""


class Gone(Exception):
    """The resourceVersion is too old to resume from: list again."""


class Informer:
    def __init__(
        self,
        transport: Transport,
        path: str,
        on_event: OnEvent,
        key: Callable[[Mapping[str, Any]], str] = name_of,
        on_relisted: OnRelisted | None = None,
    ) -> None:
        self.transport = transport
        self.path = path
        self.on_event = on_event
        self.key = key
        self.on_relisted = on_relisted
        self.resource_version = ""
        self.events = 0
        self.relists = 0

    async def list(self) -> set[str]:
        """Feed every object as an event with type None; remember where the list was taken.
        Pages are fetched one ahead, so the API server serves the next while this one is fed."""
        keys: set[str] = set()
        page = await self.transport.get_json(self.path, {"limit": str(PAGE)})
        while True:
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            following = None
            if token:
                following = asyncio.ensure_future(
                    self.transport.get_json(self.path, {"limit": str(PAGE), "continue": token})
                )
            try:
                for item in page.get("items") or ():
                    self.on_event(None, item)
                    keys.add(self.key(item))
            except BaseException:
                if following is not None:
                    following.cancel()
                raise
            if following is None:
                self.resource_version = meta.get("resourceVersion", "")
                return keys
            page = await following

    async def run(self) -> None:
        """Watch forever from the last list; reconnect with backoff, relist when too old."""
        delay = 0.5
        while True:
            try:
                await self._watch()
                delay = 0.5
            except Gone:
                log.info("watch of %s expired; listing again", self.path)
                await self._relist()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection drops, apiserver restarts: resume
                log.warning("watch of %s failed: %r; retrying in %.1fs", self.path, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _relist(self) -> None:
        while True:
            try:
                keys = await self.list()
                break
            except Exception as exc:
                log.warning("listing %s failed: %r; retrying", self.path, exc)
                await asyncio.sleep(2.0)
        self.relists += 1
        if self.on_relisted is not None:
            self.on_relisted(keys)

    async def _watch(self) -> None:
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        try:
            async with self.transport.stream(self.path, params, WATCH_SECONDS + 30) as resp:
                buffer = b""
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    if b"\n" not in buffer:
                        continue
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line:
                            self._dispatch(orjson.loads(line))
        except ApiError as exc:
            if exc.status == 410:
                raise Gone from exc
            raise

    def _dispatch(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone
            raise RuntimeError(f"watch error: {obj.get('message')}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        if kind == "BOOKMARK":
            return
        self.events += 1
        try:
            self.on_event(kind, obj)
        except Exception:  # one odd object must not stop the stream
            log.exception("handling a %s event on %s failed", kind, self.path)
