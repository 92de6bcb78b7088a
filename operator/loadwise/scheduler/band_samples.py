"""The samples a priority band with `usage: BandAndAbove` is judged by: per node, what its
pods of the band's priority or higher use (the metrics source's latest per-pod figures), as a
share of the node's allocatable, in place of the node's whole use (framework/heat.band_load).

Made once per band and refresh (a pass over the placed pods), and kept as one object until the
next refresh: the score index keys its heaps on the samples object. A source whose per-pod
figures are unknown (learning off, or its pod request failing since start) leaves the node's
own samples: the band is then judged by the node's whole use, the cautious side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..framework.heat import band_load
from ..framework.types import NodeInfo, PodInfo
from ..policies.priority_bands import PriorityBand
from ..resources import CPU, MEMORY
from ..usage.cache import MetricsCache, NodeSample

Shares = dict[str, list[tuple[int, float, float]]]  # node -> (priority, cpu, memory) per pod


class BandSamples:
    def __init__(self) -> None:
        # (cache, band's minPriority) -> (node samples, refreshes, band samples)
        self._made: dict[tuple[int, int], tuple[object, int, Mapping[str, NodeSample]]] = {}
        self._shares: dict[int, tuple[int, Shares]] = {}  # cache -> (refreshes, shares)

    def judged(
        self,
        band: PriorityBand,
        samples: Mapping[str, NodeSample],
        cache: MetricsCache,
        pods: Mapping[str, PodInfo],
        nodes: Mapping[str, NodeInfo],
    ) -> Mapping[str, NodeSample]:
        """`samples` as `band`'s pods are judged by them (the same object when the band is
        judged by the node's whole use)."""
        if band.usage != "BandAndAbove" or not cache.pod_usage:
            return samples
        key = (id(cache), band.min_priority)
        made = self._made.get(key)
        if made is not None and made[0] is samples and made[1] == cache.refreshes:
            return made[2]
        shares = self._pod_shares(cache, pods, nodes)
        out = {}
        for name, sample in samples.items():
            cpu, memory = band_load(band, (sample.cpu, sample.memory), shares.get(name, ()))
            out[name] = replace(sample, cpu=cpu, memory=memory)
        self._made[key] = (samples, cache.refreshes, out)
        return out

    def _pod_shares(
        self, cache: MetricsCache, pods: Mapping[str, PodInfo], nodes: Mapping[str, NodeInfo]
    ) -> Shares:
        """Each placed pod's measured use as shares of its node, once per refresh."""
        known = self._shares.get(id(cache))
        if known is not None and known[0] == cache.refreshes:
            return known[1]
        usage = cache.pod_usage
        shares: Shares = {}
        for pod in list(pods.values()):
            used = usage.get((pod.namespace, pod.name))
            node = nodes.get(pod.node_name) if used is not None else None
            if used is None or node is None:
                continue
            cpu, memory = node.allocatable.get(CPU, 0), node.allocatable.get(MEMORY, 0)
            if cpu > 0 and memory > 0:
                shares.setdefault(pod.node_name, []).append(
                    (pod.priority, used[0] / cpu, used[1] / memory)
                )
        self._shares[id(cache)] = (cache.refreshes, shares)
        return shares
