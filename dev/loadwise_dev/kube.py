"""Kube: a thin async REST client for the harness (tests, demo, benchmarks): raw JSON, admin
token, exact control over requests (field validation modes, status codes). The operator has its
own (loadwise.kube.transport); this one plays the user and the cluster around it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp


class KubeError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {message}")


class Kube:
    def __init__(self, server: str, token: str, ca_file: Path, pool: int = 256) -> None:
        self.server = server
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._ssl = ssl.create_default_context(cafile=str(ca_file))
        self._pool = pool
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._pool),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        async with self.session.request(
            method,
            self.server + path,
            json=body,
            params=params,
            headers={"Content-Type": content_type},
        ) as resp:
            text = await resp.text()
            try:
                payload = json.loads(text) if text else None
            except ValueError:  # e.g. an aggregated API's plain-text 503
                payload = text
            if resp.status >= 300:
                raise KubeError(resp.status, payload)
            return payload

    async def create(self, path: str, body: Any, **params: str) -> Any:
        return await self.request("POST", path, body, params or None)

    async def get(self, path: str, **params: str) -> Any:
        return await self.request("GET", path, params=params or None)

    async def watch_status(self, path: str, version: str) -> str:
        """What a watch of `path` from `version` gets now: 'HTTP 410', 'ERROR 410', or what
        else (whether that version has expired)."""
        params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "1"}
        async with self.session.get(self.server + path, params=params) as resp:
            if resp.status != 200:
                return f"HTTP {resp.status}"
            line = await resp.content.readline()
        if not line:
            return "no event"
        event = json.loads(line)
        if event.get("type") == "ERROR":
            return f"ERROR {(event.get('object') or {}).get('code')}"
        return f"event {event.get('type')}"

    async def exists(self, path: str) -> bool:
        try:
            await self.get(path)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def delete(self, path: str) -> Any:
        return await self.request("DELETE", path)

    async def delete_pod_now(self, namespace: str, name: str) -> None:
        """Force-delete (grace 0): no kubelet runs to finish a graceful deletion. Gone is fine."""
        try:
            await self.request(
                "DELETE",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                params={"gracePeriodSeconds": "0"},
            )
        except KubeError as exc:
            if exc.status != 404:
                raise

    async def delete_all_pods(self, namespace: str, concurrency: int = 64) -> int:
        """Force-delete every pod of a namespace; returns how many there were."""
        sem = asyncio.Semaphore(concurrency)

        async def one(name: str) -> None:
            async with sem:
                await self.delete_pod_now(namespace, name)

        pods = await self.list(f"/api/v1/namespaces/{namespace}/pods")
        await asyncio.gather(*(one(p["metadata"]["name"]) for p in pods))
        return len(pods)

    async def merge_patch(self, path: str, body: Any) -> Any:
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json")

    async def list(self, path: str, **params: str) -> list[Any]:
        items: list[Any] = []
        token = ""
        while True:
            query = dict(params, limit="1000")
            if token:
                query["continue"] = token
            page = await self.get(path, **query)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items
