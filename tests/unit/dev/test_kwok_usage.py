"""kwok_usage's pure parts: what a pod uses under KWOK, the file Prometheus finds the KWOK
nodes' cAdvisor endpoints in, how bench/rebalance's drift and `loadwise-dev load` reach KWOK's
annotations (the nodes' usage is proven end to end by tests/cluster/test_placement.py and
tests/cluster/test_devcluster.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from loadwise_dev.devcluster import CPU_LOAD, MEMORY_LOAD, load_of
from loadwise_dev.engines import drift
from loadwise_dev.kube import Kube
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


class _Patches:
    """A Kube that records merge patches (all KwokPodUsage.place sends)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    async def merge_patch(self, path: str, body: Any) -> Any:
        self.sent.append((path, body))
        return body


async def test_a_drifting_pods_use_is_patched_into_kwok_annotations_when_it_changes() -> None:
    kube = _Patches()
    usage = drift.KwokPodUsage(cast(Kube, kube), object.__new__(KwokUsage))  # no state used
    meta = {"name": "job-0-x", "namespace": "rb", "uid": "u1"}
    pod: dict[str, Any] = {"metadata": {**meta, "annotations": drift.kwok_annotations(200)}}
    await usage.place(pod, "n1", 200)
    assert kube.sent == []  # what it declares already
    await usage.place(pod, "n1", 1200)
    [(path, body)] = kube.sent
    assert path == "/api/v1/namespaces/rb/pods/job-0-x"
    # The UID pins the pod: a new pod of the same name is refused, not patched.
    assert body == {"metadata": {"uid": "u1", "annotations": drift.kwok_annotations(1200)}}
    template = drift.replicaset("rb", drift.scenario(1).workloads[0], "s")["spec"]["template"]
    assert template["metadata"]["annotations"] == drift.kwok_annotations(
        drift.scenario(1).workloads[0].base
    )


def test_a_dev_nodes_load_annotations_are_its_background() -> None:
    def node(**annotations: str) -> dict[str, Any]:
        return {"metadata": {"name": "n", "annotations": annotations}}

    assert load_of(node(**{CPU_LOAD: "12.5", MEMORY_LOAD: "30"})) == (0.125, 0.3)
    assert load_of(node(**{CPU_LOAD: "150"})) == (1.0, 0.0)  # at most the whole node
    assert load_of(node()) == (0.0, 0.0)  # a KWOK node without them: only its pods' use
    assert load_of(node(**{CPU_LOAD: "lots"})) is None  # not a number: left as it was


def test_pods_that_want_more_than_their_node_has_share_it_as_a_saturated_node_does() -> None:
    assert drift.throttled(500, 3000, 3600) == 500  # they fit: all of it
    wants = [1400, 1400, 300]
    served = [drift.throttled(w, sum(wants), 3000) for w in wants]
    assert served == [1354, 1354, 290] and sum(served) <= 3000  # the node at 100%, not 103%
    assert drift.throttled(200, 400, 0) == 1  # a node its background fills
