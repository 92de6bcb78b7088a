"""Plugin: what every filter and scorer declares, so nothing downstream keeps a list by hand.

As kube-scheduler's plugins do (SignPod, EventsToRegister), each plugin says what it reads:
- `inputs.pod`: fields of the pod being scheduled. Its signature (`sign`) is made of them, and
  the score index shares one heap of node verdicts and scores among pods with equal signatures;
  a field read but not declared would let the index reuse a stale verdict.
- `inputs.node`: node fields; an update changing one may make a rejected pod fit (requeue).
- `inputs.placed`: fields of pods already on nodes; a change re-accounts the pod's node.
- `inputs.namespaces`: namespace labels (affinity namespace selectors).
A plugin is `node_local` when its verdict or score for a node depends only on the pod's
signature and that node's own state. Others (spread, inter-pod affinity, preferences normalised
across nodes) sign UNSIGNABLE for a pod they apply to: such a pod leaves the batching path.
Every plugin declares which it is (no default: a wrong guess changes decisions). A score plugin
is never node-local: the score index orders a batch by load alone, so a preference must take
the pods it applies to off that path. Its `sign` is UNSIGNABLE unless it overrides `sign` to
say which pods it does not apply to; `Profile` refuses a score plugin declared node-local.
Such a plugin may declare a `fast_path` the score index knows how to take for it (visiting
nodes by domain instead of all of them); the index reads the declaration, never the class.

Around Filter and Score, the extension points of kube-scheduler's framework that a plugin
implements by subclassing (the profile runs them in its order, never naming a plugin):
- PreEnqueuePlugin: may a pending pod join the queue? A pod it holds waits outside the queue,
  never tried, counted as gated, until the plugin releases it (scheduling gates, a PodGroup
  short of its minimum).
- PreparePlugin (loadwise's own point): what must be asked of another process before the cycle,
  which never awaits; kube-scheduler's PreFilter does such work inline (DynamicResources runs
  its device allocator there). The loop awaits it for a popped pod; Filter then reads it.
- PostFilterPlugin: for a pod no node can take, a way to make room (DefaultPreemption).
- ReservePlugin: Reserve when a node is chosen, before the next pod's cycle, and Unreserve (in
  reverse order, every Reserve plugin, even one whose Reserve failed or did not run) when the
  pod does not bind after all. What Reserve leaves for PreBind and Unreserve goes in the pod's
  CycleState under the plugin's name.
- PreBindPlugin: PreBind in the binding task, before the Binding; its failure unreserves the
  pod and retries it after backoff.
A plugin's pure half (its filters, its reading of the cluster) lives in framework/; a half that
writes to the API server or waits on it lives in scheduler/, registered by the scheduler under
the same name (scheduler/plugins.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final

if TYPE_CHECKING:
    from .context import CycleContext
    from .scoring import NodeScore
    from .types import NodeInfo, PodInfo


# Fast paths of the score index (framework/index.py), which a plugin may declare it allows:
# - HOSTNAME_APART: a filter whose only refusals for the pod come from pods on the node itself
#   (required anti-affinity by hostname): the index walks the nodes holding none;
# - SPREAD_BY_DOMAIN, AFFINITY_BY_DOMAIN: a preference whose score depends only on the node's
#   topology domain (for spreading by hostname, on the matching pods on the node itself), which
#   the index computes per domain from its counts (ScheduleAnyway spreading, preferred inter-pod
#   affinity): it keeps each domain's two least loaded nodes.
HOSTNAME_APART: Final = "hostname-apart"
SPREAD_BY_DOMAIN: Final = "spread-by-domain"
AFFINITY_BY_DOMAIN: Final = "affinity-by-domain"


class _Unsignable:
    def __repr__(self) -> str:
        return "UNSIGNABLE"


UNSIGNABLE: Final = _Unsignable()
Signature = Hashable  # a tuple of field values, or UNSIGNABLE


@dataclass(frozen=True)
class Inputs:
    pod: tuple[str, ...] = ()
    node: tuple[str, ...] = ()
    placed: tuple[str, ...] = ()
    namespaces: bool = False


class Plugin:
    name: ClassVar[str]
    inputs: ClassVar[Inputs] = Inputs()
    node_local: ClassVar[bool]  # declared by every plugin (see the module doc)
    # A pod this plugin rejected may fit once another pod is placed (affinity, spread minimums).
    helped_by_placement: ClassVar[bool] = False
    # The score index's fast path this plugin allows for pods it signs UNSIGNABLE (above).
    fast_path: ClassVar[str | None] = None

    def sign(self, ctx: CycleContext) -> Signature:
        """The declared pod fields; plugins that are not node-local override this."""
        pod = ctx.pod
        return tuple(getattr(pod, field) for field in self.inputs.pod)

    def waits_for_pods(self, pod: PodInfo) -> bool:
        """Could another pod's placement make this pod pass (see helped_by_placement)?"""
        return False


