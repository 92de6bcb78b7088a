"""Operator replicas as real processes (`python -m loadwise run`), as a Deployment runs them:
each with its own identity, HTTP port and log, started, killed, stopped and scraped by a harness.

Metrics are read from each replica's /metrics; a metric the running build does not export reads
as absent (None), never as an error, so a harness works against older and newer builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .controlplane import free_port

Samples = dict[str, list[tuple[dict[str, str], float]]]  # sample name -> (labels, value)


def parse_metrics(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return samples


def metric(
    samples: Samples | None, name: str, labels: Mapping[str, str] | None = None
) -> float | None:
    """The value of one series (the sum of matching series), or None if absent."""
    if samples is None or name not in samples:
        return None
    values = [
        value
        for have, value in samples[name]
        if all(have.get(k) == v for k, v in (labels or {}).items())
    ]
    return sum(values) if values else None


def labelled(samples: Samples | None, name: str, label: str) -> dict[str, float]:
    """label value -> value for every series of `name`."""
    if samples is None:
        return {}
    return {have.get(label, ""): value for have, value in samples.get(name, ())}


@dataclass
class Replica:
    identity: str
    kubeconfig: Path
    settings: dict[str, str]
    workdir: Path
    http_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    expected_exit: bool = False  # the harness stopped or killed it
    started_at: float = 0.0  # monotonic
    exited_at: float | None = None
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"loadwise-{self.identity}.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            KUBECONFIG=str(self.kubeconfig),
            LOADWISE_IDENTITY=self.identity,
            LOADWISE_HTTP_HOST="127.0.0.1",
            LOADWISE_HTTP_PORT=str(self.http_port),  # plain HTTP: the harness scrapes it
            LOADWISE_SECURE_PORT="0",  # several replicas on one host
            **self.settings,
        )

    def start(self) -> Replica:
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "loadwise", "run"],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self.expected_exit = False
        self.exited_at = None
        self.started_at = time.monotonic()
        self.starts += 1
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    @property
    def crashed(self) -> bool:
        """Exited without the harness asking it to."""
        return self.process is not None and self.returncode is not None and not self.expected_exit

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.process is not None
            self.expected_exit = True
            self.process.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(10)

    def wait(self, timeout: float) -> int | None:
        if self.process is None:
            return None
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self.exited_at is None:
            self.exited_at = time.monotonic()
        return code

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; the exit code (None if it had to be killed)."""
        if not self.alive:
            return self.returncode
        self.signal(signal.SIGTERM)
        code = self.wait(timeout)
        if code is None and self.process is not None:
            self.process.kill()
            self.process.wait()
        return code

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_count(self, needle: str) -> int:
        return self.log_text().count(needle)

    # --- /proc and HTTP ---------------------------------------------------------------------
    def rss_kib(self) -> int | None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except (OSError, ValueError):
            return None
        return None

    def open_fds(self) -> int | None:
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return None

    def children(self) -> list[int]:
        """Child processes (a replica must not fork copies of itself)."""
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    async def get(
        self, session: aiohttp.ClientSession, path: str, timeout: float = 2.0
    ) -> tuple[int, str] | None:
        if not self.alive:
            return None
        try:
            async with session.get(
                f"http://127.0.0.1:{self.http_port}{path}",
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                return resp.status, await resp.text()
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None

    async def metrics(self, session: aiohttp.ClientSession) -> Samples | None:
        answer = await self.get(session, "/metrics")
        if answer is None or answer[0] != 200:
            return None
        try:
            return parse_metrics(answer[1])
        except ValueError:
            return None


@dataclass
class Sample:
    """One scrape of one replica."""

    t: float  # monotonic
    identity: str
    alive: bool
    leader: float | None
    degraded: dict[str, float]
    accounted_cpu: float | None
    accounted_pods: float | None
    pending: dict[str, float]
    rss_kib: int | None
    fds: int | None
    reachable: bool


async def stop_background(
    task: asyncio.Task[None] | None, session: aiohttp.ClientSession | None
) -> None:
    """Cancel a background loop, then close the session it used."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if session is not None:
        await session.close()


class Sampler:
    """Scrapes every replica every `interval` seconds in the background."""

    def __init__(self, replicas: list[Replica], interval: float = 1.0) -> None:
        self.replicas = replicas
        self.interval = interval
        self.samples: list[Sample] = []
        self.raw: dict[str, Samples] = {}  # identity -> latest scrape
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Sampler:
        self._session = aiohttp.ClientSession()
        self._task = asyncio.create_task(self._run())
        return self

    async def scrape(self, replica: Replica) -> Sample:
        assert self._session is not None
        samples = await replica.metrics(self._session)
        if samples is not None:
            self.raw[replica.identity] = samples
        sample = Sample(
            t=time.monotonic(),
            identity=replica.identity,
            alive=replica.alive,
            leader=metric(samples, "loadwise_leader"),
            degraded=labelled(samples, "loadwise_degraded", "reason"),
            accounted_cpu=metric(samples, "loadwise_accounted_cpu_millicores"),
            accounted_pods=metric(samples, "loadwise_accounted_pods"),
            pending=labelled(samples, "scheduler_pending_pods", "queue"),
            rss_kib=replica.rss_kib(),
            fds=replica.open_fds(),
            reachable=samples is not None,
        )
        self.samples.append(sample)
        return sample

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            with contextlib.suppress(Exception):
                await asyncio.gather(*(self.scrape(r) for r in list(self.replicas) if r.alive))
            await asyncio.sleep(max(0.05, self.interval - (time.monotonic() - started)))

    def degraded_reasons(self, since: float, until: float | None = None) -> set[str]:
        """Reasons seen at 1 in any scrape within [since, until]."""
        return {
            reason
            for s in self.samples
            if s.t >= since and (until is None or s.t <= until)
            for reason, value in s.degraded.items()
            if value >= 1
        }

    async def stop(self) -> None:
        await stop_background(self._task, self._session)
