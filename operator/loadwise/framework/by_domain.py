"""The score index's fast paths by domain, for pods ranked by load and one preference that
scores every node of a topology domain alike (ScheduleAnyway spreading, preferred inter-pod
affinity by zone): the preference plugin declares the path (`fast_path`), and each domain's two
least loaded cool nodes become the candidates the cycle's `select` ranks, with the preference's
shares normalised over every domain present. Each function returns None when its path does not
apply; the index then visits every node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from . import podaffinity, spread
from .context import CycleContext
from .plugin import (
    AFFINITY_BY_DOMAIN,
    HOSTNAME_APART,
    SPREAD_BY_DOMAIN,
    UNSIGNABLE,
    FilterPlugin,
    ScorePlugin,
)
from .plugins.inter_pod_affinity import affinity_preference, preference_share
from .plugins.topology_spread import soft_spread
from .shapes import Domain, Domains, ShapeHeap, domains_of
from .view import PodMatcher


class ByDomain(NamedTuple):
    domains: Domains
    shares: Mapping[Domain, float]  # the preference's normalised score per feasible domain
    weight: float
    hot: int  # feasible hot nodes (passed over)


def spread_by_domain(
    shape: ShapeHeap,
    ctx: CycleContext,
    preferring: Sequence[ScorePlugin],
    inter_pod: Sequence[FilterPlugin],
) -> ByDomain | None:
    """A pod that every node passing the node-local filters fits, ranked by load and
    ScheduleAnyway spreading alone: the spread scores' normalisation (lowest and highest
    raw score, domains, nodes considered) comes from the shape's counts per domain, where a
    domain is a combination of topology values and, for hostname constraints, matching
    pods on the node itself. A domain's nodes share a spread score, so only its two least
    loaded ones can be chosen or runner-up. The pod may have required anti-affinity by
    hostname too (a Deployment's replicas kept apart): its terms' matching pods on the node
    itself join the domain, and domains holding any are refused as a whole. None when this
    does not apply (the caller visits every node)."""
    pod, soft = ctx.pod, soft_spread(ctx)
    if soft is None or shape.feasible == shape.hot:  # all hot: the full path decides
        return None
    apart = apart_only(ctx, inter_pod)
    if apart is None:
        return None  # an inter-pod filter may refuse nodes: the feasible set is not known
    if len(preferring) != 1 or preferring[0].fast_path != SPREAD_BY_DOMAIN:
        return None
    weight = preferring[0].weight_for(ctx)
    spread_keys = {c.topology_key for c in soft.constraints}
    keys = tuple(sorted(spread_keys | ({spread.HOSTNAME} if apart else set())))
    own = tuple(
        spread.SpreadMatch(pod.namespace, c.selector)
        if spread.matches_anything(c.selector)
        else None
        for c in soft.constraints
        if c.topology_key == spread.HOSTNAME
    )
    domains = domains_of(shape, keys, own + apart, ctx)
    require_all = not soft.system_default
    width, host = len(keys), keys.index(spread.HOSTNAME) if apart else -1
    required = [i for i, key in enumerate(keys) if key in spread_keys]
    live = {
        domain: n
        for domain, n in domains.counts.items()
        if n > 0 and not (apart and domain[host] is True and any(domain[width + len(own) :]))
    }
    if not live:
        return None  # anti-affinity refuses every cool node: the full path decides
    counted = [
        (domain, n)
        for domain, n in live.items()
        if not (require_all and any(domain[i] is None or domain[i] is False for i in required))
    ]
    values = [
        ()
        if c.topology_key == spread.HOSTNAME
        else {_value(domain[keys.index(c.topology_key)]) for domain, _ in counted}
        for c in soft.constraints
    ]
    scorer = spread.SoftScorer(pod, ctx.state, soft, values, sum(n for _, n in counted))
    raw_of = {
        domain: scorer.raw_with(
            _labels(keys, domain[:width]), _counts(domain[width : width + len(own)])
        )
        for domain in live
    }
    raws = [raw for raw in raw_of.values() if raw is not None]
    low, high = min(raws, default=0), max(raws, default=0)
    # A domain's nodes share a spread score (0 where ignored, missing a key of the pod's
    # own constraints): its two least loaded are enough.
    shares = {domain: spread.normalized(raw, low, high) for domain, raw in raw_of.items()}
    hot = shape.hot
    if apart:  # hot nodes passed over are the feasible ones only: not those refused
        state = ctx.state
        refused = {
            name
            for matcher in apart
            for name, n in state.matching(matcher).items()
            if n and name in shape.hot_names and spread.HOSTNAME in state.nodes[name].labels
        }
        hot -= len(refused)
    return ByDomain(domains, shares, weight, hot)


def apart_only(
    ctx: CycleContext, inter_pod: Sequence[FilterPlugin]
) -> tuple[PodMatcher, ...] | None:
    """() when no inter-pod filter applies to the pod; when the only one that does is
    anti-affinity by hostname (the pod's own required terms, placed pods' terms aimed at
    it, or both: no affinity, no spread filter), matchers of the pods on a node that make
    it refuse the pod: those its terms match, those carrying a term that matches it. None
    otherwise."""
    signing = [f for f in inter_pod if f.sign(ctx) is UNSIGNABLE]
    if not signing:
        return ()
    pod, state = ctx.pod, ctx.state
    if len(signing) != 1 or signing[0].fast_path != HOSTNAME_APART:
        return None
    if pod.affinity_terms:
        return None
    if any(t.topology_key != spread.HOSTNAME for t in pod.anti_affinity_terms):
        return None
    own = [podaffinity.TermsMatch((t,)) for t in pod.anti_affinity_terms]
    if any(m.reads_namespace_labels for m in own):
        return None  # a namespace relabel changes matches without touching any node
    aimed = [
        term
        for term, per_value in state.anti_affinity_domains()
        if per_value and term.matches(pod.namespace, pod.labels, state.namespaces)
    ]
    if any(t.topology_key != spread.HOSTNAME for t in aimed):
        return None
    matchers: tuple[PodMatcher, ...] = (*own, *(podaffinity.CarriesTerm(t) for t in aimed))
    return matchers or None


def affinity_by_domain(
    shape: ShapeHeap,
    ctx: CycleContext,
    preferring: Sequence[ScorePlugin],
    inter_pod: Sequence[FilterPlugin],
) -> ByDomain | None:
    """A pod that every node passing the node-local filters fits, ranked by load and
    preferred inter-pod affinity alone, by topology keys other than hostname: a node's
    affinity score depends only on its values of those keys, so the cool nodes are grouped
    by them (the shape's domains) and each group's two least loaded are enough, the
    normalisation coming from the groups present. None when this does not apply."""
    scores = affinity_preference(ctx)
    if scores is None or shape.feasible == shape.hot:
        return None
    if len(preferring) != 1 or preferring[0].fast_path != AFFINITY_BY_DOMAIN:
        return None
    if spread.HOSTNAME in scores or any(f.sign(ctx) is UNSIGNABLE for f in inter_pod):
        return None
    keys = tuple(sorted(scores))
    domains = domains_of(shape, keys, (), ctx)
    raw_of = {
        domain: sum(
            scores[key].get(value, 0)
            for key, value in zip(keys, domain, strict=True)
            if isinstance(value, str)
        )
        for domain, n in domains.counts.items()
        if n > 0
    }
    low, high = min(raw_of.values(), default=0), max(raw_of.values(), default=0)
    shares = {domain: preference_share(raw, low, high) for domain, raw in raw_of.items()}
    weight = preferring[0].weight_for(ctx)
    return ByDomain(domains, shares, weight, shape.hot)


def _value(value: str | bool | int | None) -> str:
    """A node's value of a non-hostname key, "" when it lacks the key (as spread scores it)."""
    return value if isinstance(value, str) else ""


def _counts(domain: Domain) -> list[int]:
    """The own matching pods part of a domain."""
    return [v if isinstance(v, int) else 0 for v in domain]


def _labels(keys: tuple[str, ...], domain: Domain) -> dict[str, str]:
    """Labels of a node of this domain (from its values of `keys`; hostname present: "")."""
    return {
        key: value if isinstance(value, str) else ""
        for key, value in zip(keys, domain, strict=True)
        if value is not None and value is not False
    }
