"""Scheduling throughput on one apiserver: raw binding ceiling, kube-scheduler, loadwise.

bench/throughput [--nodes N] [--pods M] [--mode backlog|burst|steady] [--rate R]
                 [--workload W] [--pin] [--existing-pods K] [--runners R,...]
                 [--repeat N] [--relist PODS] [--kwok] [--json PATH] [--png PATH]
                 [--profile SVG|TXT]

Starts its own control plane (and Prometheus, which loadwise reads as in production), creates N
simulated nodes and K pods already bound to them, then for each runner in turn:
- ceiling: this process posts Bindings for pending pods, 64 in flight, round-robin over nodes;
- kube-scheduler: the real one, client QPS/burst 5000, its own process, no leader election;
- loadwise: `loadwise run` in its own process, default policy, no leader election either.
Modes: backlog (all pods pending before the runner starts: first_bind_s includes its start-up),
burst (created as fast as possible while it runs), steady (created at R pods/s). In burst and
steady mode the runner is up and has bound one warm-up pod before creation starts: they measure a
running scheduler keeping up with arrivals, as in production; start-up is backlog's first_bind_s.
Bind times come from a watch; CPU and peak RSS of the runner's process from /proc, sampled every
0.1 s so that `sched_cpu_ms_per_pod` counts only the CPU spent between its first and last bind.
`--repeat N` runs the runners N times in turn on the same cluster (the table shows the last
round; every round's first bind is listed): start-up compared over several rounds.
`--profile PATH` attaches py-spy to loadwise and writes a flame graph (SVG), or its collapsed
stacks if PATH ends in .txt (one line per stack and its count of samples, to sum by frame).
`--relist PODS`: once a scheduler has bound all, the API server is restarted past every version
its watches hold (each ends in 410 Gone: the scheduler lists all pods and nodes again), PODS
plain pods are created, and `relist` reports the seconds from the API server's /readyz to their
first and last bind.

Workloads (`--workload`, loadwise_dev.workloads), after kube-scheduler's scheduler_perf: basic
(today's plain pods on unlabelled nodes), spread and preferred-spread (zone spread, maxSkew 1,
DoNotSchedule or ScheduleAnyway), anti-affinity (required, by hostname: pods <= nodes), affinity
and preferred-affinity (to anchor pods bound in 3 of the 10 zones), node-affinity (required, a
label 40% of the nodes carry), mixed (all of them by pod index, 4 in 10 plain), volumes (a
WaitForFirstConsumer claim per pod against a local PV made for it), gangs (PodGroups of 10
pods, minCount 10: bound all or none; a group partly bound is a violation) and devices (a claim
for one of each node's 8 GPUs per pod, from a template: dynamic resource allocation; checked for
devices allocated twice and pods bound away from their device). Other than basic,
nodes carry zone-0..9 round-robin, shifted so that no zone is cooler than another. After each
runner the placements are checked: `violations` counts pods that break a required constraint (the
ceiling ignores them all, on purpose); `checks` also reports the preferred ones' outcome.

`--pin` gives the runners a core of their own: the runner's process (the ceiling's binder,
kube-scheduler or `loadwise run`, all its threads) on CPU 1; etcd, kube-apiserver,
kube-controller-manager, Prometheus and this process on CPU 0. This process creates and watches
the pods and serves the simulated usage. Pinned, the ceiling is a client of its own on CPU 1
like the schedulers (before 2026-11-27 it was this process, on CPU 0 with the API server: a
lower ceiling than the schedulers', which pinned tables from before then compare against).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from loadwise_dev import manifests, workloads
from loadwise_dev.cluster import LocalCluster, wait_for
from loadwise_dev.engines.faults.model import EXPIRED_LOG
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.prometheus_server import SIM_CPU_QUERY

NS = "throughput"
PVS = "/api/v1/persistentvolumes"
GROUPS = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NS}/podgroups"
CLK = os.sysconf("SC_CLK_TCK")
CONTROL_CPU, SCHEDULER_CPU = 0, 1
# The runners' processes and py-spy, killed on the way out if a run is interrupted or fails
# (kube-scheduler also stops with the control plane).
CHILDREN: list[subprocess.Popen[bytes]] = []
T = TypeVar("T")


def pin_refusal() -> str | None:
    """Why --pin cannot run here, or None: it needs CPUs 0 and 1."""
    cpus = os.sched_getaffinity(0)
    if {CONTROL_CPU, SCHEDULER_CPU} <= cpus:
        return None
    return (
        "--pin needs CPUs 0 and 1 (one for the control plane, one for the scheduler); "
        f"this process may use {sorted(cpus)}"
    )


def pin_all_threads(pid: int, cpu: int) -> None:
    """A running process and every one of its threads onto `cpu` (taskset -a -p)."""
    subprocess.run(
        ["taskset", "-a", "-p", "-c", str(cpu), str(pid)], check=True, stdout=subprocess.DEVNULL
    )


def cpus_of(pid: int) -> str:
    """The CPUs the threads of a process may use, e.g. "1", or "0,1;1" when they differ."""
    seen = set()
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    seen.add(line.split()[1])
    return ";".join(sorted(seen))


@contextlib.contextmanager
def spawning_on(cpu: int | None) -> Iterator[None]:
    """Processes started inside run on `cpu` from their first instruction: a child inherits the
    affinity of the thread that forks it, as with `taskset -c`, and the runner's processes are
    started by other code (ControlPlane.start_scheduler)."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


