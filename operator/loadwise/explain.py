"""`loadwise explain NS/POD`: the per-node table behind a decision, as a dry run.

It lists nodes, pods, namespaces and policies, refreshes the configured metrics sources once
(same LOADWISE_* settings as the operator), and runs the operator's own cycle for the pod
without binding: why each node was refused, each feasible node's load figures and score, and
the choice. A pod that is already bound is explained as if it were being placed now.

When the policy's metrics source cannot be read with these settings (run from a laptop, the
default Prometheus URL is a cluster-internal name), every node is scored by requests alone,
which is not what the operator sees: the output then starts with a WARNING line saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from .components import build
from .config import Config
from .framework.context import CycleContext
from .framework.cycle import Decision, conclude, diagnose, prefilter
from .framework.heat import thresholds_for, thresholds_text
from .framework.plugin import NoPreemption
from .framework.plugins.gang_scheduling.placement import member_order, what_if_pod_group
from .framework.scoring import UsageProfiles, pod_estimate
from .framework.types import PodInfo, parse_pod
from .kube.informer import Informer
from .kube.transport import ApiError
from .logs import one_line
from .policies.policy import GROUP, PLURAL, VERSION, Policy
from .policies.priority_bands import PriorityBand
from .preflight import AccessError, connect
from .scheduler.rebalancing.move_store import StoreError, ledger_store
from .scheduler.rebalancing.rebalancer import Rebalancer
from .scheduler.scheduler import Scheduler
from .scheduler.usage_sources import GROUP_PEAK
from .usage.cache import NodeSample


@dataclass(frozen=True)
class Row:
    node: str
    verdict: str  # "chosen", "feasible", "hot", or the filter's reason
    score: float | None = None
    cpu: float | None = None
    memory: float | None = None
    basis: str = ""


def explain_rows(
    scheduler: Scheduler, config: Config, pod: PodInfo, now: float
) -> tuple[list[Row], str]:
    """Every node's verdict for `pod`, and a one-line summary of the decision."""
    state = scheduler.state
    policy = scheduler.policies.for_pod(
        pod.labels, state.namespaces.get(pod.namespace), pod.scheduler_name
    )
    in_group = scheduler.pod_groups.applies(pod)
    judged = scheduler.usage.basis(policy, now, random.Random(0), pod.priority, in_group)
    ctx = CycleContext(pod, state, judged)
    profile = scheduler.profile  # with the scheduler's own plugins (devices, volumes, gates)
    diagnoses = diagnose(ctx, profile)
    result = prefilter(ctx, profile) or conclude(ctx, diagnoses, profile)
    totals = {s.node: total for total, s in result.ranked} if isinstance(result, Decision) else {}
    rows = []
    for diagnosis in diagnoses:
        name, load = diagnosis.node.name, diagnosis.load
        if load is None:
            rows.append(Row(name, "; ".join(diagnosis.reasons)))
            continue
        basis = f"metrics {load.sample_age:.0f}s old" if load.sample_age is not None else "requests"
        if isinstance(result, Decision) and name == result.node:
            verdict = "chosen"
        elif name not in totals:  # feasible, but the load plugin passed it over
            verdict = "hot: passed over"
            band = ctx.basis.band
            own = thresholds_for(policy, diagnosis.node, band)[3]  # a band's, pool's, node's
            if own:
                verdict = f"{verdict}: {thresholds_text(policy, diagnosis.node, band)}"
        else:
            verdict = "feasible"
        rows.append(Row(name, verdict, totals.get(name), load.cpu, load.memory, basis))
    rows.sort(key=lambda r: (r.verdict != "chosen", r.score is None, -(r.score or 0), r.node))
    if isinstance(result, Decision):
        summary = f"{pod.key} -> {result.node} (policy {policy.name}, score {result.score:.0f})"
    else:
        summary = f"{pod.key} cannot be scheduled (policy {policy.name}): {result.message}"
    summary = f"{summary}\n{estimate_line(pod, policy, ctx.learned)}"
    if (band := ctx.basis.band) is not None:
        summary = f"{summary}\n{band_line(scheduler, policy, band, ctx.samples)}"
    metrics = policy.spec.metrics
    cache = scheduler.usage.cache_for(policy)
    if metrics.aggregation != "latest" and cache is not None:
        window = float(metrics.window_seconds)
        summary = f"{summary}\nload: {metrics.aggregation}; {cache.window_note(window)}"
    elif cache is not None and in_group:  # a pod group's member judges nodes by their peaks
        note = cache.window_note(GROUP_PEAK)
        summary = (
            f"{summary}\nload: max over {GROUP_PEAK:.0f}s, with the pods on each node now"
            f" (a pod group's member); {note}"
        )
    held = scheduler.profile.why_held(pod.uid)  # a PreEnqueue plugin: never tried yet
    group = None if held is not None else group_line(scheduler, pod, now)
    if held is not None:
        summary = f"{summary}\nnot queued yet, held by {held}"
    elif group is not None:
        summary = f"{summary}\n{group}"
    if not isinstance(result, Decision) and not pod.invalid_reason:
        line = (
            preemption_line(scheduler, pod, policy)
            if scheduler.preempts
            else "preemption: off (LOADWISE_PREEMPTION=false)"
        )
        summary = f"{summary}\n{line}"
    warning = metrics_warning(scheduler, policy, config)
    return rows, f"{warning}\n{summary}" if warning else summary


