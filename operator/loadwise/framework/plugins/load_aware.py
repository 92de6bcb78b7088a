"""LoadAware: the load score (scoring.score_node) and the hot pass-over, as a plugin.

It reads the pod's requests and controller (balance, and the anti-herding estimate: requests,
or the usage learned for its workload), the node's allocatable and its hot thresholds (its
pool's, by its labels, or its own annotation's: framework/heat.py), and the requests and
controllers of pods placed there (requests share, and the estimates for pods a sample does not
cover yet), and the pod's priority band (its thresholds, and with `usage: BandAndAbove` the
samples of its band's use: the basis carries both). Hot nodes get nothing while a cooler
feasible node exists; when every feasible node is hot, the least loaded by measured load is
taken, so no pod stays pending on load alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..plugin import Inputs, LoadPlugin, Signature
from ..scoring import LOAD_WEIGHT, NodeScore, score_node, weighted_load

if TYPE_CHECKING:
    from ..context import CycleContext
    from ..types import NodeInfo


class LoadAware(LoadPlugin):
    name = "LoadAware"
    inputs = Inputs(
        pod=("requests", "owner"),
        node=("allocatable", "labels", "hot_thresholds"),  # labels: the policy's pools
        placed=("requests", "owner"),
    )
    node_local = True  # the node's sample and the pods on it
    weight = LOAD_WEIGHT

    def sign(self, ctx: CycleContext) -> Signature:
        # The pod's priority band (its thresholds and its samples) is part of its verdicts.
        band = ctx.basis.band if ctx.policy_if_any is not None else None
        pod = ctx.pod
        return (pod.requests, pod.owner, band.name if band is not None else "")

    def load(self, ctx: CycleContext, node: NodeInfo) -> NodeScore:
        return score_node(ctx.pod, node, ctx.state, ctx.basis)

    def order(self, ctx: CycleContext, score: NodeScore) -> tuple[int, float]:
        # Cool nodes by score; hot ones by measured load itself: near or past the thresholds
        # the scores have faded to 0.
        if score.hot:
            return 1, weighted_load(ctx.policy, score)
        return 0, -score.score

    def pass_over(self, ctx: CycleContext, load: Sequence[NodeScore]) -> tuple[list[int], bool]:
        cool = [i for i, s in enumerate(load) if not s.hot]
        if cool or not load:
            return cool, False
        rng = ctx.rng
        least = min(range(len(load)), key=lambda i: (self.order(ctx, load[i]), rng.random()))
        return [least], True