class CpuSampler:
    """(monotonic time, cpu seconds) of a process, every 0.1 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.samples.append((time.monotonic(), proc_stats(self.pid)[0]))
            await asyncio.sleep(0.1)

    def at(self, when: float) -> float:
        """CPU seconds used by `when` (the first sample at or after it)."""
        return next((cpu for t, cpu in self.samples if t >= when), self.samples[-1][1])

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def proc_stats(pid: int) -> tuple[float, float]:
    """(cpu seconds, peak RSS MiB) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK
    peak = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return cpu, peak


class BindWatch:
    """Records when each pod of the namespace is first seen bound."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.bound_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        page = await self.kube.get(f"/api/v1/namespaces/{NS}/pods")
        self._task = asyncio.create_task(self._run(page["metadata"]["resourceVersion"]))

    def _saw(self, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name")
        if name and obj.get("spec", {}).get("nodeName") and name not in self.bound_at:
            self.bound_at[name] = time.monotonic()

    async def _run(self, version: str) -> None:
        """Watches from `version`; across an API server restart (--relist) it reconnects, and
        lists again when its version has expired (410)."""
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        url = f"{self.kube.server}/api/v1/namespaces/{NS}/pods"
        while True:
            params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "3600"}
            expired = False
            try:
                async with self.kube.session.get(url, params=params, timeout=timeout) as resp:
                    expired = resp.status == 410
                    while resp.status == 200 and (line := await resp.content.readline()):
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            expired = obj.get("code") == 410
                            break
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        self._saw(obj)
                if expired:
                    page = await self.kube.get(f"/api/v1/namespaces/{NS}/pods")
                    for obj in page.get("items") or []:
                        self._saw(obj)
                    version = page["metadata"]["resourceVersion"]
            except (aiohttp.ClientError, TimeoutError, KubeError):
                await asyncio.sleep(0.1)  # the API server restarting

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def create_pods(
    kube: Kube,
    names: list[str],
    scheduler: str,
    rate: float | None,
    created: dict[str, float],
    workload: str = "basic",
) -> None:
    sem = asyncio.Semaphore(64)
    started = time.monotonic()

    async def one(i: int, name: str) -> None:
        if rate:
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        body = workloads.pod(workload, i, name, NS, scheduler)
        async with sem:
            await kube.create(f"/api/v1/namespaces/{NS}/pods", body)
        created[name] = time.monotonic()

    await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))


async def ceiling_binder(kube: Kube, names: list[str], nodes: list[str]) -> None:
    """Binds pending pods as fast as one asyncio process can, 64 in flight."""
    sem = asyncio.Semaphore(64)
    pending = set(names)

    async def bind(i: int, name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": NS},
            "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[i % len(nodes)]},
        }
        async with sem:
            with contextlib.suppress(KubeError):
                await kube.create(f"/api/v1/namespaces/{NS}/pods/{name}/binding", body)
                pending.discard(name)

    while pending:  # in burst/steady mode pods appear while we bind: retry the missing ones
        await asyncio.gather(*(bind(i, n) for i, n in enumerate(sorted(pending))))
        if pending:
            await asyncio.sleep(0.05)


def relisted_kinds(cluster: LocalCluster) -> list[str]:
    """The API paths loadwise's log says it listed again after 410 Gone."""
    log = cluster.cp.workdir / "loadwise.log"
    found = []
    for line in log.read_bytes().splitlines() if log.exists() else ():
        if EXPIRED_LOG.encode() in line:
            found.append(line.split(b"watch of ", 1)[-1].split(b" ", 1)[0].decode())
    return found


