"""The framework runtime: one scheduling cycle, Filter -> Score -> NormalizeScore -> select,
over the profile's plugins. Pure: no I/O, no awaits. The score index (index.py) supplies
candidate nodes and cached verdicts to the same `select`; preemption's dry run asks the same
`refusal`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from . import spread
from .context import Basis, CycleContext
from .plugin import FilterPlugin
from .profile import DEFAULT_PROFILE, Profile
from .scoring import NodeScore, combine, normalize
from .types import NodeInfo, PodInfo
from .view import ClusterView, WhatIf


@dataclass(frozen=True, slots=True)
class Decision:
    node: str
    score: float  # normalised 0..100
    ranked: Sequence[tuple[float, NodeScore]]  # (combined score, load details), best first
    policy: str
    hot_skipped: int = 0  # feasible nodes passed over because they were hot
    all_hot: bool = False  # every feasible node was hot: the least loaded one was taken

    @property
    def chosen(self) -> NodeScore:
        return self.ranked[0][1]

    @property
    def runner_up(self) -> tuple[float, NodeScore] | None:
        return self.ranked[1] if len(self.ranked) > 1 else None


@dataclass(frozen=True, slots=True)
class Unschedulable:
    message: str
    reasons: Mapping[str, int]


def failure_message(total_nodes: int, reasons: Mapping[str, int]) -> str:
    """kube-scheduler's summary: "0/12 nodes are available: 5 Insufficient cpu, 7 ..."."""
    if total_nodes == 0:
        return "no nodes available to schedule pods"
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{total_nodes} nodes are available: {', '.join(parts)}."


@dataclass(frozen=True, slots=True)
class NodeDiagnosis:
    """One node's verdict for the pod: why it was refused, or its load score."""

    node: NodeInfo
    reasons: Sequence[str]  # the first failing filter's; empty when the node is feasible
    load: NodeScore | None = None  # when feasible


@dataclass(frozen=True, slots=True)
class Nominated:
    """Pods nominated to nodes (room is being made there for them by preemption) that the pod
    being scheduled must leave room for: per node, copies placed there
    (see `refusal_with_nominated`)."""

    state: WhatIf
    held: Mapping[str, Sequence[PodInfo]]


def schedule_one(
    pod: PodInfo,
    state: ClusterView,
    basis: Basis,
    profile: Profile = DEFAULT_PROFILE,
    nominated: Nominated | None = None,
) -> Decision | Unschedulable:
    """The full cycle: every filter and the load score on every node. A pod nominated to a
    node by its preemption takes that node if it fits there now, as kube-scheduler's
    evaluateNominatedNode does: the room was made for it."""
    if pod.invalid_reason:
        return invalid(pod)
    ctx = CycleContext(pod, state, basis)
    rejected = prefilter(ctx, profile)
    if rejected is not None:
        return rejected
    own = state.nodes.get(pod.nominated_node) if pod.nominated_node else None
    if own is not None and _reasons(ctx, own, profile, nominated) is None:
        return select(ctx, [own], [profile.load.load(ctx, own)], profile)
    return conclude(ctx, diagnose(ctx, profile, nominated), profile)


def prefilter(ctx: CycleContext, profile: Profile = DEFAULT_PROFILE) -> Unschedulable | None:
    """The PreFilter rejections (kube-scheduler's wording: "0/3 nodes are available:
    persistentvolumeclaim "data" not found."), the first plugin's in filter order."""
    if not profile.prefilters or not ctx.state.nodes:
        return None
    for plugin in profile.prefilters:
        message = plugin.prefilter(ctx)
        if message is not None:
            total = len(ctx.state.nodes)
            return Unschedulable(f"0/{total} nodes are available: {message}.", {message: total})
    return None


def invalid(pod: PodInfo) -> Unschedulable:
    return Unschedulable(f"pod cannot be scheduled: {pod.invalid_reason}", {})


def _reasons(
    ctx: CycleContext, node: NodeInfo, profile: Profile, nominated: Nominated | None
) -> list[str] | None:
    held = nominated.held.get(node.name) if nominated is not None else None
    if nominated is None or not held:
        failed = refusal(ctx, node, profile.filters)
    else:
        failed = refusal_with_nominated(ctx, node, nominated.state, profile.filters, held)
    return failed[1] if failed is not None else None


def diagnose(
    ctx: CycleContext, profile: Profile = DEFAULT_PROFILE, nominated: Nominated | None = None
) -> list[NodeDiagnosis]:
    """Every node's verdict and, where it passes, load score (explain shows these)."""
    out = []
    load = profile.load
    for node in ctx.state.nodes.values():
        failed = _reasons(ctx, node, profile, nominated)
        out.append(
            NodeDiagnosis(node, failed) if failed else NodeDiagnosis(node, (), load.load(ctx, node))
        )
    return out


def conclude(
    ctx: CycleContext, diagnoses: Sequence[NodeDiagnosis], profile: Profile = DEFAULT_PROFILE
) -> Decision | Unschedulable:
    """From every node's verdict: kube-scheduler's failure summary, or the decision. Shared
    by the full cycle and the score index's path for constrained pods."""
    reasons: Counter[str] = Counter()
    feasible, scores = [], []
    for diagnosis in diagnoses:
        if diagnosis.load is None:
            reasons.update(diagnosis.reasons)
        else:
            feasible.append(diagnosis.node)
            scores.append(diagnosis.load)
    if not feasible:
        return Unschedulable(failure_message(len(ctx.state.nodes), reasons), reasons)
    return select(ctx, feasible, scores, profile)


