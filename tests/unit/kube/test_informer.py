"""The Informer against the FakeTransport: paging, the watch's resourceVersion, bookmarks,
410 Gone (status or event) and relists, resync, restart, reconnect backoff, odd objects."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest

from loadwise.kube import informer as informer_module
from loadwise.kube.informer import Gone, Informer
from loadwise.kube.transport import ApiError

from ...fakes import HANG, FakeTransport, Reply, background, until


def informer(seen: list[tuple[str | None, str]]) -> Informer:
    def on_event(kind: str | None, obj: Mapping[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name == "odd":
            raise KeyError("a handler bug")
        seen.append((kind, name))

    return Informer(FakeTransport(), "/api/v1/pods", on_event)


def test_events_advance_the_resource_version_and_bookmarks_only_that() -> None:
    seen: list[tuple[str | None, str]] = []
    inf = informer(seen)
    inf._dispatch({"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}})
    inf._dispatch({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    assert seen == [("ADDED", "a")]
    assert inf.resource_version == "9"


def test_a_handler_error_costs_one_event_not_the_stream() -> None:
    seen: list[tuple[str | None, str]] = []
    inf = informer(seen)
    inf._dispatch(
        {"type": "ADDED", "object": {"metadata": {"name": "odd", "resourceVersion": "2"}}}
    )
    inf._dispatch(
        {"type": "DELETED", "object": {"metadata": {"name": "b", "resourceVersion": "3"}}}
    )
    assert seen == [("DELETED", "b")]
    assert inf.resource_version == "3"


def test_expired_resource_version_means_relist() -> None:
    inf = informer([])
    with pytest.raises(Gone):
        inf._dispatch({"type": "ERROR", "object": {"kind": "Status", "code": 410}})
    with pytest.raises(RuntimeError):
        inf._dispatch({"type": "ERROR", "object": {"kind": "Status", "code": 500}})


# --- against the FakeTransport: lists, watches, relists, restarts, backoff -------------------


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


def event(kind: str, name: str, rv: str) -> dict[str, Any]:
    return {"type": kind, "object": obj(name, rv)}


def bookmark(rv: str) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": rv}}}


def gone_event() -> dict[str, Any]:
    return {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}


class Lists:
    """A list endpoint: each list serves `pages` (item names per page), with continue tokens,
    the last page carrying `rv`, as they were when the list began. A list that begins while
    `holds` has gates takes the first and waits for it to be set."""

    def __init__(self, pages: list[list[str]], rv: str) -> None:
        self.pages, self.rv = pages, rv
        self.holds: list[asyncio.Event] = []
        self.started = 0  # list requests for a first page
        self._snapshot = (pages, rv)

    async def __call__(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None,
    ) -> Reply:
        assert method == "GET" and params is not None
        token = params.get("continue")
        if token is None:
            self.started += 1
            self._snapshot = (self.pages, self.rv)
            if self.holds:
                await self.holds.pop(0).wait()
        pages, rv = self._snapshot
        index = int(token) if token else 0
        meta: dict[str, Any] = {"resourceVersion": rv}
        if index + 1 < len(pages):
            meta["continue"] = str(index + 1)
        return 200, {"metadata": meta, "items": [obj(n, "1") for n in pages[index]]}


def fed_informer(
    fake: FakeTransport, relisted: list[set[str]] | None = None
) -> tuple[Informer, list[tuple[str | None, str]]]:
    seen: list[tuple[str | None, str]] = []

    def on_event(kind: str | None, o: Mapping[str, Any]) -> None:
        seen.append((kind, o["metadata"]["name"]))

    on_relisted = relisted.append if relisted is not None else None
    return Informer(fake, PODS, on_event, on_relisted=on_relisted), seen


def running(inf: Informer) -> contextlib.AbstractAsyncContextManager[asyncio.Task[Any]]:
    return background(inf.run())


PODS = "/api/v1/pods"


async def test_a_list_follows_continue_tokens_and_asks_for_the_next_page_before_feeding() -> None:
    lists = Lists([["a", "b"], ["c"], ["d"]], rv="100")
    fake = FakeTransport(lists)
    requested_when_fed: list[int] = []
    inf = Informer(fake, PODS, lambda _, o: requested_when_fed.append(len(fake.calls)))
    keys = await inf.list()
    assert keys == {"a", "b", "c", "d"}
    assert [c.params for c in fake.calls] == [
        {"limit": "500"},
        {"limit": "500", "continue": "1"},
        {"limit": "500", "continue": "2"},
    ]
    # Page n+1 is on its way while page n is fed: the API server serves it meanwhile.
    assert requested_when_fed == [2, 2, 3, 3]
    assert inf.resource_version == "100" and inf.synced


async def test_the_next_page_is_sent_early_in_the_feed_even_when_sending_takes_turns() -> None:
    """A real request needs several turns of the loop (connection, headers) before it leaves:
    feeding a 100-item page must give it those turns early, not after the page."""
    lists = Lists([[f"a{i}" for i in range(100)], ["b"]], rv="7")
    sent_after: list[int] = []
    fed = 0

    async def slow_to_send(
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None,
    ) -> Reply:
        for _ in range(6):
            await asyncio.sleep(0)
        if params and "continue" in params:
            sent_after.append(fed)
        return await lists(method, path, body, params)

    def on_event(kind: str | None, o: Mapping[str, Any]) -> None:
        nonlocal fed
        fed += 1

    keys = await Informer(FakeTransport(slow_to_send), PODS, on_event).list()
    assert len(keys) == 101
    assert sent_after and sent_after[0] <= 40  # well before the page's 100 items are fed


async def test_the_watch_starts_at_the_lists_version_and_bookmarks_advance_only_that() -> None:
    fake = FakeTransport(Lists([["a"]], rv="100"))
    fake.streams[PODS] = [
        [bookmark("105"), event("ADDED", "b", "106"), bookmark("110")],  # then the server ends it
    ]
    inf, seen = fed_informer(fake)
    await inf.list()
    async with running(inf):
        await until(lambda: len(fake.watches) == 2)  # the second one idles
    first, second = (w.params or {} for w in fake.watches)
    assert first["resourceVersion"] == "100" and first["allowWatchBookmarks"] == "true"
    assert first["watch"] == "1"
    assert second["resourceVersion"] == "110"  # resumed where the bookmark left it
    assert seen == [(None, "a"), ("ADDED", "b")]  # bookmarks are never handed on
    assert inf.events == 1 and len(fake.calls) == 1  # no relist


async def test_a_watch_split_across_chunks_is_reassembled() -> None:
    fake = FakeTransport(Lists([[]], rv="1"))
    line = b'{"type":"ADDED","object":{"metadata":{"name":"x","resourceVersion":"7"}}}\n'
    fake.streams[PODS] = [[line[:20], line[20:50], line[50:]]]
    inf, seen = fed_informer(fake)
    await inf.list()
    async with running(inf):
        await until(lambda: len(fake.watches) == 2)
    assert seen == [("ADDED", "x")] and inf.resource_version == "7"


@pytest.mark.parametrize("expiry", ["status", "event"])
async def test_410_relists_and_reports_the_keys_present(expiry: str) -> None:
    lists = Lists([["a", "b"]], rv="100")
    fake = FakeTransport(lists)
    # Either the watch request is refused with 410, or an ERROR event says it mid-stream.
    fake.streams[PODS] = [410] if expiry == "status" else [[gone_event()]]
    relisted: list[set[str]] = []
    inf, seen = fed_informer(fake, relisted)
    await inf.list()
    lists.pages, lists.rv = [["b", "c"]], "200"  # a deleted, c created meanwhile
    async with running(inf):
        await until(lambda: len(fake.watches) == 2)
    assert relisted == [{"b", "c"}] and inf.relists == 1
    assert (fake.watches[1].params or {})["resourceVersion"] == "200"
    assert seen[-2:] == [(None, "b"), (None, "c")]
    # From the watch cache, whole, but never older than what the informer had seen.
    assert fake.calls[1].params == {
        "resourceVersion": "100",
        "resourceVersionMatch": "NotOlderThan",
    }


async def test_resync_returns_only_after_a_list_that_started_after_it_was_asked() -> None:
    lists = Lists([["a"]], rv="100")
    fake = FakeTransport(lists)
    fake.streams[PODS] = [410]
    relisted: list[set[str]] = []
    inf, _ = fed_informer(fake, relisted)
    await inf.list()
    first, second = asyncio.Event(), asyncio.Event()
    lists.holds = [first, second]
    async with running(inf):
        await until(lambda: lists.started == 2)  # the 410's relist is in flight, held
        resync = asyncio.create_task(inf.resync())
        await asyncio.sleep(0.01)
        lists.pages = [["a", "late"]]  # what the in-flight list cannot show
        first.set()
        await until(lambda: lists.started == 3)
        assert relisted == [{"a"}]
        assert not resync.done()  # that list began before the resync was asked for
        second.set()
        await asyncio.wait_for(resync, 2.0)
        assert relisted == [{"a"}, {"a", "late"}]


async def test_resync_while_watching_lists_again_at_once() -> None:
    lists = Lists([["a"]], rv="100")
    fake = FakeTransport(lists)
    relisted: list[set[str]] = []
    inf, _ = fed_informer(fake, relisted)
    await inf.list()
    async with running(inf):
        await until(lambda: len(fake.watches) == 1)  # an idle watch
        lists.pages, lists.rv = [["a", "b"]], "150"
        await asyncio.wait_for(inf.resync(), 2.0)
        assert relisted == [{"a", "b"}]
        await until(lambda: len(fake.watches) == 2)
    assert (fake.watches[1].params or {})["resourceVersion"] == "150"
    assert fake.calls[1].params == {"limit": "500"}  # a consistent read: binds it never saw


async def test_restart_resumes_the_watch_from_the_last_version_without_a_list() -> None:
    fake = FakeTransport(Lists([["a"]], rv="100"))
    fake.streams[PODS] = [[event("MODIFIED", "a", "120"), HANG]]
    inf, seen = fed_informer(fake)
    await inf.list()
    async with running(inf):
        await until(lambda: ("MODIFIED", "a") in seen)
        inf.restart()
        await until(lambda: len(fake.watches) == 2)
    assert (fake.watches[1].params or {})["resourceVersion"] == "120"
    assert len(fake.calls) == 1 and inf.relists == 0


class RecordingAsyncio:
    """The informer's `asyncio`, with sleeps recorded (and not slept)."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        await asyncio.sleep(0)