async def ceiling_in_child(cluster: LocalCluster, names: list[str], nodes: list[str]) -> None:
    """The ceiling runner as a process of its own on the scheduler's CPU (--pin), so that it
    and the schedulers are clients on the same terms: one core each, the API server on the
    other."""
    job = {
        "server": cluster.cp.server,
        "token": cluster.cp.token,
        "ca": str(cluster.cp.ca_file),
        "names": names,
        "nodes": nodes,
    }
    with spawning_on(SCHEDULER_CPU):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "loadwise_dev.benches.throughput",
            "--ceiling-child",
            stdin=subprocess.PIPE,
        )
    await proc.communicate(json.dumps(job).encode())
    if proc.returncode != 0:
        raise RuntimeError(f"the ceiling's process exited with {proc.returncode}")


def ceiling_child() -> int:
    """--ceiling-child: bind the pods read from stdin, as ceiling_binder does, and exit."""
    job = json.loads(sys.stdin.read())

    async def go() -> None:
        async with Kube(job["server"], job["token"], Path(job["ca"]), pool=128) as kube:
            await ceiling_binder(kube, job["names"], job["nodes"])

    asyncio.run(go())
    return 0


def start_loadwise(cluster: LocalCluster, relist: bool = False) -> subprocess.Popen[bytes]:
    """`relist`: logs at INFO (unless LOADWISE_LOG_LEVEL says otherwise), which shows each
    relist after 410 Gone; no line is logged per pod at INFO."""
    assert cluster.prometheus is not None
    env = dict(
        os.environ,
        KUBECONFIG=str(cluster.cp.kubeconfig),
        LOADWISE_METRICS_SOURCES="prometheus",
        LOADWISE_PROMETHEUS_URL=cluster.prometheus.url,
        LOADWISE_PROMETHEUS_CPU_QUERY=SIM_CPU_QUERY,
        LOADWISE_METRICS_LAG="6",
        LOADWISE_METRICS_INTERVAL="5",
        LOADWISE_HTTP_PORT="0",
        LOADWISE_SECURE_PORT="0",
        # As kube-scheduler runs here (leaderElect false): equal terms, and with --repeat no
        # round inherits the Lease the previous one held.
        LOADWISE_LEADER_ELECT="false",
        LOADWISE_LOG_LEVEL=os.environ.get("LOADWISE_LOG_LEVEL", "INFO" if relist else "WARNING"),
    )
    log = open(cluster.cp.workdir / "loadwise.log", "wb")  # noqa: SIM115 - lives with the process
    return subprocess.Popen(
        [sys.executable, "-m", "loadwise", "run"], env=env, stdout=log, stderr=subprocess.STDOUT
    )


def summary(
    names: list[str], created: dict[str, float], bound: dict[str, float], started: float
) -> dict[str, Any]:
    binds = sorted(bound[n] for n in names if n in bound)
    latencies = sorted((bound[n] - created[n]) * 1000 for n in names if n in bound and n in created)
    if not binds:
        return {"bound": 0}
    span = binds[-1] - binds[0]
    return {
        "bound": len(binds),
        "pods_per_s": round((len(binds) - 1) / span, 1) if span > 0 else None,
        "first_bind_s": round(binds[0] - started, 2),
        "drain_s": round(binds[-1] - max(created.values()), 2),
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))], 1),
        "timeline": [round(t - started, 3) for t in binds],
    }


