"""kwok_usage's pure parts: what a pod uses under KWOK, and the file Prometheus finds the KWOK
nodes' cAdvisor endpoints in (the nodes' usage is proven end to end by
tests/cluster/test_placement.py)."""

from __future__ import annotations

import json
from pathlib import Path

from loadwise_dev.kwok import Kwok
from loadwise_dev.kwok_usage import CPU_QUERY, KwokUsage, declared, usage_annotations
from loadwise_dev.usage import usage_annotations as both


def test_a_pod_uses_its_annotations_or_kwoks_defaults() -> None:
    pod = {"metadata": {"annotations": usage_annotations("250m", "64Mi")}}
    assert declared(pod) == (250, 64 << 20)
    assert declared({"metadata": {}}) == (1, 1 << 20)  # KWOK's 1m and 1Mi
    assert usage_annotations("1", "1Gi").items() <= both("1", "1Gi").items()


def test_nodes_are_scraped_as_kube_prometheus_stacks_kubelet_job(tmp_path: Path) -> None:
    kwok = object.__new__(Kwok)
    kwok.port = 10250
    usage = KwokUsage(kwok, tmp_path)
    assert json.loads(usage.targets.read_text()) == []
    usage.capacity["n1"] = (8000, 32 << 30)
    usage._write()
    [group] = json.loads(usage.targets.read_text())
    assert group["targets"] == ["127.0.0.1:10250"]
    assert group["labels"]["node"] == "n1"
    assert group["labels"]["__metrics_path__"] == "/metrics/nodes/n1/metrics/cadvisor"
    job = usage.scrape_config()
    assert (job["job_name"], job["scrape_interval"]) == ("kubelet", "1s")
    assert job["file_sd_configs"][0]["files"] == [str(usage.targets)]
    usage.remove("n1")
    assert json.loads(usage.targets.read_text()) == []
    assert "[5s]" in CPU_QUERY and "$window" not in CPU_QUERY
