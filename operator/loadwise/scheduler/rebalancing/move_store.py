"""MoveStore: rebalancing's ledger (moves.py) saved in a ConfigMap beside the leader-election
Lease, so it outlives a leader.

Written before each eviction is asked for and after its answer; read when a replica starts
leading. An eviction its predecessor asked for without recording the answer is settled by
looking at the pod: gone, terminating or replaced by a newer pod of that name means it
happened; still running means it did not (the record is dropped: the node is judged afresh).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from typing import Any

import aiohttp

from ...config import Config
from ...kube.transport import Http
from .moves import EVICTED, EVICTING, MoveRecord, Moves

log = logging.getLogger(__name__)
KEY = "moves.json"


class StoreError(Exception):
    """The ledger could not be read or written: rebalancing evicts nothing meanwhile."""


def ledger_store(transport: Http, config: Config) -> MoveStore:
    """The ledger beside the leader-election Lease: `<lease name>-rebalance`."""
    return MoveStore(
        transport, config.election.lease_namespace, f"{config.election.lease_name}-rebalance"
    )


class MoveStore:
    def __init__(self, transport: Http, namespace: str, name: str) -> None:
        self.transport = transport
        self.namespace = namespace
        self.name = name
        self._version = ""  # the ConfigMap's resourceVersion we last read or wrote

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}"

    async def load(self, moves: Moves, now: float | None = None) -> int:
        """Read the saved ledger into `moves`, settling evictions left in flight; returns how
        many records it holds."""
        now = time.time() if now is None else now
        status, body = await self._request("GET", self.path)
        records: list[MoveRecord] = []
        if status == 404:
            self._version = ""
        elif status != 200:
            raise StoreError(f"reading ConfigMap {self.namespace}/{self.name}: HTTP {status}")
        else:
            obj = json.loads(body)
            self._version = obj["metadata"].get("resourceVersion", "")
            try:
                saved = json.loads((obj.get("data") or {}).get(KEY) or "[]")
                records = [MoveRecord.from_json(r) for r in saved]
            except (ValueError, TypeError, KeyError) as exc:  # hand-edited: start afresh, say so
                log.warning("rebalancing ledger %s unreadable (%r): starting empty", self.name, exc)
        settled = [await self._settle(r) for r in records]
        moves.replace_all([r for r in settled if r is not None], now)
        if any(r.state == EVICTING for r in records):
            await self.save(moves)
        return len(moves.records)

    async def save(self, moves: Moves) -> None:
        data = json.dumps([r.to_json() for r in moves], separators=(",", ":"))
        obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "loadwise"},
            },
            "data": {KEY: data},
        }
        if self._version:
            obj["metadata"]["resourceVersion"] = self._version
            status, body = await self._request("PUT", self.path, obj)
        else:
            path = f"/api/v1/namespaces/{self.namespace}/configmaps"
            status, body = await self._request("POST", path, obj)
        if status not in (200, 201):
            # 409: someone else wrote it (a newer leader): ours is not the ledger any more.
            self._version = "" if status == 404 else self._version
            raise StoreError(
                f"writing ConfigMap {self.namespace}/{self.name}: HTTP {status} "
                f"{body[:200].decode(errors='replace')}"
            )
        self._version = json.loads(body)["metadata"].get("resourceVersion", "")

    async def _settle(self, record: MoveRecord) -> MoveRecord | None:
        if record.state != EVICTING:
            return record
        path = f"/api/v1/namespaces/{record.namespace}/pods/{record.name}"
        status, body = await self._request("GET", path)
        if status == 404:
            return _evicted(record)
        if status != 200:
            raise StoreError(f"reading pod {record.pod}: HTTP {status}")
        meta = json.loads(body).get("metadata") or {}
        if meta.get("uid") != record.uid or meta.get("deletionTimestamp"):
            return _evicted(record)
        log.info("%s was not evicted before the last leader stopped: not moving it", record.pod)
        return None

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, bytes]:
        try:
            return await self.transport.request(method, path, body)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise StoreError(f"{method} {path}: {exc!r}") from exc


def _evicted(record: MoveRecord) -> MoveRecord:
    log.info("%s was evicted by the last leader: its cool-down and room hold", record.pod)
    return replace(record, state=EVICTED)
