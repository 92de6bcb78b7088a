"""bench/preemption's pure parts: the generator's promises (the preemptor fits nowhere, the
budgets' predicted status, deterministic per seed) and the rank tuple by which the harness
decides whether two answers on different nodes tie in kube-scheduler's order."""

from __future__ import annotations

import random
from collections import Counter

from loadwise_dev.benches.preemption import (
    Case,
    NodeSpec,
    Outcome,
    PdbSpec,
    PodSpec,
    PreemptorSpec,
    _fits,
    _selects,
    _split,
    compare,
    generate,
    plausible,
    rank,
)


def _cases(seed: int, n: int) -> list[Case]:
    rng = random.Random(seed)
    return [generate(rng, i) for i in range(n)]


def test_generated_cases_keep_their_promises() -> None:
    cases = _cases(3, 300)
    tags: Counter[str] = Counter()
    for case in cases:
        tags.update(case.tags)
        assert 2 <= len(case.nodes) <= 6
        assert not any(_fits(case, i) for i in range(len(case.nodes)))
        for i in range(len(case.nodes)):
            starts = [p.start for p in case.pods if p.node == i]
            assert len(starts) == len(set(starts)), "start times repeat within a node"
            assert sum(p.node == i for p in case.pods) <= case.nodes[i].max_pods
        for budget in case.pdbs:
            assert budget.matching == sum(_selects(budget.selector, p) for p in case.pods)
            assert budget.allowed == max(0, budget.matching - budget.min_available)
    for tag in ("pdb", "never", "unresolvable-only", "affinity", "spread", "twin"):
        assert tags[tag] >= 10, tags
    assert [c.describe() for c in _cases(3, 20)] == [c.describe() for c in cases[:20]]


def _pod(name: str, priority_class: str | None, start: int, node: int = 0) -> PodSpec:
    return PodSpec(name, node, priority_class, 500, 256, "web", "a", start)


def test_rank_counts_violations_over_all_lower_priority_pods_in_importance_order() -> None:
    # One budget allowing two disruptions over three pods: going through all of them most
    # important first (higher priority, then earlier start), victims or not, the third one
    # violates it, even when it is the only victim.
    pods = [_pod("a", "pe-mid", 10), _pod("b", "pe-low", 5), _pod("c", "pe-low", 20)]
    node = NodeSpec(4000, 8192, 10, "z0", "ssd", False)
    case = Case(
        0,
        [node],
        pods,
        [PdbSpec("pdb0", {"app": "web"}, 1, 3, 2)],
        PreemptorSpec("pe-top", 3000, 128, "db", "a"),
    )
    assert rank(case, 0, {"c"}) == (1, 100, 100, 1, 20)
    assert rank(case, 0, {"b"}) == (0, 100, 100, 1, 5)
    assert rank(case, 0, {"a", "c"}) == (1, 500, 600, 2, 10)
    assert plausible(case, 0, frozenset({"a", "c"}))
    assert not plausible(case, 0, frozenset())
    case.preemptor = PreemptorSpec("pe-mid", 3000, 128, "db", "a")  # `a` is not lower now
    assert not plausible(case, 0, frozenset({"a"}))


async def test_victims_on_a_node_no_longer_nominated_are_kept_apart() -> None:
    """Seed 7's twin case 20: kube-scheduler evicted p0 on node 0, then p4 on node 2 and
    nominated node 2. Its answer is node 2 with p4; p0 is its earlier preemption. The same from
    loadwise is a disagreement (env is not needed: nothing is run again)."""
    [case] = [c for c in _cases(7, 21) if c.index == 20]
    ks = _split("preempted", "c20-ks-n2", {"p0": "c20-ks-n0", "p4": "c20-ks-n2"})
    assert (ks.node, ks.victims, ks.elsewhere) == (2, {"p4"}, {"p0"})
    lw = Outcome("preempted", 2, frozenset({"p4"}))
    assert (await compare(None, case, ks, lw)).agree  # type: ignore[arg-type]
    twice = Outcome("preempted", 2, frozenset({"p4"}), elsewhere=frozenset({"p0"}))
    verdict = await compare(None, case, lw, twice)  # type: ignore[arg-type]
    assert (verdict.agree, verdict.how) == (False, "victims on another node too")