class FilterPlugin(Plugin):
    # Every refusal of this filter is one no preemption can lift (kube-scheduler's
    # UnschedulableAndUnresolvable); plugins with some of each override `unresolvable`.
    always_unresolvable: ClassVar[bool] = False

    def prefilter(self, ctx: CycleContext) -> str | None:
        """kube-scheduler's PreFilter rejection: why no node can take the pod, decided before
        any node is visited (every node then UnschedulableAndUnresolvable), or None. Plugins
        that have one override this; `filter` must still refuse every node for the same
        reason, since a dry run (preemption, explain) may ask it directly."""
        return None

    def only_hostnames(self, ctx: CycleContext) -> frozenset[str] | None:
        """kube-scheduler's PreFilterResult node names: the `kubernetes.io/hostname` values of
        the only nodes this filter could pass for the pod, or None (any node). The score index
        then decides on those nodes alone (in load order until two pass, when load alone ranks
        them), and visits every node only when none of them fits (for the failure message).
        Every node outside must be one `filter` refuses."""
        return None

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        """Why the node cannot take the pod (kube-scheduler's wording), or None."""
        raise NotImplementedError

    def unresolvable(self, ctx: CycleContext, node: NodeInfo, reasons: list[str]) -> bool:
        """Would the node still refuse the pod with every lower-priority pod removed?
        Preemption tries only nodes where the answer is no."""
        return self.always_unresolvable