async def run_one(
    cluster: LocalCluster,
    kube: Kube,
    runner: str,
    args: argparse.Namespace,
    nodes: list[str],
    labels: dict[str, dict[str, str]],
) -> dict[str, Any]:
    scheduler = {"ceiling": "nobody", "kube-scheduler": "default-scheduler"}.get(
        runner, "loadwise-scheduler"
    )
    names = [f"{runner[:2]}-{i:05d}" for i in range(args.pods)]
    path = f"/api/v1/namespaces/{NS}/pods"
    created: dict[str, float] = {}
    watch = BindWatch(kube)
    await watch.start()
    proc: subprocess.Popen[bytes] | None = None
    creating: asyncio.Task[None] | None = None
    rate = args.rate if args.mode == "steady" else None
    if args.workload == "volumes":  # every pod's claim, and a free PV for each, made first
        await make_storage(kube, names, nodes)
    if args.workload == "gangs":  # the PodGroups first, as a job's operator makes them
        for group in workloads.gangs(names, NS):
            await kube.create(GROUPS, group)
    if args.mode == "backlog":
        await create_pods(kube, names, scheduler, None, created, args.workload)
    started = time.monotonic()
    with spawning_on(SCHEDULER_CPU if args.pin else None):
        if runner == "kube-scheduler":
            proc = cluster.cp.start_scheduler(qps=5000, burst=5000)
        elif runner == "loadwise":
            proc = start_loadwise(cluster, relist=bool(args.relist))
    CHILDREN.extend([proc] if proc is not None else [])
    sampler = CpuSampler(proc.pid) if proc is not None else None
    profiler = None
    if runner == "loadwise" and args.profile and proc is not None:
        record = ["py-spy", "record", "--pid", str(proc.pid), "--output", args.profile]
        record += ["--rate", "200", *(["--format", "raw"] if args.profile.endswith(".txt") else [])]
        profiler = subprocess.Popen(  # noqa: ASYNC220 - Popen does not wait
            record,
            stdout=subprocess.DEVNULL,
        )
        CHILDREN.append(profiler)
    if args.mode != "backlog":
        if runner != "ceiling":  # a running scheduler meets the arrivals
            warm = f"{runner[:2]}-warmup"
            warm_created: dict[str, float] = {}  # a plain pod in every workload
            await create_pods(kube, [warm], scheduler, None, warm_created)
            await wait_for(lambda: _bound(watch, warm), 120, interval=0.05, what="warm-up pod")
        started = time.monotonic()
        creating = asyncio.create_task(
            create_pods(kube, names, scheduler, rate, created, args.workload)
        )
    if runner == "ceiling":
        if creating is not None:
            await asyncio.sleep(0.2)
        if args.pin:
            await ceiling_in_child(cluster, names, nodes)
        else:
            await ceiling_binder(kube, names, nodes)
    if creating is not None:
        await creating

    async def all_bound() -> bool:
        return all(n in watch.bound_at for n in names)

    try:
        await wait_for(all_bound, args.bind_timeout, interval=0.2, what=f"{runner}: all bound")
    except TimeoutError as exc:  # record what it did bind, and go on with the next runner
        print(exc, file=sys.stderr, flush=True)
    relist = None
    if args.relist and proc is not None:
        relist = await relist_recovery(cluster, kube, runner, scheduler, watch, args.relist)
        if runner == "loadwise":
            relist["relisted"] = relisted_kinds(cluster)
        print(runner, "relist", json.dumps(relist), flush=True)
    cpu_s = peak_mb = per_pod = None
    cpus = None
    if proc is not None and sampler is not None:
        await asyncio.sleep(0.15)  # one more CPU sample after the last bind
        await sampler.stop()
        cpu_s, peak_mb = proc_stats(proc.pid)
        cpus = cpus_of(proc.pid)
        binds = sorted(watch.bound_at[n] for n in names if n in watch.bound_at)
        if binds:
            per_pod = (sampler.at(binds[-1]) - sampler.at(binds[0])) * 1000 / len(binds)
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        if runner == "kube-scheduler":
            cluster.cp.stop_process("kube-scheduler")
        else:
            proc.terminate()
            proc.wait(30)
    result = summary(names, created, watch.bound_at, started)
    result.update(
        unbound=len(names) - result["bound"],
        cpu_s=cpu_s and round(cpu_s, 1),
        sched_cpu_ms_per_pod=per_pod and round(per_pod, 2),
        peak_rss_mb=peak_mb and round(peak_mb, 1),
    )
    if relist is not None:
        result["relist"] = relist
    if args.pin:
        result["cpus"] = cpus
    placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in await kube.list(path)}
    index = {name: i for i, name in enumerate(names)}
    result["checks"] = workloads.check(
        args.workload, {index[n]: node for n, node in placed.items() if n in index and node}, labels
    )
    if args.workload == "volumes":
        ours = {n: node for n, node in placed.items() if n in index}  # not the relist's probes
        result["checks"].update(await volume_checks(kube, ours, runner == "ceiling"))
    if args.workload == "devices" and runner != "ceiling":  # the ceiling allocates nothing
        ours = {n: node for n, node in placed.items() if n in index}
        result["checks"].update(await device_checks(kube, ours))
    await watch.stop()
    await delete_all(kube)
    return result