def band_line(
    scheduler: Scheduler, policy: Policy, band: PriorityBand, samples: Mapping[str, NodeSample]
) -> str:
    """The pod's priority band: its thresholds and what its nodes' load is read from."""
    head = f"{band.describe()}: hot at {thresholds_text(policy, None, band)}"
    if band.usage != "BandAndAbove":
        return f"{head}, judged by each node's whole use"
    if samples is scheduler.usage.samples_for(policy):
        return f"{head}; per-pod usage unknown, so judged by each node's whole use"
    return f"{head}, judged by what pods of priority >= {band.min_priority} use on each node"


def group_line(scheduler: Scheduler, pod: PodInfo, now: float) -> str | None:
    """A pod group member's group: what it waits for, or the group's decision as a dry run (the
    cycle the operator would run for all of its pending members now)."""
    pod_groups, state = scheduler.pod_groups, scheduler.state
    key = pod.group
    if key is None or not pod_groups.applies(pod):
        return None
    group = pod_groups.groups.get(key)
    if group is None or not pod_groups.ready(key):
        return f"pod group: {pod_groups.why_waiting(key)}"
    members = {u: p for u, p in pod_groups.pending.get(key, {}).items() if u not in state.pods}
    members[pod.uid] = pod
    first = min(members.values(), key=member_order)
    policy = scheduler.policies.for_pod(
        first.labels, state.namespaces.get(first.namespace), first.scheduler_name
    )
    basis = scheduler.usage.basis(policy, now, random.Random(0), group=True)
    scheduled = state.pod_group_members[key]
    decision = what_if_pod_group(
        list(members.values()), state, basis, group.minimum, scheduled, scheduler.profile
    )
    head = f"pod group {key} (minimum {group.minimum}, {scheduled} scheduled)"
    if not decision.reached:
        return f"{head}: {decision.message}"
    placed = ", ".join(f"{p.name} -> {d.node}" for p, d in decision.placed)
    return f"{head}: placed whole now: {placed}"


def preemption_line(scheduler: Scheduler, pod: PodInfo, policy: Policy) -> str:
    """What the operator's PostFilter would do for this pod now (a dry run: nothing is
    evicted)."""
    outcome = scheduler.post_filter(pod, policy, scheduler.preemption.held_for(pod))
    if outcome is None:
        return "preemption: no placed pod has a lower priority than this pod"
    if isinstance(outcome, NoPreemption):
        return f"preemption: none: {outcome.message}"
    victims = ", ".join(v.key for v in outcome.victims)
    return (
        f"preemption: would evict {len(outcome.victims)} pod(s) on {outcome.node} "
        f"({outcome.pdb_violations} disruption budget(s) violated): {victims}"
    )


def metrics_warning(scheduler: Scheduler, policy: Policy, config: Config) -> str | None:
    """A WARNING line when the policy's metrics source gave nothing here: the figures below are
    then requests alone, and the operator (with its own settings) may well see load."""
    source = policy.spec.metrics.source
    cache = scheduler.usage.cache_for(policy)
    consequence = (
        f"every node below is scored by requests alone, which is not what the operator sees "
        f"if it reads {source}; run explain with the operator's LOADWISE_* settings"
    )
    if cache is None:
        return (
            f"WARNING: policy {policy.name} reads metrics from {source}, which is not enabled "
            f"in LOADWISE_METRICS_SOURCES here: {consequence}"
        )
    if cache.last_success is None:
        settings = next(s for s in config.enabled_sources() if s.source_name == source)
        hint = f" ({settings.reach_hint()})" if settings.reach_hint() else ""
        return (
            f"WARNING: cannot read metrics from {source} ({settings.where()}): "
            f"{cache.last_error}; {consequence}{hint}"
        )
    return None


