"""LoadAware: the load score (scoring.score_node), declared like any plugin. It reads the pod's
requests (balance and the anti-herding estimate), the node's allocatable, and the requests of
pods placed there (requests share, and the estimate for pods a sample does not cover yet)."""

from __future__ import annotations

from ..plugin import Inputs, Plugin


class LoadAware(Plugin):
    name = "LoadAware"
    inputs = Inputs(pod=("requests",), node=("allocatable",), placed=("requests",))
