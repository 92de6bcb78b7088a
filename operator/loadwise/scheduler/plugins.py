"""The plugins made per scheduler: the halves that write to the API server or wait on it
(PreBind and the Reserve that plans it), and those that keep pods (PreEnqueue), registered here
as framework/plugins/ registers the shared, pure ones: a factory per plugin, given what such a
half may use, and one line in SCHEDULER_PLUGINS. The scheduler appends what they make to its
profile, which runs them; nothing else names them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config import SchedulingSettings
from ..framework.plugin import Plugin
from ..framework.plugins.scheduling_gates import SchedulingGates
from ..framework.types import PodInfo
from ..kube.transport import Http
from .dynamic_resources.pre_enqueue import ClaimsExist
from .state import ClusterState
from .volumes.binder import VolumeBinder


@dataclass(frozen=True, slots=True)
class Handle:
    """What such a half may use (kube-scheduler's framework.Handle, cut to ours)."""

    transport: Http
    state: ClusterState
    settings: SchedulingSettings
    release: Callable[[PodInfo], None]  # a PreEnqueue plugin queues a pod it held with this


Factory = Callable[[Handle], Plugin]


def volume_binding(handle: Handle) -> Plugin:
    state = handle.state
    return VolumeBinder(
        handle.transport,
        state.storage,
        lambda uid: uid in state.pods,
        state.nodes.get,
        handle.settings.volume_bind_timeout,
    )


def scheduling_gates(handle: Handle) -> Plugin:
    return SchedulingGates()


def dynamic_resources(handle: Handle) -> Plugin:
    return ClaimsExist(handle.state.claims, handle.release)


SCHEDULER_PLUGINS: tuple[Factory, ...] = (scheduling_gates, dynamic_resources, volume_binding)
