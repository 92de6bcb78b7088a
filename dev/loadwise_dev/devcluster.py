"""`loadwise-dev up|down|status|load`: a local cluster to try loadwise with kubectl.

`up` starts a supervisor process in a session of its own, which runs everything
`loadwise-dev demo` runs (etcd, kube-apiserver, kube-controller-manager, Prometheus scraping
simulated nodes, the CRD and a policy) plus `loadwise run` as a real process, and keeps it all
up. What it started (PIDs with their start times, temporary directories) is written to a state
directory outside the repository, so `down` works from any shell, even after the supervisor was
killed. In the foreground, Ctrl-C runs `down`; with `-d`, `up` returns once the operator leads.

Simulated nodes are KWOK's (it plays their kubelets: pods run, deletions complete). Their usage
is KWOK's too (kwok_usage.py): each pod uses what its `kwok.x-k8s.io/usage-cpu` / `-memory`
annotations say, served as the kubelet's cAdvisor series and read through Prometheus with
kube-prometheus-stack's preset queries. A node's background use (what other schedulers' and
system pods use) is its annotations (`sim.loadwise.io/cpu-load`, `sim.loadwise.io/memory-load`,
percent), carried by a background pod on it; `loadwise-dev load NODE CPU [MEMORY]` sets them,
and so does `kubectl annotate`. A KWOK node without them uses only what its pods use.

The commands' parser is cli.py's (`loadwise-dev`); run as a module, this is the supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import IO, Any

from . import manifests
from .cluster import LocalCluster, wait_for
from .controlplane import free_port, k8s_bin_dir
from .demo import NODES, POLICY
from .kube import Kube, KubeError
from .kwok import ANNOTATION, kwok_node
from .kwok_usage import BACKGROUND_NS, KwokUsage
from .local_path import LocalPath
from .real_metrics_server import MetricsServer
from .realnode import sweep

STATE_VARIABLE = "LOADWISE_DEV_STATE"
# On the real nodes: pods must opt in (hostNetwork, and this toleration).
REAL = {"key": "loadwise.io/real-node", "value": "true", "effect": "NoSchedule"}
CPU_LOAD = "sim.loadwise.io/cpu-load"
MEMORY_LOAD = "sim.loadwise.io/memory-load"
LEASE = "loadwise-scheduler"
START_TIMEOUT = 180.0
STOP_TIMEOUT = 45.0


def state_dir() -> Path:
    explicit = os.environ.get(STATE_VARIABLE)
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("LOADWISE_CACHE", Path.home() / ".cache" / "loadwise"))
    return cache / "dev-cluster"


def _say(text: str) -> None:
    print(text, flush=True)


# --- processes ----------------------------------------------------------------------------------
def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): with the
    PID it names one process, so a PID reused since is never signalled. None: no such process
    (or a zombie, which is as good as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


def alive(pid: int, started: str | None) -> bool:
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def _signal(pid: int, started: str | None, sig: int) -> None:
    if alive(pid, started):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def kill_group(supervisor: int, directory: Path) -> bool:
    """SIGKILL to what is left of the supervisor's process group (`up` starts it in a session of
    its own and everything it starts stays in its group), which reaches processes started before
    their PIDs were recorded. Only when a member carries this cluster's LOADWISE_DEV_STATE (the
    supervisor and the control plane inherit it): proof that the group ID was not reused."""
    marker = f"{STATE_VARIABLE}={directory}".encode()
    for pid in group_members(supervisor):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(supervisor, signal.SIGKILL)
            return True
    return False


# --- state --------------------------------------------------------------------------------------
def read_state(directory: Path) -> dict[str, Any] | None:
    try:
        value = json.loads((directory / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_state(directory: Path, state: dict[str, Any]) -> None:
    tmp = directory / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(directory / "state.json")  # readers never see half a file


def supervisor_of(directory: Path) -> tuple[int, str | None] | None:
    """(pid, start time) of the supervisor, from the file `up` writes when it spawns it."""
    try:
        pid_text, _, started = (directory / "supervisor.pid").read_text().partition(" ")
        return int(pid_text), started.strip() or None
    except (OSError, ValueError):
        return None


# --- the supervisor -----------------------------------------------------------------------------
class Supervisor:
    """Runs the cluster and the operator until SIGTERM or SIGINT, then stops all of it."""

    def __init__(self, directory: Path, real_nodes: int = 0) -> None:
        self.directory = directory
        self.real_nodes = real_nodes
        self.cluster: LocalCluster | None = None
        self.metrics_server: MetricsServer | None = None
        self.local_path: LocalPath | None = None
        self.operator: subprocess.Popen[bytes] | None = None
        self.state: dict[str, Any] = {"ready": False, "processes": {}, "dirs": []}

    def record(self, **values: Any) -> None:
        self.state.update(values)
        write_state(self.directory, self.state)

    def record_process(self, name: str, pid: int) -> None:
        self.state["processes"][name] = {"pid": pid, "started": start_time(pid)}
        write_state(self.directory, self.state)

    def run(self) -> int:
        def stop_now(signum: int, _: FrameType | None) -> None:
            raise KeyboardInterrupt(signal.Signals(signum).name)

        # Until the event loop takes over the signals, a signal unwinds start-up through the
        # finally below, which stops whatever has started.
        signal.signal(signal.SIGTERM, stop_now)
        signal.signal(signal.SIGINT, stop_now)
        try:
            self.cluster = LocalCluster(real_nodes=self.real_nodes, kwok_usage=True)
            self.record(dirs=[str(self.cluster.cp.workdir)])
            self.cluster.start()
            for node in self.cluster.real_nodes:
                for name, proc in node.processes.items():
                    self.record_process(f"{node.name}/{name}", proc.pid)
            self.record(node_dirs=[str(node.workdir) for node in self.cluster.real_nodes])
            cp, prometheus = self.cluster.cp, self.cluster.prometheus
            assert prometheus is not None
            for name, proc in cp.processes.items():
                self.record_process(name, proc.pid)
            assert prometheus.process is not None
            self.record_process("prometheus", prometheus.process.pid)
            kwok = self.cluster.kwok
            assert kwok is not None and kwok.process is not None
            self.record_process("kwok", kwok.process.pid)
            etcd_data = str(getattr(cp, "_etcd_data", ""))
            kubeconfig = self.directory / "kubeconfig"
            kubeconfig.write_text(cp.kubeconfig.read_text())
            kubeconfig.chmod(0o600)
            self.record(
                dirs=[str(cp.workdir), etcd_data, str(prometheus.workdir), str(kwok.workdir)],
                server=cp.server,
                token=cp.token,
                ca_file=str(self.directory / "ca.crt"),
                kubeconfig=str(kubeconfig),
                prometheus=prometheus.url,
            )
            shutil.copy(cp.ca_file, self.directory / "ca.crt")
            asyncio.run(self._serve())
            return 0
        except (KeyboardInterrupt, asyncio.CancelledError):
            return 0
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopping is not interrupted
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            started = time.monotonic()
            self._stop_operator()
            _say(f"operator stopped in {time.monotonic() - started:.1f}s")
            if self.metrics_server is not None:
                self.metrics_server.stop()
            if self.local_path is not None:
                self.local_path.stop()
            if self.cluster is not None:
                started = time.monotonic()
                self.cluster.stop()
                _say(f"control plane and Prometheus stopped in {time.monotonic() - started:.1f}s")
            self.record(ready=False, stopped=True)

    async def _serve(self) -> None:
        """Start-up, then watch over the operator; SIGTERM or SIGINT cancels this task wherever
        it is (start-up included), and the finally clauses stop what was started."""
        assert self.cluster is not None
        cluster = self.cluster
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        async with cluster.kube() as kube:
            await cluster.install_crd(kube)
            # `kubectl top`: the real metrics-server, for the real and the KWOK nodes
            self.metrics_server = MetricsServer(cluster.cp).start()
            assert self.metrics_server.process is not None
            self.record_process("metrics-server", self.metrics_server.process.pid)
            self.record(dirs=[*self.state["dirs"], str(self.metrics_server.workdir)])
            await self.metrics_server.register(kube)
            # Claims of the `local-path` class: provisioned where loadwise places their pods
            self.local_path = LocalPath(cluster.cp)
            self.record(dirs=[*self.state["dirs"], str(self.local_path.workdir)])
            await self.local_path.start(kube)
            assert self.local_path.process is not None
            self.record_process("local-path-provisioner", self.local_path.process.pid)
            for node in cluster.real_nodes:
                # Only hostNetwork pods run there (no pod network without a private range):
                # the others would fail to start, so only pods that tolerate this go there.
                await kube.merge_patch(f"/api/v1/nodes/{node.name}", {"spec": {"taints": [REAL]}})
            await kube.create(POLICY, manifests.policy("default", cpu=2, memory=1))
            usage = cluster.usage
            assert usage is not None
            for name, (cpu, mem) in NODES.items():
                body = kwok_node(manifests.node(name))  # KWOK plays its kubelet: pods run
                body["metadata"]["annotations"].update(
                    {CPU_LOAD: f"{cpu * 100:g}", MEMORY_LOAD: f"{mem * 100:g}"}
                )
                await kube.create("/api/v1/nodes", body)
            applied = await apply_loads(kube, usage)
            # Until Prometheus's rate window is full, a young counter's rate is far off (a 5%
            # node showed 70%): the first pods a user submits must see the real figures.
            await cluster.wait_metrics({name: cpu for name, (cpu, _) in NODES.items()}, timeout=60)
            await cluster.wait_namespace(kube, "default")
            self._start_operator(cluster)
            await self._wait_leader(kube)
            loads = asyncio.create_task(self._follow_loads(kube, usage, applied))
            self.record(ready=True)
            try:
                while True:
                    await asyncio.sleep(1.0)
                    if self.operator is not None and self.operator.poll() is not None:
                        self.record(operator_exit=self.operator.returncode)
            finally:
                loads.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loads

    def _start_operator(self, cluster: LocalCluster) -> None:
        # HTTPS /metrics on a free port, not 10259; plain HTTP too, for a local curl.
        config = cluster.operator_config(
            lease_name=LEASE, http_port=free_port(), secure_port=free_port()
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOADWISE_")}
        env.update(config.to_env())
        env["KUBECONFIG"] = str(cluster.cp.kubeconfig)
        # The same settings for the user's shell, so `loadwise explain` reads what the operator
        # reads (the default Prometheus URL is a cluster-internal name).
        exports = {**config.to_env(), "KUBECONFIG": str(self.directory / "kubeconfig")}
        (self.directory / "operator.env").write_text(
            "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(exports.items()))
        )
        log = open(self.directory / "operator.log", "ab")  # noqa: SIM115 - lives with the process
        self.operator = subprocess.Popen(
            [sys.executable, "-m", "loadwise", "run"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self.record_process("operator", self.operator.pid)
        self.record(operator_http=f"http://127.0.0.1:{config.serving.http_port}")

    async def _wait_leader(self, kube: Kube) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{LEASE}"

        async def leading() -> bool:
            if self.operator is not None and self.operator.poll() is not None:
                log = (self.directory / "operator.log").read_text(errors="replace")
                raise RuntimeError(f"loadwise run exited: {log.strip()[-600:]}")
            if not await kube.exists(path):
                return False
            lease = await kube.get(path)
            return bool((lease.get("spec") or {}).get("holderIdentity"))

        await wait_for(leading, 60, interval=0.3, what="the operator to lead")

    def _stop_operator(self) -> None:
        proc = self.operator
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # kopf stops gracefully: the Lease is released
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @staticmethod
    async def _follow_loads(kube: Kube, usage: KwokUsage, applied: Applied) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                applied = await apply_loads(kube, usage, applied)
            except Exception as exc:  # the API server restarting: the next second
                _say(f"node loads not applied ({exc}); trying again")


Applied = dict[str, tuple[str, tuple[float, float]]]  # node -> (its UID, the load applied)


def load_of(node: dict[str, Any]) -> tuple[float, float] | None:
    """A node's background (CPU, memory) 0..1 from its load annotations (0 without them); None
    where they are not finite numbers."""
    annotations = node["metadata"].get("annotations") or {}
    try:
        cpu = float(annotations.get(CPU_LOAD, "0")) / 100
        memory = float(annotations.get(MEMORY_LOAD, "0")) / 100
    except ValueError:
        return None
    if not (math.isfinite(cpu) and math.isfinite(memory)):
        return None
    return min(max(cpu, 0.0), 1.0), min(max(memory, 0.0), 1.0)


async def apply_loads(kube: Kube, usage: KwokUsage, applied: Applied | None = None) -> Applied:
    """Every KWOK node scraped, with its load annotations as its background pod's use; a node
    gone is no longer scraped and its background pod goes. `applied`: what the last call applied
    (it returns this one's), so an unchanged load is not patched again; a node re-created under
    the same name is a new one. A node that fails is said and tried again at the next call; the
    others go on."""
    applied = dict(applied or {})
    present = set()
    for node in await kube.list("/api/v1/nodes"):
        meta = node["metadata"]
        if (meta.get("annotations") or {}).get(ANNOTATION) != "fake":
            continue  # a real node: its kubelet's own series
        name, uid = meta["name"], meta["uid"]
        present.add(name)
        load = load_of(node)
        if load is None or applied.get(name) == (uid, load):
            continue
        try:
            if name in usage.capacity and applied.get(name, ("",))[0] == uid:
                await usage.set_background(kube, name, *load)
            else:
                await usage.add(kube, node, *load)
        except KubeError as exc:
            if exc.status != 404:
                _say(f"node {name}: load not applied ({exc})")
                continue
            await usage.add(kube, node, *load)  # its background pod was deleted: a new one
        except (KeyError, ValueError) as exc:  # a Node without a usable capacity
            _say(f"node {name}: load not applied ({exc!r})")
            continue
        applied[name] = (uid, load)
    for name in set(usage.capacity) - present:
        await usage.forget(kube, name)
        applied.pop(name, None)
    return applied


# --- commands -----------------------------------------------------------------------------------
def _running(directory: Path) -> tuple[int, str | None] | None:
    supervisor = supervisor_of(directory)
    if supervisor is not None and alive(*supervisor):
        return supervisor
    return None


def _lock(directory: Path) -> IO[str] | None:
    """An exclusive lock beside the state directory, held while `up` runs (the supervisor does
    not inherit it), or None when another `up` holds it: two `up` at once would otherwise both
    clean the directory up and start two clusters in it."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    handle = open(directory.parent / f"{directory.name}.lock", "a")  # noqa: SIM115
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def up(directory: Path, detach: bool, real_nodes: int = 0) -> int:
    lock = _lock(directory)
    if lock is None:
        _say(
            f"another `loadwise-dev up` is starting or running a dev cluster in {directory}: "
            "see `loadwise-dev status`, or stop it with `loadwise-dev down`"
        )
        return 1
    try:
        return _up(directory, detach, real_nodes)
    finally:
        lock.close()


def _up(directory: Path, detach: bool, real_nodes: int = 0) -> int:
    running = _running(directory)
    if running is not None:
        _say(f"a dev cluster is already running (supervisor pid {running[0]}, {directory}):")
        _say("see `loadwise-dev status`, or stop it with `loadwise-dev down`")
        return 1
    if directory.exists():  # left by a supervisor that died: clean up after it first
        down(directory, quiet=True)
    directory.mkdir(parents=True, mode=0o700, exist_ok=True)  # kept: LOADWISE_KEEP_LOGS
    extra = f", {real_nodes} real node(s) (kubelet + containerd)" if real_nodes else ""
    _say(
        f"starting etcd, kube-apiserver, kube-controller-manager{extra}, KWOK, Prometheus,"
        " metrics-server, local-path-provisioner and loadwise"
    )
    started = time.monotonic()
    log = open(directory / "supervisor.log", "ab")  # noqa: SIM115 - lives with the process
    env = dict(os.environ, **{STATE_VARIABLE: str(directory)})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadwise_dev.devcluster",
            "serve",
            str(directory),
            str(real_nodes),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # the terminal's Ctrl-C reaches `up`, which stops it in order
        env=env,
    )
    log.close()
    (directory / "supervisor.pid").write_text(f"{proc.pid} {start_time(proc.pid) or ''}")
    interrupted: list[int] = []

    def interrupt(signum: int, _: FrameType | None) -> None:
        interrupted.append(signum)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    if not detach:
        signal.signal(signal.SIGHUP, interrupt)  # the terminal closed
    deadline = time.monotonic() + START_TIMEOUT
    while not interrupted:
        state = read_state(directory) or {}
        if state.get("ready"):
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            why = "exited" if proc.poll() is not None else f"not ready after {START_TIMEOUT:.0f}s"
            tail = (directory / "supervisor.log").read_text(errors="replace").strip()[-2000:]
            _say(f"the dev cluster {why}:\n{tail}")
            down(directory, quiet=True, child=proc)
            return 1
        time.sleep(0.2)
    if interrupted:
        _say("interrupted: stopping everything")
        down(directory, child=proc)
        return 130
    _say(f"ready in {time.monotonic() - started:.1f}s\n")
    _say(describe(directory, read_state(directory) or {}))
    if detach:
        _say("\nstop it with `loadwise-dev down` (from any shell)")
        return 0
    _say("\nCtrl-C (or `loadwise-dev down` from another shell) stops everything")
    while not interrupted:
        if proc.poll() is not None:  # stopped by `down` elsewhere, or crashed
            break
        time.sleep(0.5)
    down(directory, child=proc)
    return 0


