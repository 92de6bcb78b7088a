"""The plugins made per scheduler: the halves that write to the API server or wait on it
(PreBind and the Reserve that plans it), and those that keep pods (PreEnqueue), registered here
as framework/plugins/ registers the shared, pure ones: a factory per plugin, given what such a
half may use, and one line in SCHEDULER_PLUGINS. The scheduler appends what they make to its
profile, which runs them; nothing else names them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..config import SchedulingSettings
from ..framework.plugin import Plugin
from ..framework.plugins.scheduling_gates import SchedulingGates
from ..framework.types import PodInfo
from ..kube.transport import Http
from .dynamic_resources import extended
from .dynamic_resources.allocation import DeviceAllocation, DeviceScore
from .dynamic_resources.claim_binding import ClaimBinding, deallocate
from .dynamic_resources.device_load import DeviceLoad
from .dynamic_resources.helper import AllocatorProcess
from .dynamic_resources.objects import DeviceObjects
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
    devices: DeviceObjects  # what the device allocator holds, and the allocations in flight
    allocator: AllocatorProcess
    device_load: DeviceLoad | None = None  # devices' measured utilisation


Factory = Callable[[Handle], Plugin | Sequence[Plugin]]  # several: one plugin's extension points


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


def dynamic_resources(handle: Handle) -> Sequence[Plugin]:
    """PreEnqueue (the claims exist), PreFilter and Filter (the allocator's verdicts), then
    Reserve, PreBind and Unreserve (the claims written)."""
    allocation = DeviceAllocation(
        handle.devices,
        handle.allocator,
        handle.state.nodes,
        handle.device_load,
        functools.partial(deallocate, handle.transport),
        handle.state.dra_backed,
        functools.partial(extended.delete, handle.transport),
    )
    return (
        ClaimsExist(handle.state.claims, handle.release),
        allocation,
        DeviceScore(allocation),
        ClaimBinding(handle.transport, allocation, handle.settings.device_settle),
    )


SCHEDULER_PLUGINS: tuple[Factory, ...] = (scheduling_gates, dynamic_resources, volume_binding)
