"""Informer event handling without a server: bookmarks, expiry, odd objects."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from loadwise.informer import Gone, Informer

from ..fakes import FakeTransport, Reply


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
    the last page carrying `rv`. `gate`, when set, holds every GET until it is set."""

    def __init__(self, pages: list[list[str]], rv: str) -> None:
        self.pages, self.rv = pages, rv
        self.gate: asyncio.Event | None = None
        self.started = 0  # list requests for a first page

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
        if self.gate is not None:
            await self.gate.wait()
        index = int(token) if token else 0
        meta: dict[str, Any] = {"resourceVersion": self.rv}
        if index + 1 < len(self.pages):
            meta["continue"] = str(index + 1)
        return 200, {"metadata": meta, "items": [obj(n, "1") for n in self.pages[index]]}


def fed_informer(
    fake: FakeTransport, relisted: list[set[str]] | None = None
) -> tuple[Informer, list[tuple[str | None, str]]]:
    seen: list[tuple[str | None, str]] = []

    def on_event(kind: str | None, o: Mapping[str, Any]) -> None:
        seen.append((kind, o["metadata"]["name"]))

    on_relisted = relisted.append if relisted is not None else None
    return Informer(fake, PODS, on_event, on_relisted=on_relisted), seen


@contextlib.asynccontextmanager
async def running(inf: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(inf.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


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
