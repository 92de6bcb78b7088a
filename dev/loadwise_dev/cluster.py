"""LocalCluster: control plane, Prometheus, simulated usage (the harness's exporter, or KWOK's:
kwok_usage.py), KWOK and real nodes when asked, and the operator run in-process.

Shared by the test suite, `loadwise-dev demo` and the benchmarks, so all three exercise the
same real parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import kopf

from loadwise.config import Config
from loadwise.handlers import build_registry
from loadwise.policies.crd_schema import build_crd
from loadwise.resources import to_amount
from loadwise.runtime import Runtime

from . import images, kwok_usage, manifests
from .controlplane import ControlPlane
from .exporter import SIM_DIMENSIONS, SIM_POD_CPU_QUERY, SIM_POD_MEMORY_QUERY, UsageExporter
from .kube import Kube, KubeError
from .kwok import Kwok, kwok_node
from .kwok_usage import KwokUsage
from .prometheus_server import SIM_CPU_QUERY, Prometheus
from .realnode import NodeExporter, RealNode, scrape_configs

T = TypeVar("T")
_leases = itertools.count()


async def wait_bound_count(kube: Kube, ns: str, count: int, timeout: float = 120) -> None:
    """Until at least `count` pods of `ns` are bound (the benches' bursts)."""

    async def bound() -> bool:
        pods = await kube.list(f"/api/v1/namespaces/{ns}/pods")
        return sum(1 for p in pods if p["spec"].get("nodeName")) >= count

    await wait_for(bound, timeout, interval=0.5, what=f"{count} pods of {ns} bound")


async def wait_for(
    probe: Callable[[], Awaitable[T | None]],
    timeout: float,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Poll `probe` until it returns something truthy; its last value on success."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


class LocalCluster:
    def __init__(
        self,
        prometheus: bool = True,
        cp: ControlPlane | None = None,
        real_nodes: int = 0,
        kwok: bool = False,
        kwok_metrics: bool = False,
        kwok_usage: bool = False,
        controller_manager: bool = True,
    ) -> None:
        """`kwok`: run KWOK (kwok.py), which then plays the kubelet of every simulated node
        added (their pods run, graceful deletions complete) unless add_node's `kwok=False`
        keeps one a bare API object. `kwok_usage` (implies both): simulated usage comes from
        KWOK through Prometheus (kwok_usage.py), not from the exporter. `controller_manager`
        False: none runs (the demo's pods need no controller; wait_namespace then makes the
        namespace's ServiceAccount itself)."""
        self._controller_manager = controller_manager
        self.real_node_names = [f"real-{i}" for i in range(1, real_nodes + 1)]
        # A ControlPlane makes its temporary directory when built: build one only if none is
        # given (a replaced one would leave its directory behind).
        self.cp = cp if cp is not None else ControlPlane(node_hosts=self.real_node_names)
        self.exporter = UsageExporter()
        self.prometheus: Prometheus | None = None
        self._want_prometheus = prometheus
        self.real_nodes: list[RealNode] = []  # kubelets running real containers (realnode.py)
        self.node_exporter: NodeExporter | None = None
        self._want_kwok = kwok or kwok_usage
        # KWOK serves its nodes' /metrics/resource and cAdvisor series
        self._kwok_metrics = kwok_metrics or kwok_usage
        self._kwok_usage = kwok_usage
        self.kwok: Kwok | None = None
        self.usage: KwokUsage | None = None  # with kwok_usage

    def start(self) -> LocalCluster:
        try:
            self.cp.start(controller_manager=self._controller_manager)
            if self.real_node_names:
                archives = images.archives(self.cp.workdir / "images")
                for name in self.real_node_names:
                    self.real_nodes.append(RealNode(name, self.cp, archives))
                    self.real_nodes[-1].start()
                for node in self.real_nodes:
                    node.wait_ready()
                self.node_exporter = NodeExporter().start()
            if self._want_kwok:
                self.kwok = Kwok(self.cp, metrics=self._kwok_metrics).start()
                if self._kwok_usage:
                    self.usage = KwokUsage(self.kwok, self.cp.workdir)
            if self._want_prometheus:
                self.exporter.start()
                extra = (
                    scrape_configs(self.cp, self.real_node_names, self.node_exporter)
                    if self.node_exporter is not None
                    else []
                )
                if self.usage is not None:
                    extra.append(self.usage.scrape_config())
                prefix = self.cp.with_hosts() if self.real_node_names else []
                self.prometheus = Prometheus([self.exporter.address], "1s", extra, prefix).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
        with contextlib.suppress(Exception):
            self.exporter.stop()
        if self.node_exporter is not None:
            self.node_exporter.stop()
        for node in self.real_nodes:
            node.stop()
        if self.kwok is not None:
            self.kwok.stop()
        self.cp.stop()

    @property
    def cpu_query(self) -> str:
        """What node CPU utilisation is read by: cAdvisor's series (KWOK usage) or
        node-exporter's (the exporter)."""
        return kwok_usage.CPU_QUERY if self.usage is not None else SIM_CPU_QUERY

    def kube(self, pool: int = 256) -> Kube:
        return Kube(self.cp.server, self.cp.token, self.cp.ca_file, pool)

    def operator_config(self, **overrides: Any) -> Config:
        values: dict[str, Any] = {
            "metrics_sources": ("prometheus",) if self.prometheus else (),
            "prometheus_url": self.prometheus.url if self.prometheus else "http://127.0.0.1:1",
            "prometheus_cpu_query": self.cpu_query,
            # Per-pod cAdvisor series (learned estimates: KWOK's or the exporter's) and the
            # exporter's gpu and disk dimensions, with the same short windows.
            "prometheus_pod_cpu_query": SIM_POD_CPU_QUERY,
            "prometheus_pod_memory_query": SIM_POD_MEMORY_QUERY,
            "prometheus_dimensions": dict(SIM_DIMENSIONS),
            "metrics_interval": 1.0,
            "metrics_lag": 6.0,  # a 5 s rate window plus 1 s scrapes
            "http_port": 0,
            "http_host": "127.0.0.1",
            "secure_port": 0,  # in-process operators share one host: no fixed HTTPS port
            # Election as in production, on a lease of its own: no operator waits for another's.
            "lease_name": f"loadwise-{os.getpid()}-{next(_leases)}",
        }
        if self.usage is not None:  # kube-prometheus-stack's, with the harness's 5 s window
            values["prometheus_preset"] = "kube-prometheus-stack"
            values["prometheus_memory_query"] = kwok_usage.MEMORY_QUERY
        values.update(overrides)
        return Config.of(**values)

    # --- setup helpers -------------------------------------------------------------------------
    async def install_crd(self, kube: Kube, crd: dict[str, Any] | None = None) -> None:
        """loadwise's CRD, or `crd` (e.g. manifests.coscheduling_crd()), until Established."""
        crd = crd or build_crd()
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        try:
            await kube.create(path, crd)
        except KubeError as exc:
            if exc.status != 409:  # already installed is fine; anything else is a bug
                raise

        async def established() -> bool:
            current = await kube.get(f"{path}/{crd['metadata']['name']}")
            conditions = (current.get("status") or {}).get("conditions") or ()
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        await wait_for(established, 30, what="CRD established")

    async def add_node(
        self,
        kube: Kube,
        name: str,
        cpu_usage: float = 0.0,
        mem_usage: float = 0.0,
        kwok: bool | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        """A simulated node; with `kwok` (by default when the cluster runs KWOK), handed to
        KWOK (kwok.py), which plays its kubelet (Ready, Lease, pods Running). Its background
        usage: a pod of its own when usage comes from KWOK (kwok_usage.py), else published by
        the exporter."""
        body = manifests.node(name, **spec)
        handed = self.kwok is not None if kwok is None else kwok
        if handed:
            kwok_node(body)
        by_kwok = handed and self.usage is not None
        if self.usage is not None and not by_kwok and (cpu_usage or mem_usage):
            raise ValueError(f"node {name}: usage is KWOK's here, and it is not a KWOK node")
        if not by_kwok:
            capacity = body["status"]["capacity"]
            self.exporter.set_usage(
                name,
                cpu_usage,
                mem_usage,
                to_amount("memory", capacity["memory"]),
                to_amount("cpu", capacity["cpu"]),
            )
        created: dict[str, Any] = await kube.create("/api/v1/nodes", body)
        if by_kwok:
            assert self.usage is not None
            await self.usage.add(kube, body, cpu_usage, mem_usage)
        return created

    def forget_node(self, name: str) -> None:
        """Stop publishing or scraping the usage of a node deleted (remove_node also deletes
        its background pod)."""
        self.exporter.remove(name)
        if self.usage is not None:
            self.usage.remove(name)

    async def remove_node(self, kube: Kube, name: str) -> None:
        """Delete a node and forget its usage: what it published, what was scraped, its
        background pod."""
        try:
            await kube.delete(f"/api/v1/nodes/{name}")
        except KubeError as exc:
            if exc.status != 404:  # gone already is fine; a node left behind is not
                raise
        self.exporter.remove(name)
        if self.usage is not None:
            await self.usage.forget(kube, name)

    async def utilisation(self, kube: Kube) -> dict[str, tuple[float, float]]:
        """The simulation's ground truth per node, (CPU, memory) 0..1: what every pod placed
        uses, without the metrics' lag."""
        truth = self.exporter.utilisation()
        if self.usage is not None:
            truth.update(await self.usage.truth(kube))
        return truth

    async def wait_namespace(self, kube: Kube, namespace: str) -> None:
        """Pods need their namespace's `default` ServiceAccount, which the controller-manager
        creates a moment after the namespace."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        if not self._controller_manager:
            with contextlib.suppress(KubeError):  # 409: there already
                await kube.create(path.rsplit("/", 1)[0], {"metadata": {"name": "default"}})
        await wait_for(lambda: kube.exists(path), 30, what=f"ServiceAccount {namespace}/default")

    async def wait_metrics(
        self, expected: dict[str, float], tolerance: float = 0.02, timeout: float = 30
    ) -> None:
        """Until Prometheus's CPU figure for each node is within tolerance of `expected`."""
        assert self.prometheus is not None
        prometheus = self.prometheus

        off: dict[str, tuple[float, float]] = {}  # node -> (seen, expected), for the message

        async def settled() -> bool:
            answer = await asyncio.to_thread(prometheus.query, self.cpu_query)
            seen = {r["metric"]["node"]: float(r["value"][1]) for r in answer["data"]["result"]}
            off.clear()
            off.update(
                (n, (seen.get(n, -1), v))
                for n, v in expected.items()
                if abs(seen.get(n, -1) - v) > tolerance
            )
            return not off

        try:
            await wait_for(settled, timeout, interval=0.5, what="Prometheus to see node usage")
        except TimeoutError as exc:
            worst = sorted(off.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:5]
            shown = ", ".join(f"{n} {a:.3f} not {b:.3f}" for n, (a, b) in worst)
            targets = await asyncio.to_thread(prometheus.target_health)
            kwok = ""
            if self.kwok is not None and self.kwok.metrics:  # 404: its paths unregistered
                paths = await asyncio.to_thread(self.kwok.metric_paths_status)
                kwok = f"; KWOK's Metric paths: {paths}"
            raise TimeoutError(
                f"{exc}: {len(off)} nodes off ({shown}) by {self.cpu_query!r}; "
                f"Prometheus' targets: {targets}{kwok}"
            ) from None


@contextlib.asynccontextmanager
async def running_operator(
    config: Config, kubeconfig: Path, on_exit: Callable[[], None] | None = None
) -> AsyncIterator[Runtime]:
    """The operator, exactly as `loadwise run` builds it, inside this event loop. kopf takes
    SIGINT and SIGTERM and stops by itself: `on_exit` is called when it has stopped, so a
    caller waiting for that is not left waiting for ever."""
    os.environ["KUBECONFIG"] = str(kubeconfig)
    memo = kopf.Memo()
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(
        kopf.operator(
            registry=build_registry(config),
            clusterwide=True,
            standalone=True,
            memo=memo,
            stop_flag=stop,
            ready_flag=ready,
        )
    )
    if on_exit is not None:
        task.add_done_callback(lambda _: on_exit())

    async def started() -> bool:
        if task.done():
            task.result()  # surface the operator's crash
        return hasattr(memo, "runtime")

    try:
        await wait_for(started, 60, what="operator startup")
        yield memo.runtime
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, 30)
        except TimeoutError:
            task.cancel()
