"""Pod groups: the PodGroups of both APIs and their members held until the group may be tried
(members.py), the pod group's scheduling cycle (cycle.py) and what the PodGroup's status says
of its decisions (status.py). The gang policy's decision is framework/plugins/gang_scheduling/."""
