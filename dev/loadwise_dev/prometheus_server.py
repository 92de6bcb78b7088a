"""A real Prometheus server (Debian's package) on loopback, scraping the usage exporter and, with
real nodes, their node-exporter and kubelets (realnode.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from .controlplane import free_port, terminate

# Queries for the simulation: same series as the defaults, with a rate window that fits a 1 s
# scrape interval instead of node-exporter's usual 15-30 s.
SIM_CPU_QUERY = '1 - avg by (node) (rate(node_cpu_seconds_total{mode="idle"}[5s]))'


class Prometheus:
    def __init__(
        self,
        targets: list[str],
        scrape_interval: str = "1s",
        extra_scrape_configs: list[dict[str, Any]] | None = None,
        command_prefix: list[str] | None = None,
    ) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="loadwise-prom-"))
        self.port = free_port()
        self.targets = targets
        self.scrape_interval = scrape_interval
        self.extra_scrape_configs = extra_scrape_configs or []
        self.command_prefix = command_prefix or []  # e.g. the control plane's hosts namespace
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Prometheus:
        config = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": "5s"},
            "scrape_configs": [
                {"job_name": "nodes", "static_configs": [{"targets": self.targets}]},
                *self.extra_scrape_configs,
            ],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        binary = shutil.which("prometheus")
        if binary is None:
            raise FileNotFoundError("prometheus missing: run hack/ensure-tools first")
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(
            [
                *self.command_prefix,
                binary,
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=2h",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: see {self.workdir / 'prometheus.log'}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise TimeoutError("prometheus not ready")

    def query(self, promql: str) -> Any:
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)
        shutil.rmtree(self.workdir, ignore_errors=True)