def settings_line(config: Config) -> str:
    """Which settings judged the metrics above: this command's own LOADWISE_* environment,
    which need not be the operator's (its Deployment sets them)."""
    sources = ", ".join(config.metrics.enabled) or "none"
    parts = [f"metrics sources {sources}"]
    parts.extend(
        described
        for source in config.enabled_sources()
        if (described := source.describe(config.metrics.lag)) != source.source_name
    )
    parts.append(f"preemption {'on' if config.scheduling.preemption else 'off'}")
    return (
        "settings: this command's LOADWISE_* environment, not read from the operator (set the "
        f"same to see what it sees): {'; '.join(parts)}"
    )


def estimate_line(pod: PodInfo, policy: Policy, learned: UsageProfiles | None) -> str:
    """What the pod is expected to add to a node before a sample shows it, and why."""
    spec = policy.spec
    factors = (spec.placement_estimate, spec.memory_estimate)
    if factors == (0, 0):
        return f"strategy {spec.strategy}; no placement estimate (both factors are 0)"
    use = learned if spec.learned_estimate else None
    cpu, memory = pod_estimate(pod, factors, use)
    known = use is not None and pod.workload is not None and use.estimate(pod.workload)
    ratio = use.ratio(pod.namespace) if use is not None and not known else None
    if known:
        basis = f"learned from running pods of {pod.workload}"
    elif ratio is not None:
        basis = (
            f"{ratio[0]:.2f} x cpu, {ratio[1]:.2f} x memory requests: what pods of namespace "
            f"{pod.namespace} use of theirs, learned"
        )
    else:
        basis = (
            f"{factors[0]:g} x cpu, {factors[1]:g} x memory requests "
            "(missing requests count as 100m/200Mi)"
        )
    return (
        f"strategy {spec.strategy}; estimate {cpu / 1000:.2f} cpu, {memory / 2**20:.0f}Mi: {basis}"
    )


async def relief_lines(rebalancer: Rebalancer, node: str, now: float) -> list[str]:
    """Per policy with rebalance enabled: the node's load figures by it, and what relieving
    the node would move where (the operator relieves it only after hotRefreshes in a row)."""
    scheduler = rebalancer.scheduler
    enabled = [p for p in scheduler.policies.policies() if p.spec.rebalance.enabled]
    if not enabled:
        return [f"node {node}: no SchedulingPolicy has spec.rebalance.enabled: nothing is moved"]
    lines = []
    for policy in enabled:
        spec = policy.spec
        sample = scheduler.usage.samples_for(policy).get(node)
        limits = thresholds_text(policy, scheduler.state.nodes.get(node))
        if sample is None:
            lines.append(f"node {node}, policy {policy.name}: no sample from its source")
            continue
        figures = f"cpu {sample.cpu:.0%} mem {sample.memory:.0%} ({spec.metrics.aggregation})"
        relief = await rebalancer.plan(policy, node, now)
        if not relief.over:
            lines.append(
                f"node {node}, policy {policy.name}: {figures}, under its hot thresholds "
                f"({limits}): not relieved"
            )
            lines.extend(moved_lines(rebalancer, node, now))
            continue
        lines.append(
            f"node {node}, policy {policy.name}: {figures}, over its hot thresholds ({limits});"
            f" relieved once so at {spec.rebalance.hot_refreshes} refreshes in a row "
            f"({spec.rebalance.mode})"
        )
        if not relief.moves:
            lines.append(f"  nothing would move: {relief.refused}")
        lines.extend(moved_lines(rebalancer, node, now))
        for move in relief.moves:
            chosen = move.decision.chosen
            lines.append(
                f"  would move {move.pod.key} -> {move.target} "
                f"(cpu {chosen.cpu:.0%} mem {chosen.memory:.0%} with it)"
            )
    return lines


def moved_lines(rebalancer: Rebalancer, node: str, now: float) -> list[str]:
    """What rebalancing moved off or onto the node in the last hour (its ledger)."""
    out = []
    for r in rebalancer.moves:
        if node not in (r.source, r.target):
            continue
        ago = f"{(now - r.at) / 60:.0f} min ago"
        if r.source == node:
            cool = max(0.0, r.cool_until - now)
            out.append(
                f"  moved {r.pod} off it to {r.target} {ago} ({r.state}); its workload stays "
                f"off it for {cool:.0f}s more"
            )
        else:
            held = "taken" if r.claimed_by else f"held {max(0.0, r.reserve_until - now):.0f}s more"
            out.append(f"  room for the replacement of {r.pod} (from {r.source}, {ago}): {held}")
    return out


