"""The default plugins, registered in kube-scheduler's filter order.

Adding a filter or a scorer: a file here with a FilterPlugin or ScorePlugin subclass that
declares its inputs (see ../plugin.py), and one line in DEFAULT_PLUGINS. A plugin with helpers
of its own is a package holding them (volume_binding/). gang_scheduling/ is no filter: the pod
group's decision and its preemption, which the scheduler's pod group cycle runs.
"""

from __future__ import annotations

from ..plugin import Plugin
from .inter_pod_affinity import InterPodAffinity, PodAffinityPreference
from .label_spread import SpreadByLabels
from .load_aware import LoadAware
from .node_affinity import NodeAffinity, PreferredNodeAffinity
from .node_ports import NodePorts
from .node_ready import NodeReady
from .node_unschedulable import NodeUnschedulable
from .node_valid import NodeValid
from .node_volume_limits import NodeVolumeLimits
from .rebalance_cool_down import RebalanceCoolDown
from .resources_fit import NodeResourcesFit
from .taint_toleration import PreferNoSchedule, TaintToleration
from .topology_spread import PodTopologySpread, SpreadPreference
from .volume_binding import VolumeBinding
from .volume_restrictions import VolumeRestrictions
from .volume_zone import VolumeZone

DEFAULT_PLUGINS: tuple[Plugin, ...] = (
    NodeValid(),
    NodeUnschedulable(),
    NodeReady(),
    TaintToleration(),
    NodeAffinity(),
    NodePorts(),
    NodeResourcesFit(),
    VolumeRestrictions(),
    NodeVolumeLimits(),
    VolumeBinding(),
    VolumeZone(),
    PodTopologySpread(),
    InterPodAffinity(),
    RebalanceCoolDown(),
    LoadAware(),
    PreferNoSchedule(),
    PreferredNodeAffinity(),
    SpreadPreference(),
    PodAffinityPreference(),
    SpreadByLabels(),
)
