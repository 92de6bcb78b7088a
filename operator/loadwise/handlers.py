"""kopf wiring only: each handler translates an event into one call on the Runtime's services.

kopf runs the operator's lifecycle (login, startup, cleanup) and the SchedulingPolicy handlers:
change handlers and the metrics timer, which may annotate the policy objects (there are few) and
add kopf's finalizer to them. Pods, nodes and namespaces do not go through kopf: the Runtime's
informers stream them as raw JSON (see informer.py for why), and nothing is written to them
except Bindings, events and the PodScheduled condition.
All handlers are `async`: kopf runs sync handlers in threads, and our state is single-threaded.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from .config import Config
from .policy import GROUP, PLURAL, VERSION
from .runtime import Runtime
from .status import set_condition


def configure(settings: kopf.OperatorSettings) -> None:
    # Only explicit kopf.warn() calls become Events (kopf >= 1.45's default, made explicit):
    # kopf's own log lines would otherwise become Events on the objects it handles.
    settings.posting.loggers = False
    settings.posting.level = logging.WARNING
    settings.peering.standalone = True
    settings.scanning.disabled = True
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.persistence.finalizer = f"{GROUP}/metrics-timer"


def build_registry(config: Config) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # In a pod: the service account; elsewhere: $KUBECONFIG or ~/.kube/config.
        info = kopf.login_with_service_account(**kwargs)
        return info or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure(settings)
        memo.runtime = await Runtime.start(config)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        runtime: Runtime | None = getattr(memo, "runtime", None)
        if runtime is not None:
            await runtime.stop()

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.update(GROUP, VERSION, PLURAL, registry=registry)
    async def policy_changed(
        name: str,
        body: kopf.Body,
        spec: kopf.Spec,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        memo: kopf.Memo,
        logger: kopf.Logger,
        **_: Any,
    ) -> None:
        try:
            memo.runtime.scheduler.apply_policy(name, dict(spec))
            ready = {"type": "Ready", "status": "True", "reason": "Valid", "message": ""}
        except ValueError as exc:
            logger.warning("SchedulingPolicy %s is invalid and ignored: %s", name, exc)
            kopf.warn(body, reason="InvalidPolicy", message=f"ignored: {exc}")
            ready = {"type": "Ready", "status": "False", "reason": "Invalid", "message": str(exc)}
        patch.status["observedGeneration"] = meta.get("generation", 0)
        patch.status["conditions"] = set_condition(status.get("conditions"), ready)

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, optional=True)
    async def policy_deleted(name: str, memo: kopf.Memo, **_: Any) -> None:
        memo.runtime.scheduler.remove_policy(name)

    @kopf.timer(GROUP, VERSION, PLURAL, interval=config.metrics_interval, registry=registry)
    async def refresh_metrics(
        name: str,
        body: kopf.Body,
        status: kopf.Status,
        patch: kopf.Patch,
        memo: kopf.Memo,
        logger: kopf.Logger,
        **_: Any,
    ) -> None:
        # One timer per policy object: the caches make it one refresh per interval in total.
        runtime: Runtime = memo.runtime
        await runtime.refresh_metrics()
        update = runtime.policy_status(name, status.get("conditions"))
        if update is None:
            return  # invalid policy: its Ready condition already says why
        fields, newly_degraded = update
        if newly_degraded:  # a Warning event on the policy, once per transition
            message = f"load-aware scoring degraded: {fields['conditions_message']}"
            logger.warning("%s: %s", name, message)
            kopf.warn(body, reason="MetricsDegraded", message=message)
        fields.pop("conditions_message")
        for key, value in fields.items():
            if status.get(key) != value:
                patch.status[key] = value

    return registry