def select(
    ctx: CycleContext,
    feasible: Sequence[NodeInfo],
    load: Sequence[NodeScore],
    profile: Profile = DEFAULT_PROFILE,
    *,
    hot_feasible: int | None = None,
    scores: Sequence[tuple[float, Sequence[float]]] | None = None,
) -> Decision:
    """The one place a decision is made: the load plugin's pass-over, the preferences,
    NormalizeScore, and the pick with a random tie-break (equal nodes share a burst, as in
    kube-scheduler). `feasible` is every feasible node (their load scores in `load`), or, from
    the score index, a subset known to hold the best two: then `hot_feasible` counts all the
    feasible hot nodes, and `scores` gives the preferences normalised over all feasible nodes
    (one list per preference, aligned with `feasible`; empty when none applies)."""
    kept, all_hot = profile.load.pass_over(ctx, load)
    if scores is None and not all_hot:
        kept = _cool_for_preferences(ctx, [feasible[i] for i in kept], kept, profile)
    hot = len(load) - len(kept) if hot_feasible is None else hot_feasible
    if len(kept) < len(load):
        feasible = [feasible[i] for i in kept]
        load = [load[i] for i in kept]
        if scores:
            scores = [(weight, [values[i] for i in kept]) for weight, values in scores]
    components: list[tuple[float, Sequence[float]]] = [
        (float(profile.load.weight), normalize([s.score for s in load]))
    ]
    components.extend(preferences(ctx, feasible, profile) if scores is None else scores)
    totals = combine(components)
    rng = ctx.rng
    keyed = sorted(
        zip(totals, (rng.random() for _ in load), load, strict=True),
        key=lambda item: (-item[0], item[1]),
    )
    ranked = [(total, details) for total, _, details in keyed]
    ranked[0] = (ranked[0][0], aged(ranked[0][1], ctx))
    best_score, best = ranked[0]
    return Decision(best.node, best_score, ranked, ctx.policy.name, 0 if all_hot else hot, all_hot)


def _cool_for_preferences(
    ctx: CycleContext, nodes: Sequence[NodeInfo], kept: list[int], profile: Profile
) -> list[int]:
    """Of the nodes the load kept, those no preference finds hot (its devices), unless that
    leaves none: the same rule as hot nodes'."""
    for plugin in profile.scorers:
        hot = plugin.hot(ctx, nodes)
        if hot is None or not any(hot) or all(hot):
            continue
        nodes = [n for n, h in zip(nodes, hot, strict=True) if not h]
        kept = [i for i, h in zip(kept, hot, strict=True) if not h]
    return kept


def aged(score: NodeScore, ctx: CycleContext) -> NodeScore:
    """The score stands (the score index may have computed it earlier); the record shows the
    sample's age now."""
    if score.sample_age is None:
        return score
    return replace(score, sample_age=max(0.0, ctx.now - ctx.samples[score.node].timestamp))


def refusal(
    ctx: CycleContext, node: NodeInfo, filters: Sequence[FilterPlugin]
) -> tuple[FilterPlugin, list[str]] | None:
    """The first failing filter and its reasons (kube-scheduler stops there too; preemption
    asks the filter whether they can be lifted), or None if the node fits."""
    for plugin in filters:
        failed = plugin.filter(ctx, node)
        if failed:
            return plugin, failed
    return None


def preferences(
    ctx: CycleContext, nodes: Sequence[NodeInfo], profile: Profile = DEFAULT_PROFILE
) -> list[tuple[float, list[float]]]:
    """The preference plugins that apply to this pod, each normalised 0..100 over `nodes`."""
    out: list[tuple[float, list[float]]] = []
    for plugin in profile.scorers:
        scores = plugin.score(ctx, nodes)
        if scores is not None:
            out.append((plugin.weight_for(ctx), scores))
    return out


def refusal_with_nominated(
    ctx: CycleContext,
    node: NodeInfo,
    state: WhatIf,
    filters: Sequence[FilterPlugin],
    held: Sequence[PodInfo] = (),
    removed: Sequence[PodInfo] = (),
) -> tuple[FilterPlugin, list[str]] | None:
    """kube-scheduler's RunFilterPluginsWithNominatedPods: the filters with the pods nominated
    to the node (of equal or higher priority: `held`) counted there, then without them, so
    nobody takes the room being made for them and nobody relies on them either. `ctx` is
    the pod's context without them (held pods are copies placed on `node`); `removed` are
    the pods preemption's dry run has set aside from `node`."""
    if held:
        for other in held:
            state.put_back(other)
        here = spread.NominatedHere(node, held, removed)
        try:
            failed = refusal(CycleContext(ctx.pod, state, nominated=here), node, filters)
        finally:
            for other in held:
                state.set_aside(other.uid)
        if failed is not None:
            return failed
    return refusal(ctx, node, filters)