def describe(directory: Path, state: dict[str, Any]) -> str:
    kubectl = k8s_bin_dir() / "kubectl"
    lines = [
        "use it with kubectl:",
        f"  export KUBECONFIG={state.get('kubeconfig', directory / 'kubeconfig')}",
        f"  export PATH={kubectl.parent}:$PATH   # the pinned kubectl, built by hack/ensure-tools"
        if kubectl.exists()
        else "  (kubectl missing: run hack/ensure-tools, which builds the pinned one)",
        f"API server {state.get('server', '?')}, Prometheus {state.get('prometheus', '?')}, "
        f"loadwise /metrics {state.get('operator_http', '?')}/metrics",
        f"loadwise explain with the operator's settings: . {directory}/operator.env",
        f"logs: {directory}/operator.log, {directory}/supervisor.log",
        "try: kubectl get nodes,schedpol; loadwise-dev load node-6 95; loadwise-dev status",
    ]
    return "\n".join(lines)


def down(directory: Path, quiet: bool = False, child: subprocess.Popen[bytes] | None = None) -> int:
    """Stop the supervisor (it stops the rest in order); then make sure: every recorded process
    is killed if still there, every recorded directory removed, and the state directory too."""
    state = read_state(directory)
    supervisor = supervisor_of(directory)
    if state is None and supervisor is None:
        if not quiet:
            _say(f"no dev cluster recorded in {directory}")
        if directory.exists():
            shutil.rmtree(directory, ignore_errors=True)
        return 0
    if supervisor is not None and alive(*supervisor):
        if not quiet:
            _say(f"stopping the dev cluster (supervisor pid {supervisor[0]})")
        _signal(*supervisor, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while alive(*supervisor) and time.monotonic() < deadline:
            if child is not None:
                child.poll()  # our own child: reap it, or it stays a zombie
            time.sleep(0.2)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(1)
    leftovers = []
    recorded = dict((state or {}).get("processes") or {})
    if supervisor is not None:
        recorded["supervisor"] = {"pid": supervisor[0], "started": supervisor[1]}
    for name, info in recorded.items():
        if alive(info["pid"], info.get("started")):
            leftovers.append(name)
            _signal(info["pid"], info.get("started"), signal.SIGKILL)
    if child is not None and child.poll() is None:
        child.kill()
        child.wait()
    if supervisor is not None and kill_group(supervisor[0], directory):
        leftovers.append("unrecorded processes of its group")
    for path in (state or {}).get("node_dirs") or ():
        sweep(Path(path))  # containers' shims and mounts, if the supervisor could not stop them
    for path in (state or {}).get("dirs") or ():
        if path:
            shutil.rmtree(path, ignore_errors=True)
    if os.environ.get("LOADWISE_KEEP_LOGS"):
        if not quiet:
            _say(f"logs kept in {directory} (LOADWISE_KEEP_LOGS)")
        (directory / "state.json").unlink(missing_ok=True)
        (directory / "supervisor.pid").unlink(missing_ok=True)
    else:
        shutil.rmtree(directory, ignore_errors=True)
    if not quiet:
        if leftovers:
            _say(f"killed what outlived the supervisor: {', '.join(leftovers)}")
        _say("stopped everything; temporary directories removed")
    return 0


def status(directory: Path) -> int:
    state = read_state(directory)
    running = _running(directory)
    if state is None or running is None:
        _say(f"no dev cluster running ({directory}); start one with `loadwise-dev up`")
        return 1
    lines = [f"dev cluster: {'ready' if state.get('ready') else 'starting'} ({directory})"]
    dead = []
    for name, info in (state.get("processes") or {}).items():
        up_now = alive(info["pid"], info.get("started"))
        lines.append(f"  {name:<24} pid {info['pid']:<8} {'running' if up_now else 'NOT RUNNING'}")
        if not up_now:
            dead.append(name)
    _say("\n".join(lines))
    if state.get("ready"):
        _say(describe(directory, state))
        with contextlib.suppress(Exception):
            _say(asyncio.run(_nodes_table(state)))
    return 1 if dead else 0


def _kube(state: dict[str, Any]) -> Kube:
    return Kube(state["server"], state["token"], Path(state["ca_file"]), pool=4)


async def _nodes_table(state: dict[str, Any]) -> str:
    async with _kube(state) as kube:
        nodes = await kube.list("/api/v1/nodes")
        pods = await kube.list("/api/v1/pods")
    placed: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and pod["metadata"].get("namespace") != BACKGROUND_NS:  # the load is shown
            placed[node] = placed.get(node, 0) + 1
    lines = [f"\n{'NODE':<20} {'CPU LOAD':>8} {'MEM LOAD':>8} {'PODS':>5}"]
    for node in nodes:
        name = node["metadata"]["name"]
        annotations = node["metadata"].get("annotations") or {}
        cpu = annotations.get(CPU_LOAD)
        mem = annotations.get(MEMORY_LOAD)
        lines.append(
            f"{name:<20} {cpu + '%' if cpu else '-':>8} {mem + '%' if mem else '-':>8} "
            f"{placed.get(name, 0):>5}"
        )
    return "\n".join(lines)


async def _set_load(state: dict[str, Any], node: str, cpu: float, memory: float | None) -> None:
    annotations = {CPU_LOAD: f"{cpu:g}"}
    if memory is not None:
        annotations[MEMORY_LOAD] = f"{memory:g}"
    async with _kube(state) as kube:
        await kube.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"annotations": annotations}})


def load(directory: Path, node: str, cpu: float, memory: float | None) -> int:
    state = read_state(directory)
    if state is None or _running(directory) is None or not state.get("ready"):
        _say(f"no dev cluster running ({directory}); start one with `loadwise-dev up`")
        return 1
    for what, value in (("cpu", cpu), ("memory", memory)):
        if value is not None and not 0 <= value <= 100:
            _say(f"{what} load {value:g} is not a percentage (0..100)")
            return 2
    try:
        asyncio.run(_set_load(state, node, cpu, memory))
    except Exception as exc:
        _say(f"cannot set the load of {node}: {exc}")
        return 1
    shown = f"cpu {cpu:g}%" + (f", memory {memory:g}%" if memory is not None else "")
    _say(f"{node}: {shown} from now on (Prometheus shows it fully within about 6 s)")
    return 0


if __name__ == "__main__":  # the supervisor, as `up` starts it: serve DIRECTORY REAL_NODES
    _, _, served, real = sys.argv
    raise SystemExit(Supervisor(Path(served), int(real)).run())
