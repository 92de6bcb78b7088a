"""A real node: a kubelet with its own containerd, running real containers on this machine.

What makes it work on this machine kind (../shared/FACTS.md, "A real kubelet"): Debian's
containerd 1.6 on runc with `restrict_oom_score_adj` (the VM refuses negative oom_score_adj),
cgroup v1 with `failCgroupV1: false`, the cgroupfs driver, no per-QoS cgroups, and a CNI
configuration with only the `loopback` plugin, so the pod network is ready without any address
(pods that need the network use hostNetwork). Everything listens on 127.0.0.1.

The kubelet registers as a real node does: its own client certificate (`system:node:NAME` in
`system:nodes`) from the control plane's CA, under the Node authorizer and NodeRestriction, with
a serving certificate for its name. `--cloud-provider=external` makes it publish only a Hostname
address (no interface address of this machine appears anywhere); the control plane's API
server resolves that name to 127.0.0.1 (controlplane.py's hosts file) and the harness removes
the `uninitialized` taint as a cloud controller would.

`stop()` leaves nothing behind: containers killed, kubelet and containerd stopped, their shims
reaped, every mount under the node's directory unmounted (deepest first), the containers'
cgroups removed; `leftovers()` says what remains (tested).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .controlplane import ControlPlane, free_port, issue_cert, kubeconfig_with_cert, terminate

UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CNI_BIN = Path("/usr/lib/cni")
# Where the kubelet's cAdvisor asks containerd which pod a container's cgroup belongs to: its
# default, which the kubelet no longer lets one change (cAdvisor's --containerd flag is not
# registered). Without an answer, cAdvisor's series carry only the cgroup `id`, no pod.
CADVISOR_CONTAINERD = Path("/run/containerd/containerd.sock")


def _answers(path: Path) -> bool:
    """Whether something listens on the unix socket at `path` (following a symlink)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


DRA_DRIVER = "gpu.loadwise.dev"  # the real nodes' DRA driver's name (hack/dra-driver)


def _which(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} missing: run hack/ensure-tools first")
    return found


@dataclass
class RealNode:
    name: str
    cp: ControlPlane
    images: list[Path] = field(default_factory=list)  # OCI archives to import (images.py)
    labels: dict[str, str] = field(default_factory=dict)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="loadwise-node-")))
    kubelet_port: int = field(default_factory=free_port)
    # Simulated GPUs its DRA driver (hack/dra-driver, a kubelet plugin) publishes; 0: no driver
    devices: int = 2
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _cgroups: set[str] = field(default_factory=set)  # container ids seen (their cgroups)

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def root_dir(self) -> Path:
        return self.workdir / "kubelet"

    # --- start ---------------------------------------------------------------------------------
    def start(self) -> RealNode:
        try:
            self._write_pki()
            self._start_containerd()
            for archive in self.images:
                self.ctr("images", "import", str(archive))
            self._start_kubelet()
            self._check_cadvisor()
            if self.devices:
                self._start_driver()
        except BaseException:
            self.stop()
            raise
        return self

    def _write_pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True)
        ca = self.cp.workdir / "pki"
        issue_cert(ca, pki, "client", f"/O=system:nodes/CN=system:node:{self.name}")
        issue_cert(ca, pki, "serving", f"/CN={self.name}", san=f"DNS:{self.name},IP:127.0.0.1")
        (self.workdir / "kubelet.kubeconfig").write_text(
            kubeconfig_with_cert(
                self.cp.server, ca / "ca.crt", pki / "client.crt", pki / "client.key", self.name
            )
        )

    def _start_containerd(self) -> None:
        base = self.workdir / "containerd"
        cni = base / "cni"
        cni.mkdir(parents=True)
        (cni / "10-loopback.conflist").write_text(
            '{"cniVersion": "1.0.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]}\n'
        )
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{base / "containerd.sock.ttrpc"}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"
[{cri}]
  sandbox_image = "localhost/loadwise/pause:dev"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
[{cri}.containerd]
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{cni}"
  max_conf_num = 1
