"""Transport: raw JSON requests on the kubernetes-asyncio client's connection pool.

The generated client builds and validates model objects on every call, which costs more CPU than
the scheduling decision itself at hundreds of pods per second. The hot path (lists, watches,
Bindings, events) goes through here instead: same session, TLS settings and credentials (token
refresh included), plain dicts in and out.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient

# (connect, total) seconds for single requests: kubernetes-asyncio otherwise sends none, and a
# hung call would hold a bind slot and its reservation forever.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30, connect=5)
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
AUTH_REFRESH = 10.0  # seconds between asking the client configuration for fresh credentials


class Transport:
    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.host = (api.configuration.host or "").rstrip("/")
        self.session: aiohttp.ClientSession = api.rest_client.pool_manager
        self._auth: dict[str, str] = {}
        self._auth_at = float("-inf")

    async def headers(self, content_type: str | None = None) -> dict[str, str]:
        now = time.monotonic()
        if now - self._auth_at > AUTH_REFRESH:
            auth: dict[str, str] = {}
            await self.api.update_params_for_auth(auth, [], ["BearerToken"])
            self._auth, self._auth_at = auth, now
        return {
            "Accept": "application/json",
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
    ) -> tuple[int, bytes]:
        """(HTTP status, body). Network errors and timeouts raise."""
        async with self.session.request(
            method,
            self.host + path,
            data=None if body is None else json.dumps(body),
            params=params,
            headers=await self.headers(content_type),
            timeout=REQUEST_TIMEOUT,
        ) as resp:
            return resp.status, await resp.read()

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        status, data = await self.request("GET", path, params=params)
        if status != 200:
            raise ApiError(status, data)
        return json.loads(data)

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, params: Mapping[str, str], read_timeout: float
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A streaming GET (a watch): no total timeout, only one between reads."""
        timeout = aiohttp.ClientTimeout(total=None, connect=5, sock_read=read_timeout)
        async with self.session.get(
            self.host + path, params=params, headers=await self.headers(), timeout=timeout
        ) as resp:
            if resp.status != 200:
                raise ApiError(resp.status, await resp.read())
            yield resp


class ApiError(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:300].decode(errors='replace')}")
        self.status = status