def render(rows: list[Row], summary: str) -> str:
    lines = [summary, f"{'NODE':<24} {'SCORE':>6} {'CPU':>6} {'MEM':>6} {'BASIS':<20} VERDICT"]
    for r in rows:
        score = f"{r.score:6.1f}" if r.score is not None else f"{'-':>6}"
        cpu = f"{r.cpu:6.0%}" if r.cpu is not None else f"{'-':>6}"
        mem = f"{r.memory:6.0%}" if r.memory is not None else f"{'-':>6}"
        lines.append(f"{r.node:<24} {score} {cpu} {mem} {r.basis:<20} {r.verdict}")
    return "\n".join(lines)


async def _explain(target: str, config: Config) -> str:
    namespace, _, name = target.partition("/")
    if not name:
        raise ValueError("expected NAMESPACE/POD or node/NAME")
    api = await connect(pool_size=8)
    built = build(config, api, dry_run=True, pool_size=8)  # the operator's own parts
    scheduler, parts, transport = built.scheduler, built.informers, built.transport
    try:
        for informer in (parts.namespaces, parts.nodes, *parts.workloads, *parts.storage):
            # workloads: Services and controllers, for default spreading; storage: claims,
            # volumes, classes and CSI objects, for the volume plugins
            await informer.list()
        for optional in parts.optional:  # PodGroups: where served and readable
            try:
                await optional.informer.list()
            except ApiError:
                optional.on_absent()
        found: list[Mapping[str, Any]] = []

        def pod_event(kind: str | None, raw: Mapping[str, Any]) -> None:
            meta = raw.get("metadata") or {}
            if (meta.get("namespace"), meta.get("name")) == (namespace, name):
                found.append(raw)
            scheduler.on_pod_event(kind, raw)

        await Informer(transport, "/api/v1/pods", pod_event).list()
        if namespace == "node" and name not in scheduler.state.nodes:
            raise LookupError(f"node {name} not found")
        if namespace != "node" and not found:
            raise LookupError(f"pod {target} not found")

        def policy_event(_: str | None, raw: Mapping[str, Any]) -> None:
            with contextlib.suppress(ValueError):  # the operator ignores invalid ones too
                scheduler.policies.apply(raw["metadata"]["name"], raw.get("spec"))

        await Informer(transport, f"/apis/{GROUP}/{VERSION}/{PLURAL}", policy_event).list()
        if parts.budgets is not None:
            with contextlib.suppress(ApiError):  # not allowed to list them: none is weighed
                await parts.budgets.list()
        for cache in scheduler.usage.caches.values():
            await cache.refresh()
            await cache.backfilled_windows()  # the operator's windows are full: so are these
        if namespace == "node":
            rebalancer = Rebalancer(
                transport, scheduler.binder, scheduler, ledger_store(transport, config)
            )
            with contextlib.suppress(StoreError):  # not allowed to read it: no moves shown
                await rebalancer.store.load(rebalancer.moves)
            lines = await relief_lines(rebalancer, name, time.time())
            return "\n".join([*lines, settings_line(config)])
        pod = parse_pod(found[0])
        scheduler.state.remove_pod(pod.uid)  # explain it as if it were being placed now
        prepared = (
            await scheduler.profile.prepare(pod) if scheduler.profile.needs_prepare(pod) else None
        )
        rows, summary = explain_rows(scheduler, config, pod, time.time())
        if prepared is not None:
            summary = f"{summary}\n{prepared}"
        chosen = next((r.node for r in rows if r.verdict == "chosen"), None)
        if chosen is not None:
            summary = "\n".join([summary, *scheduler.profile.describe_prepared(pod, chosen)])
        return f"{render(rows, summary)}\n{settings_line(config)}"
    finally:
        await scheduler.close()
        for cache in scheduler.usage.caches.values():
            await cache.close()
        await transport.close()
        await api.close()


def main(target: str, flags: Mapping[str, Any] | None = None) -> int:
    try:
        config = Config.from_env(flags=flags)
        print(asyncio.run(_explain(target, config)))
    except (ValueError, LookupError, AccessError, ApiError) as exc:
        print(f"loadwise explain: {exc}", file=sys.stderr)
        return 2
    except (OSError, aiohttp.ClientError, TimeoutError) as exc:  # no answer from the server
        server = os.environ.get("KUBECONFIG") or "~/.kube/config"
        print(
            f"loadwise explain: cannot reach the API server of {server}: {one_line(exc)}",
            file=sys.stderr,
        )
        return 2
    return 0
