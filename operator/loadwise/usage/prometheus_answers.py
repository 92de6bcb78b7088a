"""Prometheus answers turned into node samples and per-pod usage, a slice at a time.

The source feeds each slice of series (sliced_json.py) to a NodeAnswer or PodAnswer and
awaits between slices and between the steps of `finish`, so that 15,000 nodes or 150,000 pods
never hold the event loop for long; `parse_response` and `parse_pod_response` do the same in one
call. Malformed series are skipped, never fatal; a malformed envelope raises PrometheusError.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from .cache import NodeSample, PodUsage, SourceError

RESOURCE_LABEL = "loadwise_resource"
NAMESPACE_LABEL = "namespace"
POD_LABEL = "pod"
STEP = 1000  # nodes or pods finished between two awaits


class PrometheusError(SourceError):
    pass


class NodeLabelMissing(PrometheusError):
    """Series came back, none with the node label: a stack whose labels the preset does not
    read (the source then looks at a raw series to say which preset fits)."""


def vector(payload: Any) -> list[Any]:
    """The result list of an instant-vector answer; a malformed envelope raises."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, dict) else None
        raise PrometheusError(f"query failed: {error or 'unexpected response'}")
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PrometheusError("query did not return an instant vector")
    result = data.get("result")
    return result if isinstance(result, list) else []


class NodeAnswer:
    """The combined node query's series, by node. `lag` is how far before the evaluation
    time a placement must be to show fully in the figures (rate window plus scrape interval):
    pods placed later are still estimated by the scorer. Of the other resources than cpu and
    memory, those named in `dimensions` become the sample's `extra`; a node needs cpu and
    memory."""

    def __init__(self, node_label: str, lag: float, dimensions: Collection[str] = ()) -> None:
        self.node_label = node_label
        self.lag = lag
        self.dimensions = dimensions
        self.samples: dict[str, NodeSample] = {}
        self._partial: dict[str, dict[str, float]] = {}
        self._stamps: dict[str, float] = {}
        self._unlabelled = 0  # series without the node label
        self._other_labels: set[str] = set()

    def add(self, items: Iterable[Any]) -> None:
        node_label, partial, stamps = self.node_label, self._partial, self._stamps
        for item in items:
            try:
                labels = item["metric"]
                if node_label not in labels and RESOURCE_LABEL in labels:
                    self._unlabelled += 1
                    self._other_labels.update(
                        k for k in labels if k not in (RESOURCE_LABEL, "__name__")
                    )
                    continue
                node = labels[node_label]
                resource = labels[RESOURCE_LABEL]
                stamp = float(item["value"][0])
                value = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if not isinstance(node, str) or not isinstance(resource, str):
                continue
            if resource not in ("cpu", "memory") and resource not in self.dimensions:
                continue
            if not math.isfinite(value) or not math.isfinite(stamp):
                continue
            partial.setdefault(node, {})[resource] = min(1.0, max(0.0, value))
            stamps[node] = min(stamp, stamps.get(node, stamp))

    def finish(self) -> Iterator[None]:
        """Build the samples into `self.samples`, yielding every STEP nodes."""
        if self._unlabelled and not self._partial:  # a wrong label, not stale samples: say so
            raise self._label_missing()
        samples, stamps, lag = self.samples, self._stamps, self.lag
        for done, (node, values) in enumerate(self._partial.items(), 1):
            cpu, memory = values.pop("cpu", None), values.pop("memory", None)
            if cpu is not None and memory is not None:
                samples[node] = NodeSample(cpu, memory, stamps[node], stamps[node] - lag, values)
            if done % STEP == 0:
                yield

    def _label_missing(self) -> NodeLabelMissing:
        have = (
            f"they have {', '.join(sorted(self._other_labels))}"
            if self._other_labels
            else f"they have no other label (the series read carry no {self.node_label!r} "
            "label, or the query drops it)"
        )
        return NodeLabelMissing(
            f"{self._unlabelled} series came back but none has the node label "
            f"{self.node_label!r} (LOADWISE_PROMETHEUS_NODE_LABEL): {have}; for "
            "kube-prometheus or kube-prometheus-stack, set LOADWISE_PROMETHEUS_PRESET (chart: "
            "metrics.preset) to its name"
        )


class PodAnswer:
    """The combined pod query's series (cpu in cores, memory in bytes), by (namespace, pod);
    pods lacking either resource are left out."""

    def __init__(self) -> None:
        self.usage: PodUsage = {}
        self._partial: dict[tuple[str, str], dict[str, float]] = {}

    def add(self, items: Iterable[Any]) -> None:
        partial = self._partial
        for item in items:
            try:
                labels = item["metric"]
                pod = (labels[NAMESPACE_LABEL], labels[POD_LABEL])
                resource = labels[RESOURCE_LABEL]
                value = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if not all(isinstance(part, str) and part for part in pod):
                continue
            if resource not in ("cpu", "memory") or not math.isfinite(value) or value < 0:
                continue
            partial.setdefault(pod, {})[resource] = value

    def finish(self) -> Iterator[None]:
        """Build the usage into `self.usage`, yielding every STEP pods."""
        usage, partial = self.usage, self._partial
        while partial:  # emptied as it goes: never a pause to free all of it at once
            for _ in range(min(STEP, len(partial))):
                pod, values = partial.popitem()
                if "cpu" in values and "memory" in values:  # a rate is never exact: rounded
                    usage[pod] = (round(values["cpu"] * 1000), round(values["memory"]))
            yield


def parse_response(
    payload: Any, node_label: str, lag: float, dimensions: Collection[str] = ()
) -> dict[str, NodeSample]:
    """A whole /api/v1/query answer (decoded) as samples, in one call."""
    answer = NodeAnswer(node_label, lag, dimensions)
    answer.add(vector(payload))
    for _ in answer.finish():
        pass
    return answer.samples


def parse_pod_response(payload: Any) -> PodUsage:
    """A whole per-pod answer (decoded) as usage, in one call."""
    answer = PodAnswer()
    answer.add(vector(payload))
    for _ in answer.finish():
        pass
    return answer.usage
