"""Environment variables named like settings that are not settings: the ones the kubelet makes
for a Service whose name starts with loadwise (service links)."""

from __future__ import annotations

import re
from collections.abc import Mapping

PREFIX = "LOADWISE_"

# kubelet's pkg/kubelet/envvars: the names made from a Service's name (upper case, - as _).
_SERVICE_LINK = (
    r"{service}_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT"
    r"|PORT_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)"
)


def service_link(variable: str, env: Mapping[str, str]) -> bool:
    """Whether the kubelet made `variable` for a Service (enableServiceLinks, on by default):
    a Service named loadwise or loadwise-..., e.g. release loadwise's `loadwise-loadwise`,
    gives every pod in its namespace LOADWISE_LOADWISE_SERVICE_HOST, _SERVICE_PORT,
    _SERVICE_PORT_<PORT NAME>, _PORT, _PORT_<PORT>_<PROTOCOL> and that with _PROTO, _PORT and
    _ADDR. Exactly those shapes, and only beside the same Service's _SERVICE_HOST, which the
    kubelet always sets with them. (The chart's own pods turn service links off.)"""
    for host in env:
        if host.startswith(PREFIX) and host.endswith("_SERVICE_HOST"):
            service = re.escape(host.removesuffix("_SERVICE_HOST"))
            if re.fullmatch(_SERVICE_LINK.format(service=service), variable):
                return True
    return False
