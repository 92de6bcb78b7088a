"""The chart's alerts fire for real: a real Prometheus, configured as the Prometheus Operator
makes it from the chart's ServiceMonitor (job = the Service's name, a `namespace` label) and
loaded with the chart's PrometheusRule, scrapes a real loadwise running with the chart's
settings and ServiceAccount. A metrics source that cannot be reached fires
LoadwiseMetricsSourceDown and LoadwiseDegraded while LoadwiseDown and LoadwiseNoLeader stay
quiet; stopping loadwise fires LoadwiseDown.

The rules are loaded without their `for:` durations (5 and 10 minutes), so the expressions are
proven on real series in seconds; the durations are proven on synthetic series by
`promtool test rules` (tests/unit/test_chart_values.py)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadwise_dev.cluster import LocalCluster, running_operator, wait_for
from loadwise_dev.controlplane import free_port
from loadwise_dev.kube import Kube, KubeError
from loadwise_dev.prometheus_server import Prometheus

from .test_chart import CHART, NAMESPACE, RELEASE, charts_operator, helm, install
from .test_chart import service_account_token as token_of

pytestmark = pytest.mark.cluster


async def rules_without_durations(cluster: LocalCluster) -> dict[str, Any]:
    rendered = await helm(
        cluster, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
    )  # fmt: skip
    (rule,) = (d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "PrometheusRule")
    groups = rule["spec"]["groups"]
    for group in groups:
        for alert in group["rules"]:
            alert.pop("for", None)
    return {"groups": groups}


def firing(prometheus: Prometheus) -> dict[str, dict[str, str]]:
    answer = prometheus.query('ALERTS{alertstate="firing"}')
    return {r["metric"]["alertname"]: r["metric"] for r in answer["data"]["result"]}


async def test_the_charts_alerts_fire_on_a_real_prometheus_scraping_a_real_loadwise(
    kube: Kube, local_cluster: LocalCluster, clean: None, tmp_path: Path
) -> None:
    await install(local_cluster)
    prometheus: Prometheus | None = None
    try:
        with contextlib.suppress(KubeError):  # a Lease an earlier test's operator left
            await kube.delete(
                f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{RELEASE}-loadwise"
            )
        port = free_port()
        config, sa_kubeconfig = await charts_operator(local_cluster, kube, tmp_path, port)
        nowhere = free_port()  # nothing listens there: every refresh of the source fails
        config = config.but(prometheus_url=f"http://127.0.0.1:{nowhere}")
        token_file = tmp_path / "scraper.token"
        token_file.write_text(await token_of(kube, "scraper"))  # the chart binds its role
        rules = tmp_path / "rules.yaml"
        rules.write_text(yaml.safe_dump(await rules_without_durations(local_cluster)))
        job = {
            "job_name": f"{RELEASE}-loadwise",  # the Service's name, as the Operator sets it
            "scheme": "https",
            "metrics_path": "/metrics",
            "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
            "tls_config": {"insecure_skip_verify": True},
            "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": NAMESPACE}}
            ],
        }
        prometheus = await asyncio.to_thread(Prometheus([]).start)
        settings = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [job],
        }
        (prometheus.workdir / "prometheus.yml").write_text(yaml.safe_dump(settings))
        assert prometheus.process is not None
        prometheus.process.send_signal(signal.SIGHUP)  # reload: the job and the rules
        watched = prometheus

        async with running_operator(config, sa_kubeconfig):

            async def source_alerts() -> dict[str, dict[str, str]] | None:
                now = await asyncio.to_thread(firing, watched)
                wanted = {"LoadwiseMetricsSourceDown", "LoadwiseDegraded"}
                # LoadwiseNoLeader may fire for the second before the Lease is taken
                return now if wanted <= set(now) and "LoadwiseNoLeader" not in now else None

            alerts = await wait_for(source_alerts, 90, interval=1, what="the source's alerts")
            assert alerts["LoadwiseMetricsSourceDown"]["source"] == "prometheus"
            assert alerts["LoadwiseDegraded"]["reason"] == "metrics_source/prometheus"
            assert "LoadwiseDown" not in alerts

        async def down() -> dict[str, str] | None:
            return (await asyncio.to_thread(firing, watched)).get("LoadwiseDown")

        assert (await wait_for(down, 60, interval=1, what="LoadwiseDown"))["severity"] == (
            "critical"
        )
    finally:
        if prometheus is not None:
            await asyncio.to_thread(prometheus.stop)
        await helm(
            local_cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False
        )
