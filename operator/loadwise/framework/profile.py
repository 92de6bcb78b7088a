"""Profile: the registered plugins, and everything derived from what they declare.

What a decision depends on is declared once, by the plugin that depends on it (plugin.py); the
score index's shapes, whether a pod can be batched, which node updates and pod changes can make
a rejected pod fit, and which changes of placed pods must be re-accounted all come from here.
The points around Filter (PreEnqueue, PostFilter, Reserve, Unreserve, PreBind) run here too, in
the plugins' order, with kube-scheduler's rules and wording: no caller names a plugin.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..policies.policy import Policy
from .context import CycleContext
from .plugin import (
    UNSIGNABLE,
    CycleState,
    FilterPlugin,
    LoadPlugin,
    NoPreemption,
    Plugin,
    PostFilterPlugin,
    PreBindPlugin,
    Preemption,
    PreEnqueuePlugin,
    PreparePlugin,
    ReservePlugin,
    ScorePlugin,
)
from .plugins import DEFAULT_PLUGINS
from .types import NodeInfo, PodInfo

log = logging.getLogger(__name__)
Shape = tuple[Any, ...]
DECIDING = (FilterPlugin, ScorePlugin, LoadPlugin)  # the plugins a decision depends on
POINTS = (
    *DECIDING,
    PreEnqueuePlugin,
    PreparePlugin,
    PostFilterPlugin,
    ReservePlugin,
    PreBindPlugin,
)


def _union(groups: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(field for group in groups for field in group))


def _check_declarations(plugin: Plugin) -> None:
    """A plugin that decides must say whether it is node-local, and a score plugin cannot be
    (plugin.py); every plugin implements at least one extension point."""
    kind = type(plugin).__name__
    if not isinstance(plugin, POINTS):
        raise ValueError(f"plugin {kind} implements no extension point")
    if not isinstance(plugin, DECIDING):
        return
    if not isinstance(getattr(type(plugin), "node_local", None), bool):
        raise ValueError(f"plugin {kind} does not declare node_local (True or False)")
    if isinstance(plugin, ScorePlugin) and plugin.node_local:
        raise ValueError(
            f"score plugin {kind} declares node_local = True: the score index orders batched "
            "pods by load alone and would ignore it; a score plugin is not node-local"
        )


class Profile:
    def __init__(self, plugins: Sequence[Plugin] = DEFAULT_PLUGINS) -> None:
        self.plugins = tuple(plugins)
        for plugin in self.plugins:
            _check_declarations(plugin)
        self.filters = tuple(p for p in self.plugins if isinstance(p, FilterPlugin))
        self.local_filters = tuple(f for f in self.filters if f.node_local)
        self.inter_pod_filters = tuple(f for f in self.filters if not f.node_local)
        self.prefilters = tuple(
            f for f in self.filters if type(f).prefilter is not FilterPlugin.prefilter
        )
        self.narrowing = tuple(
            f for f in self.filters if type(f).only_hostnames is not FilterPlugin.only_hostnames
        )
        self.scorers = tuple(p for p in self.plugins if isinstance(p, ScorePlugin))
        loads = [p for p in self.plugins if isinstance(p, LoadPlugin)]
        if len(loads) > 1:
            raise ValueError(f"a profile takes one load plugin, not {len(loads)}")
        self._load = loads[0] if loads else None
        deciding = [p for p in self.plugins if isinstance(p, DECIDING)]
        self._local = tuple(p for p in deciding if p.node_local)
        self._not_local = tuple(p for p in deciding if not p.node_local)
        self._placement = tuple(p for p in self.plugins if p.helped_by_placement)
        self.pre_enqueuers = tuple(p for p in self.plugins if isinstance(p, PreEnqueuePlugin))
        self.preparers = tuple(p for p in self.plugins if isinstance(p, PreparePlugin))
        self.post_filters = tuple(p for p in self.plugins if isinstance(p, PostFilterPlugin))
        self.reservers = tuple(p for p in self.plugins if isinstance(p, ReservePlugin))
        self.prebinders = tuple(p for p in self.plugins if isinstance(p, PreBindPlugin))
        self.pod_fields = _union(p.inputs.pod for p in self.plugins)
        self.node_fields = _union(p.inputs.node for p in self.plugins)
        self.placed_fields = _union(p.inputs.placed for p in self.plugins)
        self.reads_namespaces = any(p.inputs.namespaces for p in self.plugins)

    def with_plugins(self, plugins: Sequence[Plugin]) -> Profile:
        """This profile and `plugins` after it (the scheduler's halves that write)."""
        return Profile((*self.plugins, *plugins)) if plugins else self

    @property
    def load(self) -> LoadPlugin:
        """The load plugin: the load score and the hot pass-over."""
        if self._load is None:
            raise ValueError("this profile has no load plugin, so it cannot score nodes")
        return self._load

    # --- batching ----------------------------------------------------------------------------
    def shape(self, ctx: CycleContext, policy: Policy) -> Shape:
        """The policy plus every node-local plugin's signature: pods with equal shapes get the
        same verdict and load score on every node."""
        return (policy.name, *(p.sign(ctx) for p in self._local))

    def batchable(self, ctx: CycleContext) -> bool:
        """Every plugin signs the pod: each node's verdict and score depend on it alone."""
        return all(p.sign(ctx) is not UNSIGNABLE for p in self._not_local)

    def only_hostnames(self, ctx: CycleContext) -> frozenset[str] | None:
        """The hostnames every filter that narrows leaves the pod (their intersection), or
        None when none narrows it."""
        found: frozenset[str] | None = None
        for plugin in self.narrowing:
            hosts = plugin.only_hostnames(ctx)
            if hosts is not None:
                found = hosts if found is None else found & hosts
        return found

    # --- events ------------------------------------------------------------------------------
    def node_changed(self, old: NodeInfo | None, new: NodeInfo) -> bool:
        """Could this node update make a rejected pod fit? (Heartbeats cannot.)"""
        return old is None or any(getattr(old, f) != getattr(new, f) for f in self.node_fields)

    def pod_changed(self, old: PodInfo, new: PodInfo) -> bool:
        """Did a pending pod change in a way any plugin reads (so it may fit now)?"""
        return old.generation != new.generation or any(
            getattr(old, f) != getattr(new, f) for f in self.pod_fields
        )

    def placed_changed(self, old: PodInfo, new: PodInfo) -> bool:
        """Did a placed pod change in a way any plugin reads of placed pods?"""
        return any(getattr(old, f) != getattr(new, f) for f in self.placed_fields)

    def waits_for_pods(self, pod: PodInfo) -> bool:
        """Could another pod's placement make this pod fit (affinity, spread)?"""
        return any(p.waits_for_pods(pod) for p in self._placement)

    # --- before the queue: PreEnqueue --------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> PreEnqueuePlugin | None:
        """RunPreEnqueuePlugins: the plugin that holds the pod, or None when it may be queued.
        The plugins after the one holding it are not asked, and forget it."""
        holder: PreEnqueuePlugin | None = None
        for plugin in self.pre_enqueuers:
            if holder is not None:
                plugin.forget(pod.uid)
            elif not plugin.pre_enqueue(pod):
                holder = plugin
        return holder

    def forget_held(self, uid: str) -> None:
        """The pod was deleted or bound: every PreEnqueue plugin lets it go."""
        for plugin in self.pre_enqueuers:
            plugin.forget(uid)

    def known_held(self) -> set[str]:
        """Every pod a PreEnqueue plugin keeps anything for."""
        return {uid for plugin in self.pre_enqueuers for uid in plugin.known()}

    def holding(self) -> int:
        """Pods held out of the queue (kube-scheduler's gated pods)."""
        return sum(plugin.holding() for plugin in self.pre_enqueuers)

    def why_held(self, uid: str) -> str | None:
        """`plugin name: why` for the PreEnqueue plugin holding the pod, if it says."""
        for plugin in self.pre_enqueuers:
            why = plugin.why_held(uid)
            if why is not None:
                return f"{plugin.name}: {why}"
        return None

    # --- before the cycle: Prepare ------------------------------------------------------------
    def needs_prepare(self, pod: PodInfo) -> bool:
        return any(plugin.needs(pod) for plugin in self.preparers)

    async def prepare(self, pod: PodInfo) -> str | None:
        """Every Prepare plugin the pod needs, in order: None, or the first error."""
        for plugin in self.preparers:
            if plugin.needs(pod):
                error = await plugin.prepare(pod)
                if error is not None:
                    return f'running PreFilter plugin "{plugin.name}": {error}'
        return None

    def describe_prepared(self, pod: PodInfo, node: str) -> list[str]:
        """What the Prepare plugins give the pod on `node` (explain's lines)."""
        lines = (p.describe(pod, node) for p in self.preparers if p.needs(pod))
        return [line for line in lines if line]

    # --- no node fits: PostFilter ------------------------------------------------------------
    def post_filter(
        self,
        pod: PodInfo,
        held: Mapping[str, list[PodInfo]],
        load_of: Callable[[str], float],
    ) -> Preemption | NoPreemption | None:
        """RunPostFilterPlugins: the first plugin's room for the pod; else the reasons they
        gave why they found none, joined as kube-scheduler joins them (None when none
        applies)."""
        reasons: list[str] = []
        for plugin in self.post_filters:
            outcome = plugin.post_filter(pod, held, load_of)
            if isinstance(outcome, Preemption):
                return outcome
            if outcome is not None:
                reasons.append(outcome.message)
        return NoPreemption(", ".join(reasons)) if reasons else None

    # --- after Filter: Reserve, Unreserve, PreBind -------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        """RunReservePluginsReserve: None when every Reserve plugin took the node; else the
        error, after every Reserve plugin was unreserved (as kube-scheduler's cycle does)."""
        for plugin in self.reservers:
            error = plugin.reserve(state, pod, node)
            if error is not None:
                self.unreserve(state, pod, node)
                return f'running Reserve plugin "{plugin.name}": {error}'
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """RunReservePluginsUnreserve: every Reserve plugin, in reverse order; one that raises
        is logged and the rest still run."""
        for plugin in reversed(self.reservers):
            try:
                plugin.unreserve(state, pod, node)
            except Exception:
                log.exception("Unreserve of plugin %s for %s failed", plugin.name, pod.key)

    def describe_reserved(self, state: CycleState) -> list[str]:
        """What the Reserve plugins gave the pod (the Scheduled event's last words)."""
        said = (p.reserved(state) for p in self.reservers)
        return [line for line in said if line]

    def bind_allowance(self, state: CycleState) -> float:
        """How much longer than a bind the pod's binding cycle may take (its PreBinds)."""
        return sum(plugin.allowance(state) for plugin in self.prebinders)

    async def prebind(
        self,
        state: CycleState,
        pod: PodInfo,
        node: str,
        waiting: Callable[[], None] = lambda: None,
    ) -> str | None:
        """RunPreBindPlugins: None when every PreBind succeeded; else the first error."""
        for plugin in self.prebinders:
            error = await plugin.prebind(state, pod, node, waiting)
            if error is not None:
                return f'running PreBind plugin "{plugin.name}": {error}'
        return None


DEFAULT_PROFILE = Profile()
