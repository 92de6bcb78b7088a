"""FakeTransport: the `Http` seam programmed by a test, in the spirit of httpx's MockTransport.

Requests go to a handler `(method, path, body, params) -> (status, body)`; the body may be a
dict or list (sent as JSON), bytes, or None (empty). The handler may be async (to hold a call
until the test lets it go) and may raise (`TimeoutError`, `aiohttp.ClientConnectionError`, ...),
which the caller sees exactly as a network failure of the real Transport. Every call is recorded.

Streams (watches) are served per path from a list of scripts, one per connection, in order:
- an int: the stream is refused with that HTTP status (ApiError, as the real Transport raises);
- an exception: raised when connecting;
- a list of items, each a dict (one JSON event line), bytes (a raw chunk, e.g. half a line),
  an exception (raised mid-stream), an asyncio.Event (nothing arrives until the test sets it)
  or HANG (nothing more arrives: the stream stays open).
  At the end of the list the server ends the watch.
When a path's scripts are used up, further connections stay open and silent (an idle watch).

Intercepted wraps a real Http (the cluster tests): requests to chosen paths wait for a gate,
and every answer's status is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from loadwise.kube.transport import REQUEST_TIMEOUT, ApiError, Http, StreamResponse

Reply = tuple[int, Mapping[str, Any] | Sequence[Any] | bytes | None]
Handler = Callable[
    [str, str, Mapping[str, Any] | None, Mapping[str, str] | None], Reply | Awaitable[Reply]
]


class _Hang:
    def __repr__(self) -> str:
        return "HANG"


HANG = _Hang()
Item = Mapping[str, Any] | bytes | BaseException | asyncio.Event | _Hang
Script = int | BaseException | Sequence[Item]


@dataclass
class Call:
    method: str
    path: str
    body: Mapping[str, Any] | None = None
    params: Mapping[str, str] | None = None
    content_type: str | None = None
    at: float = 0.0  # the loop's clock when the call was made
    timeout: aiohttp.ClientTimeout | None = None


def default_handler(
    method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
) -> Reply:
    """What the API server answers a well-formed write: 201 for a POST, else 200."""
    return (201 if method == "POST" else 200), body or {}


async def forever() -> None:
    await asyncio.get_running_loop().create_future()


async def until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    """Poll until `condition()` holds; AssertionError after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if condition():
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for a condition")
        await asyncio.sleep(0.002)


class FakeBody:
    def __init__(self, items: Sequence[Item]) -> None:
        self._items = items

    async def iter_any(self) -> AsyncIterator[bytes]:
        for item in self._items:
            if isinstance(item, _Hang):
                await forever()
            elif isinstance(item, asyncio.Event):
                await item.wait()
            elif isinstance(item, BaseException):
                raise item
            elif isinstance(item, bytes):
                yield item
            else:
                yield orjson.dumps(item) + b"\n"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        buffer = b""
        async for chunk in self.iter_any():
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line + b"\n"
        if buffer:
            yield buffer


@dataclass
class FakeResponse:
    content: FakeBody


@dataclass
class FakeTransport:
    handler: Handler = default_handler
    streams: dict[str, list[Script]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    watches: list[Call] = field(default_factory=list)
    resets: int = 0
    closed: bool = False

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str | None = None,
        timeout: aiohttp.ClientTimeout = REQUEST_TIMEOUT,
    ) -> tuple[int, bytes]:
        now = asyncio.get_running_loop().time()
        self.calls.append(Call(method, path, body, params, content_type, now, timeout))
        reply = self.handler(method, path, body, params)
        status, data = await reply if inspect.isawaitable(reply) else reply
        if data is None:
            return status, b""
        return status, data if isinstance(data, bytes) else orjson.dumps(data)

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        status, data = await self.request("GET", path, params=params)
        if status != 200:
            raise ApiError(status, data)
        return orjson.loads(data)

    async def get_list(
        self, path: str, params: Mapping[str, str], on_item: Callable[[Any], None]
    ) -> Mapping[str, Any]:
        page = await self.get_json(path, params)
        for item in page.get("items") or ():
            on_item(item)
        meta: Mapping[str, Any] = page.get("metadata") or {}
        return meta

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, params: Mapping[str, str], read_timeout: float
    ) -> AsyncIterator[FakeResponse]:
        now = asyncio.get_running_loop().time()
        self.watches.append(Call("GET", path, None, dict(params), None, now))
        scripts = self.streams.get(path)
        script: Script = scripts.pop(0) if scripts else [HANG]
        if isinstance(script, int):
            raise ApiError(script, b'{"kind":"Status"}')
        if isinstance(script, BaseException):
            raise script
        yield FakeResponse(FakeBody(script))

    def reset(self) -> None:
        self.resets += 1

    async def close(self) -> None:
        self.closed = True

    # --- for assertions ----------------------------------------------------------------------
    def requests(self, method: str, path_part: str = "") -> list[Call]:
        """The calls with this method whose path contains `path_part`."""
        return [c for c in self.calls if c.method == method and path_part in c.path]


def answering(reply: Reply | BaseException) -> FakeTransport:
    """A FakeTransport that answers every request with `reply` (or raises it)."""

    def handler(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        if isinstance(reply, BaseException):
            raise reply
        return reply

    return FakeTransport(handler)


class Intercepted:
    def __init__(self, inner: Http) -> None:
        self.inner = inner
        self.holds: dict[str, asyncio.Event] = {}  # path -> a request there waits for this
        self.answers: list[tuple[str, str, int]] = []  # (method, path, status)
        self.waiting: set[str] = set()  # paths with a request held now

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str | None = None,
        timeout: aiohttp.ClientTimeout = REQUEST_TIMEOUT,
    ) -> tuple[int, bytes]:
        gate = self.holds.get(path)
        if gate is not None:
            self.waiting.add(path)
            try:
                await gate.wait()
            finally:
                self.waiting.discard(path)
        status, data = await self.inner.request(method, path, body, params, content_type, timeout)
        self.answers.append((method, path, status))
        return status, data

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return await self.inner.get_json(path, params)

    async def get_list(
        self, path: str, params: Mapping[str, str], on_item: Callable[[Any], None]
    ) -> Mapping[str, Any]:
        return await self.inner.get_list(path, params, on_item)

    def stream(
        self, path: str, params: Mapping[str, str], read_timeout: float
    ) -> contextlib.AbstractAsyncContextManager[StreamResponse]:
        return self.inner.stream(path, params, read_timeout)

    def reset(self) -> None:
        self.inner.reset()

    async def close(self) -> None:
        await self.inner.close()


_INTERCEPTED_IS_HTTP: type[Http] = Intercepted
_FAKE_IS_HTTP: type[Http] = FakeTransport  # mypy (tests/fakes.py) proves the fake fits the seam


@contextlib.asynccontextmanager
async def background(coro: Coroutine[Any, Any, Any]) -> AsyncIterator[asyncio.Task[Any]]:
    """Run `coro` as a task for the block; cancel it after."""
    task = asyncio.create_task(coro)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
