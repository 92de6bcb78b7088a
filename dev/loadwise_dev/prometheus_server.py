"""A real Prometheus server (Debian's package) on loopback, scraping the usage exporter and, with
real nodes, their node-exporter and kubelets (realnode.py)."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
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
        web_config: dict[str, Any] | None = None,
        ca_file: Path | None = None,
        auth: tuple[str, str] | None = None,
    ) -> None:
        """`web_config`: Prometheus's web configuration (TLS, basic auth users); with it,
        `ca_file` (the CA of its certificate: the URL is https) and `auth` (a user and password
        it accepts) are what the harness's own requests use."""
        self.workdir = Path(tempfile.mkdtemp(prefix="loadwise-prom-"))
        self.port = free_port()
        self.targets = targets
        self.scrape_interval = scrape_interval
        self.extra_scrape_configs = extra_scrape_configs or []
        self.command_prefix = command_prefix or []  # e.g. the control plane's hosts namespace
        self.process: subprocess.Popen[bytes] | None = None
        self.web_config = web_config
        self.ca_file = ca_file
        self.auth = auth

    @property
    def url(self) -> str:
        scheme = "https" if self.ca_file is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def _open(self, url: str) -> Any:
        request = urllib.request.Request(url)
        if self.auth is not None:
            pair = base64.b64encode(":".join(self.auth).encode()).decode()
            request.add_header("Authorization", f"Basic {pair}")
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        return urllib.request.urlopen(request, timeout=5, context=context)

    def start(self, timeout: float = 30.0) -> Prometheus:
        config = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": "5s"},
            "scrape_configs": [
                {"job_name": "nodes", "static_configs": [{"targets": self.targets}]},
                *self.extra_scrape_configs,
            ],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        web = []
        if self.web_config is not None:
            (self.workdir / "web.yml").write_text(yaml.safe_dump(self.web_config))
            web = [f"--web.config.file={self.workdir / 'web.yml'}"]
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
                *web,
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
                with self._open(self.url + "/-/ready") as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise TimeoutError("prometheus not ready")

    def query(self, promql: str) -> Any:
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with self._open(url) as resp:
            return json.loads(resp.read())

    def target_health(self) -> str:
        """Each scrape target's health and last error, one line: what a harness timeout shows,
        to tell a target that answered nothing from a Prometheus that did not scrape."""
        try:
            with self._open(self.url + "/api/v1/targets?state=active") as resp:
                active = json.loads(resp.read())["data"]["activeTargets"]
        except (OSError, ValueError, KeyError) as exc:
            return f"targets unknown ({exc!r})"
        return "; ".join(
            f"{t.get('scrapeUrl')} {t.get('health')}"
            + (f" ({t['lastError']})" if t.get("lastError") else "")
            + f", last scrape {t.get('lastScrape')}"
            for t in active
        )

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)
        shutil.rmtree(self.workdir, ignore_errors=True)
