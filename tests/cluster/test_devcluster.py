"""`loadwise-dev up/down` and `loadwise-dev demo --keep` as a user runs them (the harness's
console script): real processes, kubectl against the cluster, and nothing left behind (every
started PID gone, every temporary directory removed) whether it is stopped by `down` from
another shell or by Ctrl-C in the foreground."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import IO, Any

import pytest

from loadwise_dev.controlplane import k8s_bin_dir
from loadwise_dev.devcluster import alive, read_state, start_time, supervisor_of
from loadwise_dev.kwok_usage import CPU_QUERY
from loadwise_dev.realnode import pids_naming

pytestmark = pytest.mark.cluster
# The harness's console script (dev/pyproject.toml), installed beside this Python.
DEV_COMMAND = str(Path(sys.executable).with_name("loadwise-dev"))

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: hello
spec:
  schedulerName: loadwise-scheduler
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources:
      requests: {cpu: 500m, memory: 512Mi}
"""


def _run(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def loadwise(
    *args: str, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "loadwise", *args], env, timeout)


def loadwise_dev(
    *args: str, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return _run([DEV_COMMAND, *args], env, timeout)


def kubectl(*args: str, env: dict[str, str], stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(k8s_bin_dir() / "kubectl"), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def started_processes(state_dir: Path) -> dict[str, tuple[int, str | None]]:
    """name -> (pid, start time) of everything the dev cluster recorded, supervisor included."""
    state = read_state(state_dir)
    assert state is not None
    found = {name: (p["pid"], p["started"]) for name, p in state["processes"].items()}
    supervisor = supervisor_of(state_dir)
    assert supervisor is not None
    found["supervisor"] = supervisor
    return found


def assert_all_gone(processes: dict[str, tuple[int, str | None]], dirs: list[str]) -> None:
    deadline = time.monotonic() + 10  # init reaps the supervisor's orphans a moment later
    while time.monotonic() < deadline and any(alive(*p) for p in processes.values()):
        time.sleep(0.2)
    assert [n for n, p in processes.items() if alive(*p)] == []
    assert [d for d in dirs if d and os.path.exists(d)] == []


def prometheus_cpu(url: str) -> dict[str, float]:
    query = url + "/api/v1/query?" + urllib.parse.urlencode({"query": CPU_QUERY})
    with urllib.request.urlopen(query, timeout=5) as resp:
        answer: Any = json.loads(resp.read())
    return {r["metric"]["node"]: float(r["value"][1]) for r in answer["data"]["result"]}


def test_dev_up_kubectl_then_down_leaves_nothing(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    env = dict(os.environ, LOADWISE_DEV_STATE=str(state_dir))
    env.pop("KUBECONFIG", None)
    try:
        up = loadwise_dev("up", "--detach", env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"export KUBECONFIG={state_dir / 'kubeconfig'}" in up.stdout
        assert f"export PATH={k8s_bin_dir()}:$PATH" in up.stdout
        processes = started_processes(state_dir)
        assert set(processes) == {
            "etcd", "kube-apiserver", "kube-controller-manager", "prometheus", "kwok",
            "metrics-server", "local-path-provisioner", "operator", "supervisor",
        }  # fmt: skip
        state = read_state(state_dir)
        assert state is not None
        dirs = [*state["dirs"], str(state_dir)]
        assert all(os.path.isdir(d) for d in dirs)
        # A second `up` refuses while one runs.
        again = loadwise_dev("up", "--detach", env=env)
        assert again.returncode == 1 and "already running" in again.stdout

        user = dict(env, KUBECONFIG=str(state_dir / "kubeconfig"))
        assert "default" in kubectl("get", "schedpol", env=user)
        kubectl("apply", "-f", "-", env=user, stdin=POD)
        deadline = time.monotonic() + 30
        node = ""
        while not node and time.monotonic() < deadline:
            node = kubectl("get", "pod", "hello", "-o", "jsonpath={.spec.nodeName}", env=user)
            time.sleep(0.3)
        assert node in {"node-4", "node-5", "node-6"}  # the three coolest of the six
        described = kubectl("describe", "pod", "hello", env=user)
        assert re.search(r"Scheduled .*loadwise-scheduler .*Successfully assigned", described)

        # The load of a node is settable, and Prometheus follows.
        load = loadwise_dev("load", "node-1", "12.5", "30", env=env)
        assert load.returncode == 0, load.stdout
        deadline = time.monotonic() + 30
        while abs(prometheus_cpu(state["prometheus"]).get("node-1", 0) - 0.125) > 0.02:
            assert time.monotonic() < deadline, prometheus_cpu(state["prometheus"])
            time.sleep(0.5)
        status = loadwise_dev("status", env=env)
        assert status.returncode == 0, status.stdout
        assert re.search(r"node-1\s+12.5%\s+30%", status.stdout)
        # `explain` with the operator's settings reads its Prometheus: no warning.
        settings = (state_dir / "operator.env").read_text()
        explain_env = dict(user)
        for line in settings.splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            explain_env[key] = value.strip("'")
        explained = loadwise("explain", "default/hello", env=explain_env, timeout=60)
        assert explained.returncode == 0, explained.stderr
        assert not explained.stdout.startswith("WARNING") and "metrics" in explained.stdout
    finally:
        down = loadwise_dev("down", env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped everything" in down.stdout
    assert "outlived" not in down.stdout  # the supervisor stopped it all by itself
    assert_all_gone(processes, dirs)
    assert loadwise_dev("status", env=env).returncode == 1


def _read_until(stream: IO[str], marker: str, timeout: float) -> str:
    """Lines from `stream` until one contains `marker` (the child's output is line-buffered)."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"no {marker!r} in:\n{''.join(seen)}")


def foreground(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """`loadwise-dev ARGS` in a process group of its own, as a shell runs a foreground job:
    Ctrl-C signals the group."""
    return subprocess.Popen(
        [DEV_COMMAND, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_ctrl_c_on_the_foreground_dev_up_stops_everything(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    env = dict(os.environ, LOADWISE_DEV_STATE=str(state_dir), PYTHONUNBUFFERED="1")
    proc = foreground(["up"], env)
    try:
        assert proc.stdout is not None
        _read_until(proc.stdout, "Ctrl-C", 240)
        processes = started_processes(state_dir)
        state = read_state(state_dir)
        assert state is not None
        dirs = [*state["dirs"], str(state_dir)]
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:  # the test failed: leave nothing behind
            proc.kill()
            loadwise_dev("down", env=env)
    assert proc.returncode == 0, rest
    assert "stopped everything" in rest and "outlived" not in rest
    assert_all_gone(processes, dirs)


def _children(pid: int) -> dict[int, str | None]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found[int(entry.name)] = start_time(int(entry.name))
    return found


def test_ctrl_c_ends_demo_keep_and_its_control_plane(tmp_path: Path) -> None:
    """It used to hang: kopf took the SIGINT and the demo waited for ever; only SIGKILL ended
    it, and etcd, kube-apiserver, the controller-manager and Prometheus were orphaned."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = foreground(["demo", "--keep"], env)
    try:
        assert proc.stdout is not None
        # Printed once the kept operator runs: the SIGINT below reaches it, not start-up.
        output = _read_until(proc.stdout, "Ctrl-C stops all", 240)
        # Pods in the order loadwise decided (the decisions' numbers), after a legend of the
        # figures they show; KWOK ran them.
        assert "in the order loadwise decided:" in output and "Running, as KWOK" in output
        assert all(f"\n{word}:" in output for word in ("score", "hot threshold", "estimate"))
        rows = re.findall(r"^\s*(\d+) demo-\d\d\s+node-\d\s+score ", output, re.MULTILINE)
        assert [int(n) for n in rows] == list(range(1, 13))
        workdir = re.search(r"export KUBECONFIG=(\S+)/admin.kubeconfig", output)
        assert workdir is not None
        children = _children(proc.pid)
        assert len(children) >= 4  # etcd, kube-apiserver, kube-controller-manager, Prometheus
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, rest
    assert "stopped everything" in rest
    assert_all_gone({str(p): (p, s) for p, s in children.items()}, [workdir.group(1)])


REAL_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: real
spec:
  schedulerName: loadwise-scheduler
  hostNetwork: true
  terminationGracePeriodSeconds: 10
  nodeSelector: {loadwise.io/real-node: "true"}
  tolerations: [{key: loadwise.io/real-node, operator: Exists}]
  containers:
  - name: burn
    image: localhost/loadwise/burn:dev
    imagePullPolicy: Never
    env: [{name: BURN_MILLICPU, value: "200"}]
    resources:
      requests: {cpu: 100m, memory: 128Mi}
"""


PLAIN = '{"spec": {"schedulerName": "loadwise-scheduler"}}'


def test_dev_up_with_a_real_node_runs_a_container_and_down_leaves_nothing(tmp_path: Path) -> None:
    """`loadwise-dev up --real-nodes 1`: a kubelet and containerd run a real container placed
    by loadwise, a pod that does not opt in to the real node goes to a KWOK node, `kubectl top
    node` shows every node; `down` stops kubelet, containerd and the container and leaves no
    process, mount or directory behind, with the container still running when it is called."""
    state_dir = tmp_path / "state"
    env = dict(os.environ, LOADWISE_DEV_STATE=str(state_dir))
    env.pop("KUBECONFIG", None)
    try:
        up = loadwise_dev("up", "--detach", "--real-nodes", "1", env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        processes = started_processes(state_dir)
        assert {"real-1/kubelet", "real-1/containerd"} <= set(processes)
        state = read_state(state_dir)
        assert state is not None and len(state["node_dirs"]) == 1
        node_dir = state["node_dirs"][0]
        dirs = [*state["dirs"], *state["node_dirs"], str(state_dir)]
        user = dict(env, KUBECONFIG=str(state_dir / "kubeconfig"))
        assert "real-1" in kubectl("get", "nodes", "-l", "loadwise.io/real-node=true", env=user)
        assert "metrics-server" in processes  # the real one, for `kubectl top`
        kubectl("apply", "-f", "-", env=user, stdin=REAL_POD)
        deadline = time.monotonic() + 60
        phase = ""
        while phase != "Running":
            assert time.monotonic() < deadline, kubectl("describe", "pod", "real", env=user)
            phase = kubectl("get", "pod", "real", "-o", "jsonpath={.status.phase}", env=user)
            time.sleep(0.5)
        described = kubectl("describe", "pod", "real", env=user)
        assert "Successfully assigned default/real to real-1" in described
        shims = [p for p in _pids_naming(node_dir) if p not in {v[0] for v in processes.values()}]
        assert shims, "the container's shim runs beside kubelet and containerd"
        # A pod that does not opt in goes to a KWOK node: the real one is tainted (it could
        # not start a pod that needs a pod network).
        kubectl("run", "plain", "--image=nginx", "--overrides", PLAIN, env=user)
        deadline = time.monotonic() + 60
        node = ""
        while not node:
            assert time.monotonic() < deadline, kubectl("describe", "pod", "plain", env=user)
            node = kubectl("get", "pod", "plain", "-o", "jsonpath={.spec.nodeName}", env=user)
            time.sleep(0.5)
        assert node.startswith("node-"), node
        deadline = time.monotonic() + 90
        rows: dict[str, list[str]] = {}
        # The real metrics-server scrapes the real kubelet and KWOK, which plays the others.
        while not rows or any("<unknown>" in row for row in rows.values()):
            assert time.monotonic() < deadline, f"kubectl top node: {rows}"
            done = subprocess.run(
                [str(k8s_bin_dir() / "kubectl"), "top", "node"],
                env=user,
                capture_output=True,
                text=True,
                timeout=30,
            )
            rows = {r.split()[0]: r.split()[1:] for r in done.stdout.splitlines()[1:]}
            time.sleep(1)
        assert {"real-1", "node-1", "node-6"} <= set(rows), rows
    finally:
        down = loadwise_dev("down", env=env, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_all_gone(processes, dirs)
    assert _pids_naming(node_dir) == []
    assert [m for m in Path("/proc/self/mounts").read_text().splitlines() if node_dir in m] == []


def _pids_naming(directory: str) -> list[int]:
    return pids_naming(Path(directory))