async def relist_recovery(
    cluster: LocalCluster, kube: Kube, runner: str, scheduler: str, watch: BindWatch, count: int
) -> dict[str, Any]:
    """A forced relist of everything, and how long the runner takes to bind again.

    The API server is stopped, etcd's revision moved on, the API server started again: its new
    watch cache begins past every resourceVersion its clients hold, so each of the runner's
    watches (its pods' above all) ends in 410 Gone and it lists again; `raw_watch` records what a
    watch from the version before the restart got, to show it. Then `count` plain pods are
    created, and the recovery is the time from the API server's /readyz to their first and last
    bind."""
    before = (await kube.get(f"/api/v1/namespaces/{NS}/pods", limit="1"))["metadata"][
        "resourceVersion"
    ]
    stopped = time.monotonic()
    await asyncio.to_thread(cluster.cp.stop_apiserver)
    revision = await asyncio.to_thread(cluster.cp.advance_etcd)
    await asyncio.to_thread(cluster.cp.start_apiserver, 300.0)
    ready = time.monotonic()
    raw = await _retrying(lambda: kube.watch_status(f"/api/v1/namespaces/{NS}/pods", before))
    names = [f"{runner[:2]}-relist-{i:04d}" for i in range(count)]
    sem = asyncio.Semaphore(64)

    async def create(name: str) -> None:
        body = workloads.pod("basic", 0, name, NS, scheduler)
        async with sem:
            with contextlib.suppress(KubeError):  # 409: an earlier attempt made it
                await _retrying(lambda: kube.create(f"/api/v1/namespaces/{NS}/pods", body))

    await asyncio.gather(*(create(n) for n in names))

    async def bound() -> bool:
        return all(n in watch.bound_at for n in names)

    with contextlib.suppress(TimeoutError):
        await wait_for(bound, 600, interval=0.1, what=f"{runner}: relist probes bound")
    binds = sorted(watch.bound_at[n] for n in names if n in watch.bound_at)
    return {
        "probes": count,
        "bound": len(binds),
        "apiserver_down_s": round(ready - stopped, 2),
        "etcd_revision": revision,
        "raw_watch": raw,
        "first_bind_s": round(binds[0] - ready, 2) if binds else None,
        "all_bound_s": round(binds[-1] - ready, 2) if binds else None,
    }


async def _retrying(call: Callable[[], Awaitable[T]], attempts: int = 50) -> T:
    """`call` again while a pooled connection from before an API server restart fails."""
    for _ in range(attempts - 1):
        try:
            return await call()
        except aiohttp.ClientError:
            await asyncio.sleep(0.2)
        except KubeError as exc:
            if exc.status == 409:
                raise
            await asyncio.sleep(0.2)
    return await call()


