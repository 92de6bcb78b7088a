"""The simulated exporter's series, read over HTTP as Prometheus would: per-pod cAdvisor series
(a monotonic CPU counter), the gpu and disk dimensions, and nothing for a dimension never set."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator

import pytest

from loadwise_dev.exporter import SIM_DIMENSIONS, UsageExporter


@pytest.fixture
def exporter() -> Iterator[UsageExporter]:
    running = UsageExporter().start()
    try:
        yield running
    finally:
        running.stop()


def scrape(exporter: UsageExporter) -> dict[str, float]:
    """series (name and labels as written) -> value; every family announced before its samples."""
    with urllib.request.urlopen(f"http://{exporter.address}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    samples: dict[str, float] = {}
    announced: list[str] = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            family = line.split()[2]
            assert family not in announced, f"{family} announced twice: families interleaved"
            announced.append(family)
            continue
        series, value = line.rsplit(" ", 1)
        assert series.split("{", 1)[0] == announced[-1], f"{series} outside its family block"
        samples[series] = float(value)
    return samples


def pod_series(name: str, pod: str, node: str, namespace: str = "ns") -> str:
    return f'{name}{{namespace="{namespace}",pod="{pod}",container="main",node="{node}"}}'


CPU = "container_cpu_usage_seconds_total"
MEMORY = "container_memory_working_set_bytes"


def test_pod_series_count_cpu_seconds_and_never_go_back(exporter: UsageExporter) -> None:
    exporter.set_usage("n1", 0.1, 0.2, memory_total=8 << 30, cpu_millis=4000)
    started = time.monotonic()
    exporter.place_pod("u1", "n1", 500, 256 << 20, namespace="ns", name="web-1")
    time.sleep(0.4)
    first = scrape(exporter)
    elapsed = time.monotonic() - started
    counter = first[pod_series(CPU, "web-1", "n1")]
    assert 0.5 * 0.4 <= counter <= 0.5 * elapsed + 1e-6  # 0.5 cores since placed
    assert first[pod_series(MEMORY, "web-1", "n1")] == 256 << 20
    # The same pod seen again (a watch MODIFIED event) with a new usage: the counter goes on.
    exporter.place_pod("u1", "n1", 100, 128 << 20, namespace="ns", name="web-1")
    time.sleep(0.2)
    second = scrape(exporter)
    assert second[pod_series(CPU, "web-1", "n1")] >= counter
    assert second[pod_series(MEMORY, "web-1", "n1")] == 128 << 20
    assert exporter.pod_usage() == {("ns", "web-1"): (100, 128 << 20)}
    # The node's figures include the pod: 10% background + 100m of 4000m.
    assert exporter.utilisation()["n1"][0] == pytest.approx(0.125)
    exporter.remove_pod("u1")
    gone = scrape(exporter)
    assert pod_series(CPU, "web-1", "n1") not in gone
    assert pod_series(MEMORY, "web-1", "n1") not in gone


def test_dimensions_publish_dcgm_and_node_exporter_series_only_where_set(
    exporter: UsageExporter,
) -> None:
    exporter.set_usage("n1", 0.1, 0.2)
    exporter.set_usage("n2", 0.1, 0.2)
    exporter.set_dimension("n1", "gpu", 0.42)
    exporter.set_dimension("n1", "disk", 0.5)
    time.sleep(0.4)
    samples = scrape(exporter)
    assert samples['DCGM_FI_DEV_GPU_UTIL{node="n1",gpu="0"}'] == pytest.approx(42)
    busy = samples['node_disk_io_time_seconds_total{node="n1",device="sda"}']
    assert 0.15 <= busy <= 0.5  # half busy for 0.4 s and a little
    assert not [s for s in samples if 'node="n2"' in s and re.match(r"(DCGM|node_disk)", s)]
    exporter.set_dimension("n1", "disk", 0.0)  # idle from now: the counter stays where it was
    later = scrape(exporter)['node_disk_io_time_seconds_total{node="n1",device="sda"}']
    assert busy <= later <= busy + 0.1


def test_dimension_names_and_ranges_are_checked(exporter: UsageExporter) -> None:
    exporter.set_usage("n1", 0.1, 0.2)
    with pytest.raises(ValueError, match="unknown dimension"):
        exporter.set_dimension("n1", "network", 0.5)
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        exporter.set_dimension("n1", "gpu", 1.5)
    assert set(SIM_DIMENSIONS) == {"gpu", "disk"}
    assert all("node" in query for query in SIM_DIMENSIONS.values())


def test_a_node_whose_usage_comes_from_elsewhere_gets_its_dimensions_only(
    exporter: UsageExporter,
) -> None:
    """KWOK nodes (kwok_usage.py): KWOK publishes CPU and memory; no GPU, so that is here."""
    exporter.set_dimension("n9", "gpu", 0.5)
    samples = scrape(exporter)
    assert samples['DCGM_FI_DEV_GPU_UTIL{node="n9",gpu="0"}'] == pytest.approx(50)
    assert not [s for s in samples if 'node="n9"' in s and not s.startswith("DCGM")]
    assert "n9" not in exporter.utilisation()
