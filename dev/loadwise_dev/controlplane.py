"""A real local control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager, and
(on demand) kube-scheduler, built by hack/ensure-tools from pinned Kubernetes modules.

Simulated nodes have no kubelet: they are Node objects created through the API (real nodes, with
a kubelet, are realnode.py's). Two choices follow from that:
- the node lifecycle controller is off (it would mark kubelet-less nodes NotReady and evict);
- the TaintNodesByCondition admission plugin is off (it taints every new Node not-ready, and with
  no lifecycle controller nothing would remove the taint).
Authentication is a static admin token (group system:masters), real service-account tokens
(TokenRequest), so tests can run the operator with exactly the chart's RBAC, and client
certificates from the harness CA (kubelets, under the Node authorizer and NodeRestriction); the
aggregation layer has front-proxy certificates (the real metrics-server).
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

VERSIONS_FILE = Path(__file__).resolve().parents[2] / "hack" / "versions.env"


def pinned_versions() -> dict[str, str]:
    """hack/versions.env as a dict (the harness runs from a source checkout)."""
    pairs = (
        line.split("=", 1)
        for line in VERSIONS_FILE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    return {key.strip(): value.strip() for key, value in pairs}


_HANDED_OUT: set[int] = set()


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (and of bind to 0)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A port on 127.0.0.1 that nothing is bound to, for a server started later, never the same
    twice in this process. Taken below the ephemeral range: a port from bind(0) is in it, and
    any outgoing connection made before the server binds may take it as its local port and
    hold it (an operator's metrics port, held so for over a minute, failed a cluster test)."""
    low, _ = ephemeral_ports()
    if low - 1024 >= 4096:
        for _ in range(200):
            port = random.randint(max(1024, low - 16384), low - 1)
            if port not in _HANDED_OUT and _bindable(port):
                _HANDED_OUT.add(port)
                return port
    while True:  # no room below the range (or all tried were taken): the kernel's choice
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _cache() -> Path:
    return Path(os.environ.get("LOADWISE_CACHE", Path.home() / ".cache" / "loadwise"))


def k8s_bin_dir() -> Path:
    """Where hack/ensure-tools put the pinned Kubernetes binaries."""
    explicit = os.environ.get("LOADWISE_K8S_BIN")
    version = pinned_versions()["K8S_VERSION"]
    return Path(explicit) if explicit else _cache() / "bin" / f"k8s-{version}"


def etcd_binary() -> Path:
    """etcd as hack/ensure-tools built it from the pinned server module."""
    return _cache() / "bin" / f"etcd-{pinned_versions()['ETCD_VERSION']}" / "etcd"


def helm_binary() -> Path:
    return _cache() / "bin" / f"helm-{pinned_versions()['HELM_VERSION']}" / "helm"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost, and a service-account key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=directory)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=loadwise-local-ca",
        "-days", "365", "-out", "ca.crt", cwd=directory,
    )  # fmt: skip
    (directory / "san.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
    )
    _openssl("genrsa", "-out", "apiserver.key", "2048", cwd=directory)
    _openssl(
        "req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver",
        "-out", "apiserver.csr", cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "365", "-extfile", "san.cnf", "-out", "apiserver.crt",
        cwd=directory,
    )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    # The API server's client certificate towards kubelets (logs, exec, proxy, metrics).
    issue_cert(directory, directory, "kubelet-client", "/O=system:masters/CN=kube-apiserver")
    # The aggregation layer's front proxy: its own CA, and the client certificate the API
    # server presents to aggregated API servers (metrics-server trusts the user it names).
    front = directory / "front-proxy"
    front.mkdir()
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=front)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=loadwise-front-proxy-ca",
        "-days", "365", "-out", "ca.crt", cwd=front,
    )  # fmt: skip
    issue_cert(front, front, "client", "/CN=front-proxy-client")


def issue_cert(ca: Path, out: Path, stem: str, subject: str, san: str = "") -> None:
    """`out/stem.{key,crt}` signed by `ca/ca.{key,crt}`; `san` e.g. "DNS:node-1,IP:127.0.0.1"."""
    _openssl("genrsa", "-out", f"{stem}.key", "2048", cwd=out)
    _openssl("req", "-new", "-key", f"{stem}.key", "-subj", subject, "-out", f"{stem}.csr", cwd=out)
    extra = []
    if san:
        (out / f"{stem}.ext").write_text(f"subjectAltName={san}\n")
        extra = ["-extfile", f"{stem}.ext"]
    _openssl(
        "x509", "-req", "-in", f"{stem}.csr", "-CA", str(ca / "ca.crt"), "-CAkey",
        str(ca / "ca.key"), "-CAcreateserial", "-days", "365", "-out", f"{stem}.crt", *extra,
        cwd=out,
    )  # fmt: skip