async def make_storage(kube: Kube, names: list[str], nodes: list[str]) -> None:
    """The `volumes` workload's claims (one per pod) and local PVs (one per pod, round-robin
    over the nodes), made before the runner starts, so they are not timed."""
    with contextlib.suppress(KubeError):
        await kube.create("/apis/storage.k8s.io/v1/storageclasses", workloads.storage_class())
    sem = asyncio.Semaphore(64)

    async def one(i: int, name: str) -> None:
        async with sem:
            await kube.create(PVS, workloads.volume(i, name, nodes[i % len(nodes)]))
            await kube.create(f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
                              workloads.claim(name, NS))  # fmt: skip

    await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))


async def make_devices(kube: Kube, nodes: list[str], sem: asyncio.Semaphore) -> None:
    resource = "/apis/resource.k8s.io/v1"
    with contextlib.suppress(KubeError):
        await kube.create(f"{resource}/deviceclasses", workloads.device_class())

    async def one(node: str) -> None:
        async with sem:
            with contextlib.suppress(KubeError):
                await kube.create(f"{resource}/resourceslices", workloads.device_slice(node))

    await asyncio.gather(*(one(n) for n in nodes))
    with contextlib.suppress(KubeError):
        await kube.create(
            f"{resource}/namespaces/{NS}/resourceclaimtemplates", workloads.device_template(NS)
        )


async def device_checks(kube: Kube, placed: dict[str, str | None]) -> dict[str, Any]:
    """Devices held by two claims; bound pods whose claim is not allocated on their node."""
    claims = await kube.list(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims")
    holders: Counter[str] = Counter()
    on_node: dict[str, str] = {}  # pod name -> the pool (node) of its device
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            continue
        for r in allocation["devices"]["results"]:
            holders[f"{r['pool']}/{r['device']}"] += 1
            for consumer in claim["status"].get("reservedFor") or ():
                on_node[consumer["name"]] = r["pool"]
    return {
        "devices_allocated_twice": sum(1 for n in holders.values() if n > 1),
        "bound_without_their_device": sum(
            1 for pod, node in placed.items() if node and on_node.get(pod) != node
        ),
    }


async def volume_checks(kube: Kube, placed: dict[str, str | None], ceiling: bool) -> dict[str, Any]:
    """Each bound pod's claim bound, to a PV on the pod's node (the ceiling binds no PV)."""
    claims = {
        c["metadata"]["name"]: c["spec"].get("volumeName")
        for c in await kube.list(f"/api/v1/namespaces/{NS}/persistentvolumeclaims")
    }
    node_of = {
        v["metadata"]["name"]: v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0][
            "matchExpressions"
        ][0]["values"][0]
        for v in await kube.list(PVS)
    }
    wrong = unbound = 0
    for pod, node in placed.items():
        if not node:
            continue
        volume = claims.get(workloads.claim_name(pod))
        if not volume:
            unbound += 1
        elif node_of.get(volume) != node:
            wrong += 1
    out = {"claims_unbound": unbound, "pods_off_their_volume": wrong}
    if not ceiling:
        out["violations"] = wrong + unbound
    return out


async def _bound(watch: BindWatch, name: str) -> bool:
    return name in watch.bound_at


