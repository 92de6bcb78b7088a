"""The device allocator process (`dra-allocator`, built from hack/dra-allocator): kube-scheduler's
DRA allocator (`k8s.io/dynamic-resource-allocation/structured`, pinned with Kubernetes), run
beside loadwise and driven over its stdin and stdout, one JSON object per line, answered in
order. Why a process and not Python: docs/architecture.md, "Dynamic resource allocation: the
decision".

It keeps its own copy of the ResourceSlices, DeviceClasses, allocated ResourceClaims and node
labels loadwise sends it (objects.py). When it is missing, dies or stops answering, it is killed
and started again after a pause, with everything resent; meanwhile only pods with claims to
allocate fail their attempt, with a message naming the allocator, and back off.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

log = logging.getLogger(__name__)

COMMAND_ENV = "LOADWISE_DRA_ALLOCATOR"  # the helper's path; default: `dra-allocator` on PATH
RESTART_PAUSE = 5.0  # seconds between two starts, so a helper that cannot run is not spun
LINE_LIMIT = 256 << 20  # one answer is one line: 1000 nodes' allocations are ~250 KiB


class AllocatorUnavailable(Exception):
    """The allocator cannot answer now: why, in words for the pod's event."""


def default_command() -> list[str]:
    path = os.environ.get(COMMAND_ENV) or shutil.which("dra-allocator") or "dra-allocator"
    return [path]


class AllocatorProcess:
    def __init__(
        self,
        snapshot: Callable[[], list[dict[str, Any]]],
        command: Sequence[str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """`snapshot`: every object the helper must hold, as `apply` changes; asked at each
        start (the changes waiting to be sent are then part of it). `timeout`: how long one
        answer may take (a filter's own per-node limit is 10 s, as kube-scheduler's)."""
        self.snapshot = snapshot
        self.command = list(command) if command is not None else default_command()
        self.timeout = timeout
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._failed_at = 0.0
        self.down = ""  # why it is not running ("" while it runs, or before its first start)
        self.starts = 0

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """One request and its answer. Raises AllocatorUnavailable when the helper cannot
        answer; an answer carrying `error` is returned as is (the caller decides)."""
        async with self._lock:
            proc = await self._running()
            return await self._exchange(proc, {"op": op, **fields})

    async def _running(self) -> asyncio.subprocess.Process:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            return proc
        if proc is not None:
            self._failed(f"dra-allocator exited with status {proc.returncode}")
        if self.down and time.monotonic() - self._failed_at < RESTART_PAUSE:
            raise AllocatorUnavailable(self.down)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=LINE_LIMIT,
            )
        except OSError as exc:
            self._failed(f"dra-allocator cannot be started ({self.command[0]}): {exc}")
            raise AllocatorUnavailable(self.down) from exc
        self._proc = proc
        self.starts += 1
        changes = self.snapshot()  # everything, so what waited to be sent is in it
        await self._exchange(proc, {"op": "reset"})
        answer = await self._exchange(proc, {"op": "apply", "changes": changes})
        if answer.get("error"):  # bad objects are skipped by the helper; the rest is in
            log.warning("dra-allocator refused some objects: %s", answer["error"])
        if self.down:
            log.info("dra-allocator running again (start %d)", self.starts)
        self.down = ""
        return proc

    async def _exchange(
        self, proc: asyncio.subprocess.Process, request: dict[str, Any]
    ) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        request["id"] = ident = next(self._ids)
        try:
            proc.stdin.write(orjson.dumps(request) + b"\n")
            await asyncio.wait_for(proc.stdin.drain(), self.timeout)
            line = await asyncio.wait_for(proc.stdout.readline(), self.timeout)
        except (TimeoutError, OSError, ValueError) as exc:  # ValueError: line over the limit
            why = "did not answer in time" if isinstance(exc, TimeoutError) else str(exc)
            self._kill(f"dra-allocator failed ({request['op']}): {why}")
            raise AllocatorUnavailable(self.down) from exc
        if not line:
            self._kill(f"dra-allocator exited ({request['op']})")
            raise AllocatorUnavailable(self.down)
        answer = orjson.loads(line)
        if not isinstance(answer, dict) or answer.get("id") != ident:
            self._kill(f"dra-allocator answered out of order ({request['op']})")
            raise AllocatorUnavailable(self.down)
        return answer

    def _failed(self, why: str) -> None:
        if why != self.down:
            log.error("%s; pods with resource claims to allocate wait for it", why)
        self.down, self._failed_at = why, time.monotonic()

    def _kill(self, why: str) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        self._failed(why)

    async def close(self) -> None:
        """End the helper: EOF on its stdin makes it exit; killed if it does not."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


def node_verdicts(answer: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A filter's answer by node: {"allocations": [...]} | {"reason": ...} | {"error": ...}."""
    nodes = answer.get("nodes") or {}
    return {str(n): r for n, r in nodes.items() if isinstance(r, Mapping)}