class ScorePlugin(Plugin):
    """A preference: 0..100 per node (higher is better), combined with the load score."""

    weight: ClassVar[int]
    node_local: ClassVar[bool] = False  # never node-local (see the module doc)

    def sign(self, ctx: CycleContext) -> Signature:
        """UNSIGNABLE: the pod takes the full path, where preferences are scored. Override to
        return () for pods the preference does not apply to (they may be batched)."""
        return UNSIGNABLE

    def hot(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[bool] | None:
        """Which feasible nodes this preference finds hot for the pod (a device it would get
        there is): passed over, as hot nodes are, while another stays. None: none is. Asked
        only on the full path (every feasible node at once): a plugin that answers signs the
        pods it answers for UNSIGNABLE."""
        return None

    def weight_for(self, ctx: CycleContext) -> float:
        """This plugin's weight for the pod (fixed, unless the policy sets it)."""
        return self.weight

    def score(self, ctx: CycleContext, nodes: Sequence[NodeInfo]) -> list[float] | None:
        """Normalised scores for `nodes`, or None when the preference does not apply."""
        raise NotImplementedError


class LoadPlugin(Plugin):
    """The load score and the hot pass-over (one per profile). Its raw score per node is
    normalised like any score, but it also says which feasible nodes are passed over as hot,
    and in what order nodes rank for it, which is the order the score index keeps."""

    weight: ClassVar[int]

    def load(self, ctx: CycleContext, node: NodeInfo) -> NodeScore:
        raise NotImplementedError

    def order(self, ctx: CycleContext, score: NodeScore) -> tuple[int, float]:
        """(tier, rank), lower first: the order in which `pass_over` and the score decide
        between nodes on load alone."""
        raise NotImplementedError

    def pass_over(self, ctx: CycleContext, load: Sequence[NodeScore]) -> tuple[list[int], bool]:
        """Which of the feasible nodes (their load scores) stay candidates, and whether all of
        them were passed over (then the one kept is taken regardless)."""
        raise NotImplementedError


class CycleState:
    """kube-scheduler's CycleState for the points after Filter: what each plugin's Reserve
    leaves for its own PreBind and Unreserve, by plugin name. One per pod and decision."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}

    def write(self, plugin: str, value: Any) -> None:
        self._data[plugin] = value

    def read(self, plugin: str) -> Any:
        """What `plugin` wrote, or None."""
        return self._data.get(plugin)

    def __bool__(self) -> bool:
        return bool(self._data)


class ReservePlugin(Plugin):
    """Reserve/Unreserve: claim what the chosen node gives the pod (volumes, devices) in memory
    before the next pod's cycle, and give it back if the pod does not bind."""

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        """Why the pod cannot have the node after all (an error: the pod backs off), or None."""
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Undo Reserve; called for every Reserve plugin, so it must cope with a Reserve that
        failed or never ran (nothing in `state`), and must not raise."""
        raise NotImplementedError

    def reserved(self, state: CycleState) -> str | None:
        """What Reserve gave the pod, said in its Scheduled event (None: nothing to say)."""
        return None


class PreBindPlugin(Plugin):
    """PreBind: the writes (and waits) that must land before the Binding."""

    def allowance(self, state: CycleState) -> float:
        """Seconds this PreBind may take beyond a bind's own (the reservation's audit waits
        that long); 0 when it has nothing to do for the pod."""
        return 0.0

    async def prebind(
        self, state: CycleState, pod: PodInfo, node: str, waiting: Callable[[], None]
    ) -> str | None:
        """Why binding must be retried (an error), or None. `waiting`: call it once before
        waiting on others (the loop's bind slot is given back meanwhile)."""
        raise NotImplementedError


class PreEnqueuePlugin(Plugin):
    """PreEnqueue: whether a pending pod may join the queue now. A plugin that holds a pod keeps
    it until what it waits for arrives, then gives it to the `release` it was made with (or the
    pod's next update asks again); held pods are never tried and count as gated."""

    def pre_enqueue(self, pod: PodInfo) -> bool:
        """True: the pod may be queued (the plugin holds it no longer). False: held."""
        raise NotImplementedError

    def forget(self, uid: str) -> None:
        """The pod was deleted or bound, or an earlier plugin holds it: drop what is kept."""
        raise NotImplementedError

    def known(self) -> Collection[str]:
        """Every pod this plugin keeps anything for (a relist forgets those it lacks)."""
        raise NotImplementedError

    def holding(self) -> int:
        """How many pods it holds now (the gated gauge)."""
        raise NotImplementedError

    def why_held(self, uid: str) -> str | None:
        """Why it holds the pod (for `explain`), or None when it does not say or hold it."""
        return None


class PreparePlugin(Plugin):
    """Prepare: the awaited half of a PreFilter (see the module doc). What it learns stays with
    the plugin for that pod's cycle, which follows at once."""

    def needs(self, pod: PodInfo) -> bool:
        """Does the pod need this plugin's preparation before its cycle?"""
        raise NotImplementedError

    async def prepare(self, pod: PodInfo) -> str | None:
        """An error (the attempt fails, the pod is told and backs off), or None."""
        raise NotImplementedError

    def describe(self, pod: PodInfo, node: str) -> str | None:
        """What it prepared gives the pod on `node`, in a line for `explain`, or None."""
        return None


@dataclass(frozen=True, slots=True)
class Preemption:
    """Evict `victims` from `node`, then the pod waits for the room (nominated there)."""

    node: str
    victims: tuple[PodInfo, ...]
    pdb_violations: int
    candidates: int  # nodes where preemption would have helped (of those examined)


@dataclass(frozen=True, slots=True)
class NoPreemption:
    message: str  # kube-scheduler's wording, appended to the FailedScheduling message


class PostFilterPlugin(Plugin):
    """PostFilter: run for a pod no node can take (kube-scheduler's DefaultPreemption)."""

    def post_filter(
        self,
        pod: PodInfo,
        held: Mapping[str, list[PodInfo]],
        load_of: Callable[[str], float],
    ) -> Preemption | NoPreemption | None:
        """Room this plugin can make for the pod, why it cannot (NoPreemption), or None when
        it does not apply. `held`: per node, the nominated pods whose room the pod must leave;
        `load_of`: a node's weighted load, which breaks ties."""
        raise NotImplementedError
