"""Rancher's local-path-provisioner (v0.0.30, built from its Go module by hack/ensure-tools): a
real dynamic provisioner for the local cluster, run as a process with the admin kubeconfig.

Its StorageClass `local-path` binds WaitForFirstConsumer: the scheduler (loadwise) picks the
node and writes `volume.kubernetes.io/selected-node` on the claim; the provisioner then runs a
helper pod on that node (by nodeName: no scheduler) that makes the volume's directory, and
creates a hostPath PV pinned to the node by `kubernetes.io/hostname`; the PV controller binds it
and the pod follows. Every node of this machine shares one filesystem, so the volumes live under
this object's work directory whatever the node. On a real node the helper pod runs the project's
busybox image (`hostNetwork`, as every pod there); on a KWOK node KWOK completes it at once (a
Stage of ours, kwok-helper-pod-complete.yaml) and the directory is only pretended.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .controlplane import ControlPlane, _cache, pinned_versions, terminate
from .images import BURN
from .kube import Kube, KubeError

NAMESPACE = "local-path-storage"
SERVICE_ACCOUNT = "local-path-provisioner-service-account"
CONFIG_MAP = "local-path-config"
PROVISIONER = "rancher.io/local-path"
STORAGE_CLASS = "local-path"
HELPER_LABEL = "loadwise.io/local-path-helper"  # KWOK's Stage for them selects this
# The image has busybox but not its mkdir and rm applets as commands (images.py).
SETUP = '#!/bin/sh\nset -eu\n/bin/busybox mkdir -m 0777 -p "$VOL_DIR"\n'
TEARDOWN = '#!/bin/sh\nset -eu\n/bin/busybox rm -rf "$VOL_DIR"\n'
NO_DELAY = {
    f"{stage}.stage.kwok.x-k8s.io/{kind}": "0"
    for stage in ("pod-create", "pod-ready")
    for kind in ("delay", "jitter-delay")
}


def binary() -> Path:
    version = pinned_versions()["LOCAL_PATH_PROVISIONER_VERSION"]
    path = _cache() / "bin" / f"local-path-provisioner-{version}" / "local-path-provisioner"
    if not path.exists():
        raise FileNotFoundError(f"{path} missing: run hack/ensure-tools first")
    return path


def helper_pod() -> dict[str, Any]:
    """The helper pod template (the provisioner adds nodeName, volumes, command, tolerations)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "helper-pod",
            "labels": {HELPER_LABEL: "true"},
            "annotations": NO_DELAY,
        },
        "spec": {
            "hostNetwork": True,  # real nodes here have no pod network
            "containers": [{"name": "helper-pod", "image": BURN, "imagePullPolicy": "Never"}],
        },
    }


def storage_class() -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }


class LocalPath:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.workdir = Path(tempfile.mkdtemp(prefix="loadwise-local-path-"))
        self.volumes = self.workdir / "volumes"
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self, kube: Kube) -> LocalPath:
        """Its namespace, ServiceAccount (the helper pods'), scripts and StorageClass, then
        the provisioner itself."""
        self.volumes.mkdir(mode=0o777, exist_ok=True)
        ns = f"/api/v1/namespaces/{NAMESPACE}"
        objects: list[tuple[str, dict[str, Any]]] = [
            ("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}),
            (f"{ns}/serviceaccounts", {"metadata": {"name": SERVICE_ACCOUNT}}),
            (
                f"{ns}/configmaps",
                {"metadata": {"name": CONFIG_MAP}, "data": {"setup": SETUP, "teardown": TEARDOWN}},
            ),
            ("/apis/storage.k8s.io/v1/storageclasses", storage_class()),
        ]
        for path, body in objects:
            try:
                await kube.create(path, body)
            except KubeError as exc:
                if exc.status != 409:
                    raise
        self._launch()
        return self

    def _launch(self) -> None:
        config = {
            "nodePathMap": [
                {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(self.volumes)]}
            ],
            "cmdTimeoutSeconds": 60,
        }
        (self.workdir / "config.json").write_text(json.dumps(config))
        (self.workdir / "helperPod.yaml").write_text(json.dumps(helper_pod()))
        log = open(self.workdir / "local-path-provisioner.log", "wb")  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if k != "CONFIG_MOUNT_PATH"}
        self.process = subprocess.Popen(
            [
                str(binary()),
                "--debug",
                "start",
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--provisioner-name={PROVISIONER}",
                f"--namespace={NAMESPACE}",
                f"--configmap-name={CONFIG_MAP}",
                f"--service-account-name={SERVICE_ACCOUNT}",
                f"--config={self.workdir / 'config.json'}",
                f"--helper-pod-file={self.workdir / 'helperPod.yaml'}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )

    def log(self) -> str:
        return (self.workdir / "local-path-provisioner.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)
        if not os.environ.get("LOADWISE_KEEP_LOGS"):
            shutil.rmtree(self.workdir, ignore_errors=True)
