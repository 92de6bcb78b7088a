"""kopf wiring only: the operator's lifecycle.

kopf runs the process (signals, login, startup and cleanup handlers); the Runtime does the rest.
SchedulingPolicies no longer go through kopf handlers and the node-metrics refresh is no longer a
kopf timer (see policies/policywatch.py and upkeep.py for why: a timer task died for good after
an API outage, handlers ran only after the first decisions, and a CRD installed after start-up
was never seen). So kopf writes nothing on policy objects: no annotations, no finalizer.
All handlers are `async`: kopf runs sync handlers in threads, and our state is single-threaded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from typing import Any

import kopf

from .components import report_startup_failure
from .config import Config
from .logs import one_line
from .runtime import Runtime

log = logging.getLogger(__name__)

# Start-up retries: 1 s doubling to 5 s (kopf's own retry is a fixed 60 s); a start-up that fails
# on something that clears by itself (a port held, an API server down) resumes within 5 s of it.
RETRY_FLOOR, RETRY_CAP = 1.0, 5.0


def configure(settings: kopf.OperatorSettings) -> None:
    # Only explicit kopf.warn() calls become Events (kopf >= 1.45's default, made explicit).
    settings.posting.loggers = False
    settings.posting.level = logging.WARNING
    settings.peering.standalone = True
    settings.scanning.disabled = True


async def start_runtime(config: Config) -> Runtime:
    """Runtime.start until it succeeds, with a growing pause. Each failed attempt has stopped
    everything it started (Runtime.start is all-or-nothing), so retries never pile up."""
    delay = RETRY_FLOOR
    reported = ""
    while True:
        try:
            return await Runtime.start(config)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            why = one_line(exc)
            log.error("start-up failed: %s; retrying in %.0fs", why, delay)
            if why != reported:  # one event per distinct reason, not one every retry
                reported = why
                await report_startup_failure(config, f"start-up failed, retrying: {why}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP)


def in_cluster(info: kopf.ConnectionInfo | None) -> kopf.ConnectionInfo | None:
    """kopf's service-account login at the address a kubelet puts in KUBERNETES_SERVICE_HOST and
    _PORT, which client-go's InClusterConfig and our own client (components.api_client) use, instead
    of kopf's fixed https://kubernetes.default.svc: a pod on the host network (DNS policy
    Default) cannot resolve that name, and kopf then fails every request it makes."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT")
    if info is None or not host or not port:
        return info
    return dataclasses.replace(
        info, server=f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    )


def build_registry(config: Config) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # In a pod: the service account; elsewhere: $KUBECONFIG or ~/.kube/config.
        info = in_cluster(kopf.login_with_service_account(**kwargs))
        return info or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure(settings)
        memo.runtime = await start_runtime(config)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        runtime: Runtime | None = getattr(memo, "runtime", None)
        if runtime is not None:
            await runtime.stop()

    return registry