def kubeconfig_with_cert(server: str, ca_file: Path, cert: Path, key: Path, user: str) -> str:
    """A kubeconfig that authenticates with a client certificate (a kubelet's)."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": server, "certificate-authority": str(ca_file)},
                }
            ],
            "users": [
                {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
            ],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
            "current-context": "local",
        }
    )


def terminate(proc: subprocess.Popen[bytes], timeout: float = 10.0, kill: bool = False) -> None:
    """SIGTERM (SIGKILL with `kill`), then SIGKILL if it outlives `timeout`; reaped."""
    if proc.poll() is not None:
        return
    if kill:
        proc.kill()
    else:
        proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def kubeconfig(server: str, ca_file: Path, token: str, user: str = "admin") -> str:
    ca = base64.b64encode(ca_file.read_bytes()).decode()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": server, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
            "current-context": "local",
        }
    )


# Kubernetes' own gang scheduling (PodGroups, scheduling.k8s.io/v1beta1): beta, off by default,
# gated on kube-apiserver, kube-controller-manager (its podgroup-protection controller removes
# the finalizer every PodGroup gets) and kube-scheduler (its GangScheduling plugin); docs/gangs.md.
FEATURE_GATES = "--feature-gates=GenericWorkload=true"
RUNTIME_CONFIG = "--runtime-config=scheduling.k8s.io/v1beta1=true"


@dataclass
class ControlPlane:
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="loadwise-cp-")))
    bin_dir: Path = field(default_factory=k8s_bin_dir)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    token: str = field(default_factory=lambda: base64.b32encode(os.urandom(20)).decode().lower())
    apiserver_port: int = 0
    # Extra kube-apiserver flags, e.g. ["--watch-cache=false"] (watches then read etcd directly,
    # so an etcd compaction expires them with 410 Gone, as a busy real cluster does).
    apiserver_args: list[str] = field(default_factory=list)
    # Names the API server resolves to 127.0.0.1 (real nodes' Hostname addresses): it then
    # runs in a mount namespace of its own whose /etc/hosts adds them; the machine's is untouched.
    node_hosts: list[str] = field(default_factory=list)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    def binary(self, name: str) -> str:
        path = self.bin_dir / name
        if not path.exists():
            raise FileNotFoundError(f"{path} missing: run hack/ensure-tools first")
        return str(path)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self, controller_manager: bool = True, timeout: float = 90.0) -> ControlPlane:
        pki = self.workdir / "pki"
        make_pki(pki)
        (self.workdir / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        self._start_etcd()
        self._start_apiserver(pki)
        self.kubeconfig.write_text(kubeconfig(self.server, self.ca_file, self.token))
        self.wait_ready(timeout)
        if controller_manager:
            self._start_controller_manager(pki)
        return self

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - lives with the process
        self.processes[name] = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    def _start_etcd(self) -> None:
        # On tmpfs: etcd's fsyncs would otherwise dominate every write on this small machine.
        data = Path(tempfile.mkdtemp(prefix="loadwise-etcd-", dir="/dev/shm"))
        self._etcd_data = data
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                str(etcd_binary()),
                "--name=local",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=local=http://127.0.0.1:{peer}",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self, pki: Path) -> None:
        self.apiserver_port = self.apiserver_port or free_port()
        self._apiserver_cmd = [
            self.binary("kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            # Real nodes (realnode.py) authenticate with client certificates as system:node:NAME
            # and are confined by the Node authorizer and NodeRestriction, as in production.
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=Hostname,InternalIP",
            f"--requestheader-client-ca-file={pki / 'front-proxy' / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy' / 'client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy' / 'client.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--disable-admission-plugins=TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            "--profiling=false",
            "--v=1",
            FEATURE_GATES,
            RUNTIME_CONFIG,
            *self.apiserver_args,
        ]
        if self.node_hosts:
            self._apiserver_cmd = [*self.with_hosts(), *self._apiserver_cmd]
        self._spawn("kube-apiserver", self._apiserver_cmd)

    def with_hosts(self) -> list[str]:
        """A command prefix: run in a private mount namespace whose /etc/hosts also maps
        `node_hosts` to 127.0.0.1 (kubelets' Hostname addresses stay on loopback)."""
        hosts = self.workdir / "hosts"
        if not hosts.exists():
            machine = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
            names = " ".join(self.node_hosts)
            hosts.write_text(f"{machine.rstrip()}\n127.0.0.1 {names}\n")
        script = 'mount --bind "$0" /etc/hosts && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(hosts)]

    def _start_controller_manager(self, pki: Path) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                self.binary("kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                "--controllers=*,-nodelifecycle",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                FEATURE_GATES,
                "--v=1",
            ],
        )

    def start_scheduler(self, qps: int = 50, burst: int = 100) -> subprocess.Popen[bytes]:
        """The real kube-scheduler, as oracle and baseline (schedules `default-scheduler` pods)."""
        config = self.workdir / "kube-scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(self.kubeconfig),
                        "qps": qps,
                        "burst": burst,
                    },
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        self._spawn(
            "kube-scheduler",
            [
                self.binary("kube-scheduler"),
                f"--config={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                FEATURE_GATES,
                "--v=1",
            ],
        )
        return self.processes["kube-scheduler"]

    def stop_process(self, name: str, timeout: float = 10.0, kill: bool = False) -> None:
        """SIGTERM (SIGKILL with `kill`), then SIGKILL if it outlives `timeout`."""
        proc = self.processes.pop(name, None)
        if proc is not None:
            terminate(proc, timeout, kill)

    # --- faults --------------------------------------------------------------------------------
    def stop_apiserver(self, kill: bool = False, timeout: float = 10.0) -> None:
        """Stop kube-apiserver (SIGTERM, or SIGKILL with `kill`); etcd and the rest stay up."""
        self.stop_process("kube-apiserver", timeout, kill)

    def start_apiserver(self, timeout: float = 60.0) -> float:
        """Start kube-apiserver again with the same flags and port; seconds until /readyz."""
        if "kube-apiserver" in self.processes and self.processes["kube-apiserver"].poll() is None:
            raise RuntimeError("kube-apiserver is already running")
        started = time.monotonic()
        deadline = started + timeout
        while True:  # the port may linger for a moment after the old process exited
            self._spawn("kube-apiserver", self._apiserver_cmd)
            try:
                self.wait_ready(max(1.0, deadline - time.monotonic()))
                return time.monotonic() - started
            except RuntimeError:  # exited at once (address in use): try again
                self.processes.pop("kube-apiserver", None)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def restart_apiserver(self, downtime: float = 0.0, kill: bool = False) -> float:
        """Stop kube-apiserver, wait `downtime` seconds, start it again; returns the seconds it
        was unreachable in total (down time plus its start-up)."""
        started = time.monotonic()
        self.stop_apiserver(kill=kill)
        time.sleep(max(0.0, downtime - (time.monotonic() - started)))
        self.start_apiserver()
        return time.monotonic() - started

    def _etcd(self, path: str, body: dict[str, object]) -> dict[str, object]:
        """etcd's v3 JSON gateway (etcd 3.4 serves /v3/...)."""
        request = urllib.request.Request(
            self.etcd_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            answer: dict[str, object] = json.loads(resp.read())
            return answer

    def etcd_revision(self) -> int:
        """etcd's current revision (what a Kubernetes resourceVersion counts)."""
        answer = self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        header = answer.get("header")
        assert isinstance(header, dict)
        return int(header["revision"])

    def advance_etcd(self) -> int:
        """Write a key of no meaning to etcd, which moves its revision on; returns the new one.
        Done while the API server is down, its restarted watch cache starts past every version
        its clients hold, so each of their watches ends in 410 Gone and they list again."""
        key = base64.b64encode(b"/loadwise-dev/advance").decode()
        value = base64.b64encode(str(time.time()).encode()).decode()
        answer = self._etcd("/v3/kv/put", {"key": key, "value": value})
        header = answer.get("header")
        assert isinstance(header, dict)
        return int(header["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compact etcd's history up to `revision` (default: now). Watches asking for anything
        older then get 410 Gone from an API server without a watch cache. Returns the revision."""
        target = revision if revision is not None else self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(target), "physical": True})
        return target

    def stop(self) -> None:
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            self.stop_process(name)
        shutil.rmtree(getattr(self, "_etcd_data", ""), ignore_errors=True)
        if not os.environ.get("LOADWISE_KEEP_LOGS"):  # set it to keep the components' logs
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def api(self, method: str, path: str, body: object = None) -> dict[str, Any] | None:
        """One synchronous admin request (set-up code outside an event loop); None on 404.
        PATCH bodies are JSON merge patches."""
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        request = urllib.request.Request(
            self.server + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content},
            method=method,
        )
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as resp:
                answer: dict[str, Any] = json.loads(resp.read() or b"{}")
                return answer
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    # --- readiness -----------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited: see {self.workdir / (name + '.log')}")
            request = urllib.request.Request(
                self.server + "/readyz", headers={"Authorization": f"Bearer {self.token}"}
            )
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError as exc:
                last = exc
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver not ready after {timeout}s: {last}")