"""
        (base / "config.toml").write_text(config)
        self._spawn("containerd", [_which("containerd"), "--config", str(base / "config.toml")])
        self._wait(lambda: self.socket.exists(), 30, "containerd's socket")
        self._link_for_cadvisor()

    def _link_for_cadvisor(self) -> None:
        """Point cAdvisor's containerd path at this node's containerd (a symlink; the shims
        keep naming this node's directory), unless another containerd answers there. With
        several real nodes only the first gets it: one kernel, one cAdvisor view anyway."""
        link = CADVISOR_CONTAINERD
        if link.is_symlink() and not _answers(link):
            # Dangling, or naming the socket file of a containerd that is gone (a node that did
            # not stop cleanly leaves both): cAdvisor would find no containerd there.
            link.unlink()
        if link.exists() or link.is_symlink():
            return
        link.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            link.symlink_to(self.socket)

    @property
    def cadvisor_link(self) -> bool:
        """Whether cAdvisor's containerd path is this node's (its series then name pods)."""
        link = CADVISOR_CONTAINERD
        return link.is_symlink() and Path(os.readlink(link)) == self.socket

    def cadvisor_factory(self) -> str | None:
        """The kubelet's line on registering cAdvisor's containerd factory, None before it."""
        for line in self.log().splitlines():
            if "Registration of the containerd container factory" in line:
                return line
        return None

    def _unlink_for_cadvisor(self) -> None:
        if self.cadvisor_link:
            CADVISOR_CONTAINERD.unlink()

    def _start_kubelet(self) -> None:
        pki = self.workdir / "pki"
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "tlsCertFile": str(pki / "serving.crt"),
            "tlsPrivateKeyFile": str(pki / "serving.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cp.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failCgroupV1": False,
            "failSwapOn": False,
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "localStorageCapacityIsolation": False,
            "resolvConf": "",
            "podLogsDir": str(self.workdir / "pod-logs"),
            "serializeImagePulls": False,
            "makeIPTablesUtilChains": False,  # no KUBE-FIREWALL left in the machine's iptables
            "nodeStatusReportFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
        }
        path = self.workdir / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        labels = ",".join(
            f"{k}={v}" for k, v in {"loadwise.io/real-node": "true", **self.labels}.items()
        )
        self._spawn(
            "kubelet",
            [
                self.cp.binary("kubelet"),
                f"--config={path}",
                f"--kubeconfig={self.workdir / 'kubelet.kubeconfig'}",
                f"--hostname-override={self.name}",
                f"--root-dir={self.root_dir}",
                f"--cert-dir={pki}",
                "--cloud-provider=external",
                f"--node-labels={labels}",
                "--v=1",
            ],
        )

    def _start_driver(self) -> None:
        """The DRA driver (kubelet plugin): registers with the kubelet through its
        plugins_registry, publishes the node's ResourceSlice of `devices` GPUs (driver
        DRA_DRIVER, attributes index and uuid), prepares claims. With the admin's kubeconfig,
        where a DaemonSet would have its ServiceAccount's."""
        self._spawn(
            "dra-driver",
            [
                _which("dra-driver"),
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--node={self.name}",
                f"--driver={DRA_DRIVER}",
                f"--devices={self.devices}",
                f"--kubelet-root={self.root_dir}",
            ],
        )

    def _check_cadvisor(self) -> None:
        """cAdvisor registers its containerd factory once, at the kubelet's start; if that
        fails (containerd slow to answer on a busy machine), no series of this kubelet's
        cAdvisor names a pod for its whole life. So: one restart of the kubelet, then an error
        naming the kubelet's line."""
        if not self.cadvisor_link:
            return
        for attempt in (1, 2):
            self._wait(lambda: self.cadvisor_factory() is not None, 60, "cAdvisor's factories")
            line = self.cadvisor_factory() or ""
            if "successfully" in line:
                return
            if attempt == 2:
                raise RuntimeError(f"{self.name}: cAdvisor cannot read containerd: {line}")
            kubelet = self.processes.pop("kubelet")
            terminate(kubelet)
            (self.workdir / "kubelet.log").rename(self.workdir / "kubelet.1.log")
            self._start_kubelet()

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - lives with the process
        self.processes[name] = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal reaches the harness, which stops it
        )

    def _wait(self, ok: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited: see {self.workdir / (name + '.log')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.1)

    def ctr(self, *args: str, timeout: float = 60.0) -> str:
        result = subprocess.run(
            [_which("ctr"), "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        return result.stdout

    def log(self, name: str = "kubelet") -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # --- stop ----------------------------------------------------------------------------------
    def stop(self) -> None:
        """Containers, kubelet, containerd, shims, mounts, cgroups, the directory: all gone."""
        driver = self.processes.pop("dra-driver", None)  # first: it is the kubelet's plugin
        if driver is not None:
            terminate(driver)
        kubelet = self.processes.pop("kubelet", None)
        if kubelet is not None:
            terminate(kubelet)
        if self.processes.get("containerd") is not None and self.socket.exists():
            with contextlib.suppress(Exception):
                self._kill_containers()
        containerd = self.processes.pop("containerd", None)
        if containerd is not None:
            terminate(containerd)
        for cgroup in self._cgroup_dirs():
            with contextlib.suppress(OSError):
                cgroup.rmdir()
        self._unlink_for_cadvisor()
        sweep(self.workdir)

    def _kill_containers(self) -> None:
        tasks = [line.split()[0] for line in self.ctr("tasks", "ls", "-q").split() if line]
        containers = [c for c in self.ctr("containers", "ls", "-q").split() if c]
        self._cgroups.update(containers)
        for task in tasks:
            with contextlib.suppress(subprocess.SubprocessError):
                self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task, timeout=10)
        for task in tasks:
            with contextlib.suppress(subprocess.SubprocessError):
                self.ctr("tasks", "delete", "--force", task, timeout=10)
        for container in containers:
            with contextlib.suppress(subprocess.SubprocessError):
                self.ctr("containers", "delete", container, timeout=10)

    def _our_pids(self) -> list[int]:
        return pids_naming(self.workdir)

    def _mounts(self) -> list[str]:
        return mounts_under(self.workdir)

    def _cgroup_dirs(self) -> list[Path]:
        """The cgroups runc made for this node's containers, in every v1 hierarchy."""
        if not self._cgroups:
            return []
        found = []
        for hierarchy in CGROUP_ROOT.iterdir():
            for parent in (hierarchy, hierarchy / "k8s.io"):
                for cid in self._cgroups:
                    if (parent / cid).is_dir():
                        found.append(parent / cid)
        return found

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the Node is Ready; then its `uninitialized` taint is removed, as the cloud
        controller an external cloud provider implies would (the harness is that controller)."""

        def ready() -> dict[str, Any] | None:
            node = self.cp.api("GET", f"/api/v1/nodes/{self.name}")
            conditions = (node or {}).get("status", {}).get("conditions") or []
            ok = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            return node if ok else None

        self._wait(ready, timeout, f"node {self.name} Ready")
        node = ready()
        assert node is not None
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != UNINITIALIZED]
        self.cp.api("PATCH", f"/api/v1/nodes/{self.name}", {"spec": {"taints": taints or None}})

    def leftovers(self) -> list[str]:
        """What stop() should have removed and did not (empty when clean)."""
        left = [f"process {pid}" for pid in self._our_pids()]
        left += [f"mount {m}" for m in self._mounts()]
        left += [f"cgroup {c}" for c in self._cgroup_dirs()]
        if self.workdir.exists() and not os.environ.get("LOADWISE_KEEP_LOGS"):
            left.append(f"directory {self.workdir}")
        if self.cadvisor_link:
            left.append(f"symlink {CADVISOR_CONTAINERD}")
        for tool in ("iptables-save", "ip6tables-save"):  # the kubelet makes none (config)
            if shutil.which(tool):
                rules = subprocess.run([tool], capture_output=True, text=True).stdout
                left += [f"{tool}: {line}" for line in rules.splitlines() if "KUBE-" in line]
        return left


def pids_naming(directory: Path) -> list[int]:
    """Processes whose command line names `directory` (a node's shims carry its socket)."""
    mark = str(directory).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if mark in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


def mounts_under(directory: Path) -> list[str]:
    prefix = str(directory) + "/"
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point.startswith(prefix):
            found.append(point)
    return found


def sweep(directory: Path) -> None:
    """What a node left in `directory`, gone: processes naming it killed, mounts under it
    unmounted (deepest first), then the directory removed (kept with LOADWISE_KEEP_LOGS).
    `loadwise-dev down` calls it too, when the supervisor that ran the node died."""
    for pid in pids_naming(directory):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pids_naming(directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    for mount in sorted(mounts_under(directory), key=lambda m: m.count("/"), reverse=True):
        if subprocess.run(["umount", mount], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mount], capture_output=True)
    if not os.environ.get("LOADWISE_KEEP_LOGS"):
        shutil.rmtree(directory, ignore_errors=True)


class NodeExporter:
    """The real node-exporter (Debian's prometheus-node-exporter) for the real nodes, on
    127.0.0.1. Every real node on this machine shares its one kernel, so one exporter serves
    them all; Prometheus labels its series with each node's name (scrape_configs())."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> NodeExporter:
        self.process = subprocess.Popen(
            [
                _which("prometheus-node-exporter"),
                f"--web.listen-address={self.address}",
                "--collector.disable-defaults",
                "--collector.cpu",
                "--collector.meminfo",
                "--collector.loadavg",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        return self

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)


def scrape_configs(
    cp: ControlPlane, names: list[str], exporter: NodeExporter
) -> list[dict[str, Any]]:
    """Prometheus jobs for the real nodes: node-exporter (labelled `node`, as loadwise's default
    queries read it), and each kubelet's /metrics/resource and /metrics/cadvisor over HTTPS with
    the control plane's CA and a bearer token, labelled `node` from the Node's name.

    The kubelets are found as kubernetes_sd_configs' role `node` finds them (the Node's address
    and kubelet port, its name and labels as `__meta_kubernetes_node_*`), but written by the
    harness into a file_sd file (node_targets()): Debian's Prometheus is built without the
    Kubernetes service discovery. The relabelling is the same either way."""
    token = cp.workdir / "prometheus.token"
    token.write_text(cp.token)
    auth = {"credentials_file": str(token)}
    tls = {"ca_file": str(cp.ca_file)}
    targets = cp.workdir / "kubelet-targets.json"
    targets.write_text(json.dumps(node_targets(cp, names)))
    jobs: list[dict[str, Any]] = [
        {
            "job_name": "node-exporter",
            "static_configs": [
                {"targets": [exporter.address], "labels": {"node": n}} for n in names
            ],
        }
    ]
    for path in ("/metrics/resource", "/metrics/cadvisor"):
        jobs.append(
            {
                "job_name": "kubelet" + path.replace("/metrics", "").replace("/", "-"),
                "scheme": "https",
                "metrics_path": path,
                "tls_config": tls,
                "authorization": auth,
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "5s"}],
                "relabel_configs": [
                    {
                        "source_labels": ["__meta_kubernetes_node_label_loadwise_io_real_node"],
                        "regex": "true",
                        "action": "keep",
                    },
                    {"source_labels": ["__meta_kubernetes_node_name"], "target_label": "node"},
                ],
            }
        )
    return jobs


def node_targets(cp: ControlPlane, names: list[str]) -> list[dict[str, Any]]:
    """What kubernetes_sd_configs (role node) discovers for these Nodes: `address:port` of the
    first address by its preference (InternalIP, ExternalIP, Hostname) and the kubelet's port,
    the name and every label (sanitised) as meta labels."""
    found = []
    for name in names:
        node = cp.api("GET", f"/api/v1/nodes/{name}")
        if node is None:
            continue
        status: dict[str, Any] = node.get("status") or {}
        addresses = {a["type"]: a["address"] for a in status.get("addresses") or []}
        address = next(
            (addresses[t] for t in ("InternalIP", "ExternalIP", "Hostname") if t in addresses), ""
        )
        port = status.get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port")
        metadata: dict[str, Any] = node.get("metadata") or {}
        labels = {
            "__meta_kubernetes_node_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key): value
            for key, value in (metadata.get("labels") or {}).items()
        }
        labels["__meta_kubernetes_node_name"] = name
        found.append({"targets": [f"{address}:{port}"], "labels": labels})
    return found


# What Prometheus holds for the real node's exporters under the stacks users run: the target
# labels prometheus-operator generates from each stack's ServiceMonitors (a Pod endpoint gets
# namespace, service, pod, container, endpoint and `instance` = address; a Node endpoint, as
# the kubelet Service's are, also `node`), written here as static and file_sd configs.
STACKS = ("node-exporter", "kube-prometheus", "kube-prometheus-stack")


def stack_scrape_configs(
    cp: ControlPlane, names: list[str], exporter: NodeExporter, stack: str
) -> list[dict[str, Any]]:
    """node-exporter: a plain Prometheus relabelling the pod's node name to `node` (what the
    harness does). kube-prometheus (jsonnet): its node-exporter ServiceMonitor relabels
    `__meta_kubernetes_pod_node_name` to `instance`. kube-prometheus-stack: node-exporter keeps
    `instance` = address and gets no node label; the kubelet's /metrics/cadvisor (scraped by
    default, every 10 s) carries `node`, less the series its metricRelabelings drop (cgroups
    without a pod)."""
    if stack == "node-exporter":
        return scrape_configs(cp, names, exporter)[:1]

    def pod_labels(name: str, service: str) -> dict[str, str]:
        return {
            "namespace": "monitoring",
            "service": service,
            "pod": f"{service}-{name}",
            "container": "node-exporter",
            "endpoint": "http-metrics",
        }

    if stack == "kube-prometheus":
        return [
            {
                "job_name": "node-exporter",
                "static_configs": [
                    {
                        "targets": [exporter.address],
                        "labels": {**pod_labels(n, "node-exporter"), "instance": n},
                    }
                    for n in names
                ],
            }
        ]
    if stack != "kube-prometheus-stack":
        raise ValueError(f"unknown stack {stack!r}")
    service = "kps-prometheus-node-exporter"
    cadvisor = next(
        j for j in scrape_configs(cp, names, exporter) if j["job_name"].endswith("cadvisor")
    )
    cadvisor = {
        **cadvisor,
        "job_name": "kubelet",
        "scrape_interval": "10s",
        "metric_relabel_configs": [
            {"source_labels": ["id", "pod"], "regex": ".+;", "action": "drop"}
        ],
    }
    return [
        {
            "job_name": "node-exporter",
            "static_configs": [
                {"targets": [exporter.address], "labels": pod_labels(n, service)} for n in names
            ],
        },
        cadvisor,
    ]