async def delete_all(kube: Kube) -> None:
    await kube.delete_all_pods(NS)
    for claim in await kube.list(f"/api/v1/namespaces/{NS}/persistentvolumeclaims"):
        with contextlib.suppress(KubeError):
            await kube.delete(
                f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{claim['metadata']['name']}"
            )
    for volume in await kube.list(PVS):
        with contextlib.suppress(KubeError):
            await kube.delete(f"{PVS}/{volume['metadata']['name']}")
    for group in await kube.list(GROUPS):  # each runner's have names of their own
        with contextlib.suppress(KubeError):
            await kube.delete(f"{GROUPS}/{group['metadata']['name']}")

    async def empty() -> bool:
        return not await kube.list(f"/api/v1/namespaces/{NS}/pods")

    await wait_for(empty, 120, interval=0.5, what="pods deleted")

    async def no_claims() -> bool:  # the resourceclaim controller deletes the pods' claims
        return not await kube.list(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims")

    await wait_for(no_claims, 300, interval=0.5, what="claims deleted")


async def bench(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    async with cluster.kube(pool=128) as kube:
        await cluster.install_crd(kube)
        await kube.create(
            "/apis/loadwise.io/v1alpha1/schedulingpolicies", manifests.policy("default")
        )
        with contextlib.suppress(KubeError):
            await kube.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        await cluster.wait_namespace(kube, NS)
        nodes = [f"node-{i:05d}" for i in range(args.nodes)]
        labels = {n: workloads.node_labels(args.workload, i) for i, n in enumerate(nodes)}
        sem = asyncio.Semaphore(64)

        async def add(i: int, name: str) -> None:
            async with sem:
                await cluster.add_node(
                    kube,
                    name,
                    cpu_usage=0.1 + 0.6 * (i % 10) / 10,
                    mem_usage=0.3,
                    cpu="32",
                    memory="128Gi",
                    pods=250,
                    labels=labels[name],
                )

        await asyncio.gather(*(add(i, n) for i, n in enumerate(nodes)))

        async def existing(i: int) -> None:
            body = manifests.pod(f"existing-{i:06d}", namespace="default", scheduler_name="none")
            body["spec"]["nodeName"] = nodes[i % len(nodes)]
            async with sem:
                await kube.create("/api/v1/namespaces/default/pods", body)

        await cluster.wait_namespace(kube, "default")
        await asyncio.gather(*(existing(i) for i in range(args.existing_pods)))
        if args.workload == "devices":  # a class, a slice per node, the pods' template
            await make_devices(kube, nodes, sem)
        for anchor in workloads.anchors(args.workload, nodes):
            await kube.create(f"/api/v1/namespaces/{workloads.ANCHOR_NAMESPACE}/pods", anchor)
        results = {}
        first_binds: dict[str, list[float | None]] = {}
        for _ in range(args.repeat):  # the runners take turns: a drift hits both alike
            for runner in args.runners.split(","):
                results[runner] = await run_one(cluster, kube, runner, args, nodes, labels)
                first_binds.setdefault(runner, []).append(results[runner].get("first_bind_s"))
                print(
                    runner,
                    json.dumps({k: v for k, v in results[runner].items() if k != "timeline"}),
                    flush=True,
                )
    ours = (results.get("loadwise") or {}).get("pods_per_s") or 0

    def ratio(other: str) -> float | None:
        theirs = (results.get(other) or {}).get("pods_per_s")
        return round(ours / theirs, 2) if ours and theirs else None

    return {
        "nodes": args.nodes,
        "pods": args.pods,
        "mode": args.mode,
        "workload": args.workload,
        "pinned": args.pin,
        "rate": args.rate if args.mode == "steady" else None,
        "existing_pods": args.existing_pods,
        "runners": results,
        "ratio_vs_kube_scheduler": ratio("kube-scheduler"),
        "ratio_vs_ceiling": ratio("ceiling"),
        "first_bind_rounds": first_binds,  # every round's; the table shows the last round
    }


def chart(data: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    for name, result in data["runners"].items():
        timeline = result.get("timeline") or []
        if not timeline:
            continue
        seconds = int(timeline[-1]) + 1
        per_second = [0] * seconds
        for t in timeline:
            per_second[int(t)] += 1
        ax.plot(range(seconds), per_second, label=name)
    ax.set_xlabel("seconds since the runner started")
    ax.set_ylabel("binds per second")
    ax.set_title(
        f"{data['pods']} pods, {data['nodes']} nodes, {data['mode']}, {data['workload']}"
        + (", pinned" if data["pinned"] else "")
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def control_plane(cluster: LocalCluster) -> dict[str, int]:
    """The control plane's processes and this one (the load generator and ceiling runner)."""
    pids = {name: proc.pid for name, proc in cluster.cp.processes.items()}
    if cluster.prometheus is not None and cluster.prometheus.process is not None:
        pids["prometheus"] = cluster.prometheus.process.pid
    pids["bench"] = os.getpid()
    return pids


def markdown(data: dict[str, Any]) -> str:
    """The runners' figures as a Markdown table, headed by what was run."""
    head = (
        f"{data['mode']}, workload {data['workload']}, {data['nodes']} nodes, {data['pods']} pods"
        f", {data['existing_pods']} existing" + (", pinned" if data["pinned"] else "")
    )
    lines = [
        head,
        "",
        "| workload | runner | pods/s | bound | violations | first bind s | drain s "
        "| p50 / p99 ms | CPU ms per pod | peak RSS MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in data["runners"].items():
        lines.append(
            f"| {data['workload']} | {name} | {r.get('pods_per_s')} | {r.get('bound')}"
            f"/{data['pods']} | {(r.get('checks') or {}).get('violations')} "
            f"| {r.get('first_bind_s')} | {r.get('drain_s')} | {r.get('p50_ms')} / "
            f"{r.get('p99_ms')} | {r.get('sched_cpu_ms_per_pod')} | {r.get('peak_rss_mb')} |"
        )
    lines.append("")
    lines.append(
        f"loadwise / kube-scheduler: {data['ratio_vs_kube_scheduler']}, "
        f"loadwise / ceiling: {data['ratio_vs_ceiling']}"
    )
    rounds = data.get("first_bind_rounds") or {}
    if any(len(r) > 1 for r in rounds.values()):
        lines.append("")
        lines.append("first bind s, every round (the table: the last round):")
        for name, values in rounds.items():
            lines.append(f"- {name}: {', '.join(str(v) for v in values)}")
    return "\n".join(lines)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--mode", choices=("backlog", "burst", "steady"), default="backlog")
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--existing-pods", type=int, default=0)
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--png", dest="png_path")
    parser.add_argument("--runners", default="ceiling,kube-scheduler,loadwise")
    parser.add_argument("--profile", help="py-spy flame graph of loadwise (SVG) to this path")
    parser.add_argument("--workload", choices=workloads.WORKLOADS, default="basic")
    parser.add_argument(
        "--pin", action="store_true", help="runner on CPU 1, control plane and bench on CPU 0"
    )
    parser.add_argument(
        "--bind-timeout", type=float, default=600.0, help="seconds to wait for all pods bound"
    )
    parser.add_argument(
        "--kwok",
        action="store_true",
        help="KWOK plays the nodes' kubelets (their pods turn Running, Leases renew)",
    )
    parser.add_argument(
        "--relist",
        type=int,
        default=0,
        metavar="PODS",
        help="after the runner bound all: restart the API server past every watch's version "
        "(410, a relist of everything), create PODS plain pods, time their binds",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of the runners in turn on the same cluster (start-up: first bind each)",
    )
    parser.add_argument("--ceiling-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ceiling_child:
        return ceiling_child()
    if refusal := workloads.refusal(args.workload, args.nodes, args.pods):
        parser.error(refusal)
    if args.pin and (refusal := pin_refusal()):
        parser.error(refusal)
    logging.basicConfig(level=logging.WARNING)
    # Stop cleanly on SIGTERM, and on SIGINT even when started in the background (a shell without
    # job control starts background jobs with SIGINT ignored): the finally clause below stops the
    # runner and the control plane.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.pin:  # before any thread or child exists: they all inherit it
        os.sched_setaffinity(0, {CONTROL_CPU})
    cluster = LocalCluster(kwok=args.kwok).start()
    try:
        pids = control_plane(cluster)
        if args.pin:  # and to be sure, every thread of every process of the control plane
            for pid in pids.values():
                pin_all_threads(pid, CONTROL_CPU)
        data = asyncio.run(bench(cluster, args))
        data["fleet"] = "kwok" if args.kwok else "api-objects"
        if args.pin:
            data["control_plane_cpus"] = {name: cpus_of(pid) for name, pid in pids.items()}
    finally:
        for child in CHILDREN:
            if child.poll() is None:
                child.kill()
                child.wait()
        cluster.stop()
    table = {k: {x: y for x, y in v.items() if x != "timeline"} for k, v in data["runners"].items()}
    print(
        json.dumps(
            {**{k: v for k, v in data.items() if k != "runners"}, "runners": table}, indent=1
        )
    )
    print(markdown(data))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(data, indent=1))
    if args.png_path:
        chart(data, args.png_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