async def test_backoff_doubles_while_the_api_is_away_and_starts_low_once_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = RecordingAsyncio()
    monkeypatch.setattr(informer_module, "asyncio", recorder)
    refused = aiohttp.ClientConnectionError("connection refused")
    fake = FakeTransport(Lists([[]], rv="1"))
    fake.streams[PODS] = [
        refused,
        refused,
        refused,
        [event("ADDED", "a", "2"), ConnectionResetError("reset mid-stream")],  # it answered
        refused,
    ]
    inf, _ = fed_informer(fake)
    await inf.list()
    async with running(inf):
        await until(lambda: len(fake.watches) == 6)
    floor = informer_module.BACKOFF_FLOOR
    assert recorder.sleeps == [floor, 2 * floor, 4 * floor, floor, 2 * floor]


class CutShort:
    """A list endpoint whose first `failures` lists feed `fed` and then fail with `error`."""

    def __init__(self, inner: FakeTransport, failures: int, fed: list[str], error: Exception):
        self.list_whole = inner.get_list  # the fake's own, before this replaces it
        self.failures, self.fed, self.error = failures, fed, error
        self.attempts = 0

    async def get_list(
        self, path: str, params: Mapping[str, str], on_item: Any
    ) -> Mapping[str, Any]:
        self.attempts += 1
        if self.attempts <= self.failures:
            for name in self.fed:
                on_item(obj(name, "1"))
            raise self.error
        return await self.list_whole(path, params, on_item)


