"""Transport: raw JSON requests with the kubernetes-asyncio client's settings and credentials.

The generated client builds and validates model objects on every call, and its aiohttp session
trusts the environment, which makes aiohttp look up proxies and read ~/.netrc in a worker thread
on *every* request: together more CPU than the scheduling decision itself at hundreds of pods per
second. The hot path (lists, watches, Bindings, events) goes through here instead: its own
connection pools (requests on a bounded one, streams on another) with the same TLS settings (CA,
client certificate, verification, server name), an explicitly configured proxy only, the same
credentials (token refresh included), plain dicts decoded by orjson (the standard library's
decoder was the largest start-up cost with 50,000 pods).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from . import prefetch
from .liststream import ListSplitter

log = logging.getLogger(__name__)

# (connect, total) seconds for single requests: kubernetes-asyncio otherwise sends none, and a
# hung call would hold a bind slot and its reservation forever.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30, connect=5)
LIST_READ_TIMEOUT = 30.0  # a streamed list: longest wait for its next bytes
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
AUTH_REFRESH = 10.0  # seconds between asking the client configuration for fresh credentials


class StreamBody(Protocol):
    """What a watch reads of a streaming response's body (aiohttp's StreamReader)."""

    def iter_any(self) -> AsyncIterator[bytes]:
        """Chunks as they arrive."""
        ...

    def __aiter__(self) -> AsyncIterator[bytes]:
        """Lines."""
        ...


class StreamResponse(Protocol):
    @property
    def content(self) -> StreamBody: ...


class Http(Protocol):
    """What every caller uses of the Transport: the seam unit tests plug a fake into."""

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str | None = None,
        timeout: aiohttp.ClientTimeout = REQUEST_TIMEOUT,
    ) -> tuple[int, bytes]:
        """(HTTP status, body). Network errors and timeouts raise."""
        ...

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """The decoded body of a 200; anything else raises ApiError."""
        ...

    async def get_list(
        self, path: str, params: Mapping[str, str], on_item: Callable[[Any], None]
    ) -> Mapping[str, Any]:
        """A list's metadata; its items go to `on_item` while the response still streams in.
        ValueError if the response cannot be split so (then list with get_json)."""
        ...

    def stream(
        self, path: str, params: Mapping[str, str], read_timeout: float
    ) -> AbstractAsyncContextManager[StreamResponse]:
        """A streaming GET (a watch); a status other than 200 raises ApiError."""
        ...

    def reset(self) -> None:
        """Drop pooled connections: new requests go out on new ones."""
        ...

    async def close(self) -> None: ...


class Transport:
    def __init__(self, api: ApiClient, pool_size: int = 100) -> None:
        self.api = api
        config = api.configuration
        self.host = (config.host or "").rstrip("/")
        self._pool_size = pool_size
        self._ssl = ssl_context(config)
        self.session = self._new_session(pool_size)
        # Streams (watches, streamed lists) hold their connections for minutes. On the bounded
        # pool the ~20 watches left 64 bind slots about 50 connections, and aiohttp counts a
        # wait for a free one against the 5 s connect timeout: once the API server slowed
        # (15,000 nodes with volumes), binds failed so, 1273 in one run (how many for want of
        # a connection rather than a slow accept, the log cannot tell). Streams get a pool of
        # their own, a connection each.
        self.stream_session = self._new_session(0)
        self._closing: set[asyncio.Task[None]] = set()
        self._extra: dict[str, Any] = {}
        if config.proxy:
            self._extra["proxy"] = config.proxy
            self._extra["proxy_headers"] = config.proxy_headers
        if config.tls_server_name:
            self._extra["server_hostname"] = config.tls_server_name
        self._auth: dict[str, str] = {}
        self._auth_at = float("-inf")

    def _new_session(self, limit: int) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, ssl=self._ssl),
            trust_env=False,
            read_bufsize=2**21,  # watch events carry whole objects (etcd allows 1.5 MiB)
        )

    def reset(self) -> None:
        """New requests go out on new connections; the old pool is closed. After a network
        black hole the old connections are dead but look open; without this each would cost a
        request its whole timeout. (Streams already being read are not woken by the close:
        their owners restart them.)"""
        old = (self.session, self.stream_session)
        self.session, self.stream_session = self._new_session(self._pool_size), self._new_session(0)
        for session in old:
            task = asyncio.get_running_loop().create_task(session.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        await asyncio.gather(*self._closing, return_exceptions=True)
        await self.session.close()
        await self.stream_session.close()

    async def headers(self, content_type: str | None = None) -> dict[str, str]:
        now = time.monotonic()
        if now - self._auth_at > AUTH_REFRESH:
            auth: dict[str, str] = {}
            await self.api.update_params_for_auth(auth, [], ["BearerToken"])
            self._auth, self._auth_at = auth, now
        return {
            "Accept": "application/json",
            # No gzip, as kube-scheduler's client (DisableCompression: a scheduler sits next to
            # its API server): at start-up the API server compressing a 50,000-pod list was
            # the slower end of the stream, 0.5 s of 2.3 s here.
            "Accept-Encoding": "identity",
            "Content-Type": content_type or "application/json",
            **self._auth,
        }

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str | None = None,
        timeout: aiohttp.ClientTimeout = REQUEST_TIMEOUT,
    ) -> tuple[int, bytes]:
        """(HTTP status, body). Network errors and timeouts raise, except while reading the
        body of a success: the request took effect (a Binding landed), so the status stands
        and the body is empty."""
        async with self.session.request(
            method,
            self.host + path,
            data=None if body is None else orjson.dumps(body),
            params=params,
            headers=await self.headers(content_type),
            timeout=timeout,
            **self._extra,
        ) as resp:
            try:
                return resp.status, await resp.read()
            except (aiohttp.ClientError, TimeoutError):
                if 200 <= resp.status < 300:
                    return resp.status, b""
                raise

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        status, data = await self.request("GET", path, params=params)
        if status != 200:
            raise ApiError(status, data)
        return orjson.loads(data)

    async def get_list(
        self, path: str, params: Mapping[str, str], on_item: Callable[[Any], None]
    ) -> Mapping[str, Any]:
        prefetched = prefetch.take(self.host, path, params)
        if prefetched is not None:
            try:
                if prefetched.authorization != (await self.headers()).get("authorization"):
                    raise prefetch.Failed("it was asked for with other credentials")
                metadata = await split(prefetched.chunks(), on_item)
                log.debug("list of %s read from its start-up prefetch", path)
                return metadata
            except prefetch.Failed as exc:  # what was fed is fed again, harmlessly
                prefetched.abandon()
                log.debug("prefetched list of %s not used (%s): listing it", path, exc)
        async with self.stream(path, params, LIST_READ_TIMEOUT) as resp:
            return await split(resp.content.iter_any(), on_item)

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, params: Mapping[str, str], read_timeout: float
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A streaming GET (a watch): no total timeout, only one between reads."""
        timeout = aiohttp.ClientTimeout(total=None, connect=5, sock_read=read_timeout)
        async with self.stream_session.get(
            self.host + path,
            params=params,
            headers=await self.headers(),
            timeout=timeout,
            **self._extra,
        ) as resp:
            if resp.status != 200:
                raise ApiError(resp.status, await resp.read())
            yield resp


async def split(chunks: AsyncIterator[bytes], on_item: Callable[[Any], None]) -> Mapping[str, Any]:
    """Feed a list's items as its body arrives; its metadata. ValueError if it cannot be split."""
    splitter = ListSplitter()
    async for chunk in chunks:
        for item in splitter.feed(chunk):
            on_item(item)
    for item in splitter.finish():
        on_item(item)
    assert splitter.metadata is not None  # finish() raises otherwise
    return splitter.metadata


def ssl_context(config: Any) -> ssl.SSLContext:
    """What kubernetes-asyncio's REST client builds from the same configuration."""
    context = ssl.create_default_context(cafile=config.ssl_ca_cert)
    if config.cert_file:
        context.load_cert_chain(config.cert_file, keyfile=config.key_file)
    if not config.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


class ApiError(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:300].decode(errors='replace')}")
        self.status = status


_TRANSPORT_IS_HTTP: type[Http] = Transport  # mypy proves the concrete class fits the seam
