"""Informer: list, then watch, one kind of object as raw JSON, like client-go's reflector.

Pods, nodes and namespaces stream through here rather than through kopf: the scheduler sees
every pod in the cluster, and kopf's per-event machinery (body wrappers, diffs, handler
selection, progress checks) cost more than a whole scheduling decision. SchedulingPolicies come
through here too (policies/policywatch.py); kopf keeps only the operator's lifecycle (start-up
with retries, signals, cleanup: handlers.py).

The watch resumes from the last resourceVersion seen (bookmarks keep it current); when that is
too old (410 Gone) the kind is listed again, whole from the API server's watch cache but no
older than the version reached, and `on_relisted` receives every key present, so objects
deleted while nobody watched are dropped.

Each watch asks the API server to end it after 60-80 s (jittered, so the kinds do not reconnect
together), and it is then resumed quietly: the API server sends bookmarks about every minute,
but not always to the watch of an idle kind (storage classes, CSI nodes: in bench/gang several
read nothing for 90 s at once and were dropped with a warning, 6-9 warnings a run with 240 s
watches, none in five runs with these; a curl watch of an idle kind did get them, so why is not
known), which would otherwise be dropped as dead. Dead connections: a watch that has delivered
nothing, not even the end of its request, for READ_TIMEOUT is dropped and resumed with a
warning; the Runtime's API probe also restarts every watch when the API server stops answering
and again when it answers, so a network black hole costs seconds after it ends, not a read
timeout. The reconnect backoff starts again from its floor as soon as a watch is accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import aiohttp

from .liststream import decode
from .prefetch import FROM_CACHE
from .transport import ApiError, Http

log = logging.getLogger(__name__)

OnEvent = Callable[[str | None, Mapping[str, Any]], None]  # (ADDED/MODIFIED/DELETED/None, object)
OnRelisted = Callable[[set[str]], object]  # keys present in a fresh list

WATCH_SECONDS = (60, 80)  # server-side timeout of one watch request, drawn in this range
READ_TIMEOUT = 90.0  # nothing read for this long, past the server's own end: reconnect
PAGE = 500
FEED_TURN = 4  # while the next page is requested, list items fed between turns of the loop
BACKOFF_FLOOR, BACKOFF_CAP = 0.25, 5.0
SEED_ATTEMPTS = 5  # a start-up list tried this often on transient failures, then start-up fails


def transient(exc: BaseException) -> bool:
    """A failure that a later attempt of the same request may not meet: the connection refused,
    cut or timed out, the server overloaded or restarting."""
    if isinstance(exc, ApiError):
        return exc.status == 429 or exc.status >= 500
    return isinstance(exc, aiohttp.ClientError | TimeoutError | ConnectionError)


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def ignore(_: str | None, __: Mapping[str, Any]) -> None:
    """An on_event for listing keys only."""


_paused = 0  # collection_paused blocks open
_collector_was_enabled = False
_freeze_after = False  # one of them asked for the survivors to be frozen


@contextlib.contextmanager
def collection_paused(freeze: bool = True) -> Iterator[None]:
    """No cyclic garbage collection inside, and with `freeze` the survivors frozen after.

    A list allocates millions of long-lived objects (decoded pods, their PodInfos); every
    automatic collection meanwhile re-traversed all of them, which made decoding 50,000 pods
    cost 3.0 s of CPU instead of 0.9 s. Freezing moves what the lists built out of future
    collections, so the first decisions after start-up pay no full collection either. Objects
    freed by reference counting (a replaced pod) are still freed; only cyclic garbage made
    while paused is kept, which lists, rare and making little, may afford: a metrics refresh,
    every interval, freezes only the first time. Blocks may
    overlap: the collector resumes, and freezes if one of them asked, when the last ends."""
    global _paused, _collector_was_enabled, _freeze_after
    if _paused == 0:
        _collector_was_enabled = gc.isenabled()
        gc.disable()
    _paused += 1
    _freeze_after = _freeze_after or freeze
    try:
        yield
    finally:
        _paused -= 1
        if _paused == 0:
            if _freeze_after:
                gc.freeze()
            _freeze_after = False
            if _collector_was_enabled:
                gc.enable()


class Gone(Exception):
    """The resourceVersion is too old to resume from: list again."""


class Informer:
    def __init__(
        self,
        transport: Http,
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
        self.synced = False  # a first list completed
        self.last_progress = time.monotonic()  # a list, an event, a bookmark, a (re)connection
        self._connected = False
        self._current: asyncio.Task[None] | None = None
        self._resync: asyncio.Future[None] | None = None

    async def list(self, from_cache: bool = False, not_older_than: str = "") -> set[str]:
        """Feed every object as an event with type None; remember where the list was taken.
        Pages are fetched one ahead, so the API server serves the next while this one is fed.

        `from_cache`: resourceVersion=0, as client-go's reflector lists first: the API server
        answers from its watch cache (whole, unpaginated) instead of reading etcd page by page,
        and the watch that follows brings whatever the cache had not seen yet. 50,000 pods:
        about 1.5 s instead of 4-5 s here. `not_older_than`: a relist after 410 Gone, from the
        watch cache too, but no older than the version this informer had reached, so that it
        never goes back in time (150,000 pods on 15,000 nodes, `bench/throughput --relist`: the
        next bind came 19 s after the restarted API server was ready when the relist was a
        consistent read in pages, 0.44 s this way; kube-scheduler's 16-17 s). A new leader's
        catch-up stays a consistent read: it must see every bind made before it, at versions
        it never saw."""
        with collection_paused():
            return await self._list(from_cache, not_older_than)

    async def seed(self, from_cache: bool = False) -> set[str]:
        """The start-up list, tried again by itself on a transient failure: at 15,000 nodes and
        150,000 pods one of the ~20 start-up connections sometimes timed out after 5 s (most
        likely while the prefetched pod list was fed without a turn of the loop: prefetch.py),
        and the whole start-up began again (first bind 12-16 s instead of 6-8, peak memory 600
        MiB instead of 370, `bench/throughput --nodes 15000`). Objects fed by a cut-short
        attempt that the next one no longer shows go through `on_relisted`. Other failures,
        and the last attempt's, are raised."""
        delay = BACKOFF_FLOOR
        for attempt in range(1, SEED_ATTEMPTS + 1):
            try:
                keys = await self.list(from_cache=from_cache)
            except Exception as exc:
                if attempt == SEED_ATTEMPTS or not transient(exc):
                    raise
                log.warning(
                    "start-up list of %s failed: %r; retrying in %.2fs", self.path, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_CAP)
                continue
            if attempt > 1 and self.on_relisted is not None:
                self.on_relisted(keys)
            return keys
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def _list(self, from_cache: bool, not_older_than: str = "") -> set[str]:
        keys: set[str] = set()

        def feed(item: Mapping[str, Any]) -> None:
            self.on_event(None, item)
            keys.add(self.key(item))

        page: Mapping[str, Any] | None = None
        if from_cache or not_older_than:
            # Streamed: items are fed while the rest arrives (liststream).
            params: Mapping[str, str] = FROM_CACHE  # what the start-up prefetch asked for
            if not_older_than:
                params = {"resourceVersion": not_older_than, "resourceVersionMatch": "NotOlderThan"}
            try:
                page = {"metadata": await self.transport.get_list(self.path, params, feed)}
            except ValueError as exc:  # not splittable; what was fed is fed again, harmlessly
                log.debug(
                    "list of %s not split as it streamed (%s): decoding it whole", self.path, exc
                )
                page = await self.transport.get_json(self.path, params)
        else:
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
                for i, item in enumerate(page.get("items") or ()):
                    if following is not None and i % FEED_TURN == 0:
                        # The request runs only while this task yields, and it needs a few
                        # turns of the loop to be sent: without them it would wait for the
                        # whole page to be fed.
                        await asyncio.sleep(0)
                    feed(item)
            except BaseException:
                if following is not None:
                    following.cancel()
                raise
            if following is None:
                self.resource_version = meta.get("resourceVersion", "")
                self.synced = True
                self.last_progress = time.monotonic()
                return keys
            page = await following

    async def run(self) -> None:
        """Watch forever from the last list; reconnect with backoff, relist when too old."""
        delay = BACKOFF_FLOOR
        while True:
            if self._resync is not None:
                await self._relist()
                continue
            self._connected = False
            self._current = asyncio.ensure_future(self._watch())
            try:
                await self._current
                delay = BACKOFF_FLOOR
            except Gone:
                log.info("watch of %s expired; listing again", self.path)
                await self._relist()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # we are being stopped
                continue  # restart() cancelled this watch only: resume at once
            except Exception as exc:  # connection drops, apiserver restarts: resume
                if self._connected:  # the API server answered: it is back, start again low
                    delay = BACKOFF_FLOOR
                log.warning("watch of %s failed: %r; retrying in %.1fs", self.path, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_CAP)
            finally:
                self._current = None

    def restart(self) -> None:
        """Drop the current watch connection and resume from the last resourceVersion."""
        if self._current is not None and not self._current.done():
            self._current.cancel()

    async def resync(self) -> None:
        """List again now (the watch stops meanwhile) and return once the list is applied: a
        new leader calls this so that it has seen every bind its predecessor made."""
        if self._resync is None:
            self._resync = asyncio.get_running_loop().create_future()
        waiter = self._resync
        self.restart()
        await asyncio.shield(waiter)

    def stalled_for(self, now: float | None = None) -> float:
        """Seconds since this informer last made progress."""
        return (time.monotonic() if now is None else now) - self.last_progress

    async def _relist(self) -> None:
        # Resyncs asked for from here on need a list that starts later than this one.
        waiter, self._resync = self._resync, None
        # After 410 Gone: from the watch cache, no older than where this informer was; a
        # resync (a new leader's catch-up) reads the latest state.
        after = self.resource_version if waiter is None else ""
        delay = BACKOFF_FLOOR
        while True:
            try:
                keys = await self.list(not_older_than=after)
                break
            except Exception as exc:
                log.warning("listing %s failed: %r; retrying in %.1fs", self.path, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_CAP)
        self.relists += 1
        try:
            if self.on_relisted is not None:
                self.on_relisted(keys)
        finally:
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def _watch(self) -> None:
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(random.randint(*WATCH_SECONDS)),
        }
        try:
            async with self.transport.stream(self.path, params, READ_TIMEOUT) as resp:
                self._connected = True
                self.last_progress = time.monotonic()
                buffer = b""
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    if b"\n" not in buffer:
                        continue
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line:
                            self._dispatch(decode(line))
            self.last_progress = time.monotonic()  # the server ended the watch: alive
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
        self.last_progress = time.monotonic()
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
