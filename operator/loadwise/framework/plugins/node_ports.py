"""NodePorts: hostPort conflicts by IP (0.0.0.0 overlaps all), protocol and port."""

from __future__ import annotations

from ..context import CycleContext
from ..plugin import FilterPlugin, Inputs
from ..types import NodeInfo


class NodePorts(FilterPlugin):
    name = "NodePorts"
    inputs = Inputs(pod=("host_ports",), placed=("host_ports",))
    node_local = True

    def filter(self, ctx: CycleContext, node: NodeInfo) -> list[str] | None:
        wanted = ctx.pod.host_ports
        if not wanted:
            return None
        used = ctx.state.used_ports(node.name)
        for ip, protocol, port in wanted:
            for (used_ip, used_protocol, used_port), count in used.items():
                if (
                    count > 0
                    and used_protocol == protocol
                    and used_port == port
                    and (ip == "0.0.0.0" or used_ip in ("0.0.0.0", ip))
                ):
                    return ["node(s) didn't have free ports for the requested pod ports"]
        return None