def cut_short(
    monkeypatch: pytest.MonkeyPatch, fake: FakeTransport, failures: int, error: Exception
) -> CutShort:
    monkeypatch.setattr(informer_module, "asyncio", RecordingAsyncio())
    endpoint = CutShort(fake, failures, ["a", "deleted-meanwhile"], error)
    monkeypatch.setattr(fake, "get_list", endpoint.get_list)
    return endpoint


async def test_a_start_up_list_cut_short_is_listed_again_and_drops_what_it_half_fed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeTransport(Lists([["a", "b"]], rv="100"))
    timed_out = aiohttp.ConnectionTimeoutError("Connection timeout to host")
    endpoint = cut_short(monkeypatch, fake, failures=2, error=timed_out)
    relisted: list[set[str]] = []
    inf, seen = fed_informer(fake, relisted)
    assert await inf.seed(from_cache=True) == {"a", "b"}
    assert endpoint.attempts == 3 and inf.synced and inf.resource_version == "100"
    assert relisted == [{"a", "b"}]  # "deleted-meanwhile", fed by a failed attempt, is dropped
    assert seen[-2:] == [(None, "a"), (None, "b")]


async def test_a_first_start_up_list_that_succeeds_relists_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeTransport(Lists([["a"]], rv="100"))
    relisted: list[set[str]] = []
    inf, _ = fed_informer(fake, relisted)
    assert await inf.seed(from_cache=True) == {"a"}
    assert relisted == []


@pytest.mark.parametrize(
    ("error", "attempts"),
    [
        (ApiError(403, b"forbidden"), 1),  # not transient: start-up fails at once and says why
        (ApiError(503, b"unavailable"), informer_module.SEED_ATTEMPTS),
        (aiohttp.ServerDisconnectedError(), informer_module.SEED_ATTEMPTS),
    ],
)
async def test_a_start_up_list_gives_up_on_lasting_or_permanent_failures(
    monkeypatch: pytest.MonkeyPatch, error: Exception, attempts: int
) -> None:
    fake = FakeTransport(Lists([["a"]], rv="100"))
    endpoint = cut_short(monkeypatch, fake, failures=100, error=error)
    inf, _ = fed_informer(fake, [])
    with pytest.raises(type(error)):
        await inf.seed(from_cache=True)
    assert endpoint.attempts == attempts and not inf.synced
