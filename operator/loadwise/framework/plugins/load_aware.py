"""LoadAware: the load score (scoring.score_node), declared like any plugin. It reads the pod's
requests and controller (balance, and the anti-herding estimate: requests, or the usage learned
for its workload), the node's allocatable, and the requests and controllers of pods placed
there (requests share, and the estimates for pods a sample does not cover yet)."""

from __future__ import annotations

from ..plugin import Inputs, Plugin


class LoadAware(Plugin):
    name = "LoadAware"
    inputs = Inputs(pod=("requests", "owner"), node=("allocatable",), placed=("requests", "owner"))
