"""Reporter: the leader's writes that are not about pods: SchedulingPolicy statuses, their
events, and the operator's own degradation events and condition.

One pass per metrics interval (and right after an election). Every write is retried by the next
pass when it fails, so no outage can stop reporting for good; nothing here raises into its loop.
An event the next pass retries keeps the name of its first try: a try the API server took but
whose answer was lost is then answered 409 AlreadyExists (written), never posted twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import UTC, datetime
from typing import Any

from .. import observability as obs
from ..degradations import Degradations
from ..framework.heat import thresholds_problems
from ..kube.times import stamp
from ..kube.transport import STRATEGIC_MERGE, Http
from ..policies.policy import GROUP, VERSION
from ..policies.policywatch import POLICIES_PATH, PolicyObject, PolicyWatch
from ..scheduler.binding.binder import Binder
from ..scheduler.scheduler import Scheduler
from .policy_status import hot_nodes, metrics_report, set_condition, status_fields

log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"
# kopf's timer finalizer, left by development builds before 0.1.0
LEGACY_FINALIZER = f"{GROUP}/metrics-timer"
CONDITION = "loadwise.io/Degraded"


class Reporter:
    def __init__(
        self,
        transport: Http,
        binder: Binder,
        scheduler: Scheduler,
        policies: PolicyWatch,
        degradations: Degradations,
        target: dict[str, str] | None,
    ) -> None:
        self.transport = transport
        self.binder = binder
        self.scheduler = scheduler
        self.policies = policies
        self.degradations = degradations
        self.target = target  # the object operator-level events and the condition go on
        self._available: dict[str, bool] = {}  # policy -> metrics available at last pass
        self._invalid_reported: set[tuple[str, int]] = set()  # (uid, generation)
        self._condition_generation = -1
        self._gauged: set[str] = set()  # policies with per-policy gauges set
        self._threshold_problems: dict[str, list[str]] = {}  # per policy, as last logged
        # events not yet written, by what they report: retried under their first name
        self._unwritten: dict[tuple[str, ...], dict[str, Any]] = {}
        self._retried: set[tuple[str, ...]] = set()  # keys tried in this pass
        # (policy, condition type, status) -> when that transition was first seen, kept until
        # written: a status patch retried after an outage says when it happened, not when it
        # landed. ("", our pod's condition, degradations' generation) for the operator's own.
        self._since: dict[tuple[str, str, str], str] = {}

    async def run(self, interval: float) -> None:
        """Until cancelled, when this replica stops leading: then its per-policy series go."""
        self.degradations.replay()
        self._condition_generation = -1
        try:
            while True:
                try:
                    await self.report_once()
                except Exception:  # a bug must cost one pass, never the reporting
                    log.exception("reporting failed; trying again in %.0fs", interval)
                await asyncio.sleep(interval)
        finally:
            self.forget_gauges()

    def forget_gauges(self) -> None:
        """Remove the per-policy series, which only the leader keeps current: a former
        leader's last values would otherwise stay, and the dashboard's max over replicas would
        show them over the new leader's 0."""
        for name in self._gauged:
            obs.POLICY_METRICS_AVAILABLE.remove(name)
            obs.POLICY_FRESH_NODES.remove(name)
            obs.POLICY_HOT_NODES.remove(name)
        self._gauged.clear()

    async def report_once(self) -> None:
        for obj in list(self.policies.objects.values()):
            await self._report_policy(obj)
        valid = {name for name, obj in self.policies.objects.items() if not obj.error}
        for name in self._gauged - valid:  # deleted or invalid: drop their series
            obs.POLICY_METRICS_AVAILABLE.remove(name)
            obs.POLICY_FRESH_NODES.remove(name)
            obs.POLICY_HOT_NODES.remove(name)
            self._gauged.discard(name)
        await self._report_operator()
        for key in self._unwritten.keys() - self._retried:  # no longer to be written
            del self._unwritten[key]
        self._retried.clear()

    # --- SchedulingPolicy objects --------------------------------------------------------------
    async def _report_policy(self, obj: PolicyObject) -> None:
        involved = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SchedulingPolicy",
            "name": obj.name,
            "uid": obj.uid,
        }
        status = dict(obj.status)
        conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
        if obj.error:
            ready = {"type": "Ready", "status": "False", "reason": "Invalid", "message": obj.error}
            if (obj.uid, obj.generation) not in self._invalid_reported and (
                await self._event(
                    (obj.uid, str(obj.generation)),
                    involved,
                    "Warning",
                    "InvalidPolicy",
                    f"ignored: {obj.error}",
                )
            ):  # once per generation, once written
                self._invalid_reported.add((obj.uid, obj.generation))
            fields: dict[str, Any] = {"conditions": set_condition(conditions, ready)}
        else:
            ready = {"type": "Ready", "status": "True", "reason": "Valid", "message": ""}
            fields = self._metrics_fields(obj.name, set_condition(conditions, ready))
            message = fields.pop("conditions_message", "")
            available = bool(fields.pop("available", True))
            was = self._available.get(obj.name, True)
            written = True
            if was and not available:  # a Warning event per transition
                text = f"load-aware scoring degraded: {message}"
                log.warning("%s: %s", obj.name, text)
                written = await self._event(
                    (obj.uid, "metrics"), involved, "Warning", "MetricsDegraded", text
                )
            elif available and not was:
                written = await self._event(
                    (obj.uid, "metrics"),
                    involved,
                    "Normal",
                    "MetricsRecovered",
                    f"load-aware scoring back: {message}",
                )
            if written:  # else the transition is reported by the next pass
                self._available[obj.name] = available
        fields["observedGeneration"] = obj.generation
        written_at = {
            c.get("type"): c.get("lastTransitionTime")
            for c in conditions or ()
            if isinstance(c, dict)
        }
        for condition in fields["conditions"]:
            condition["observedGeneration"] = obj.generation
            key = (obj.name, str(condition["type"]), str(condition["status"]))
            if condition["lastTransitionTime"] == written_at.get(condition["type"]):
                for other in [k for k in self._since if k[:2] == key[:2]]:
                    del self._since[other]  # back to what is written: no transition pending
            else:
                condition["lastTransitionTime"] = self._since.setdefault(
                    key, condition["lastTransitionTime"]
                )
        patch = {k: v for k, v in fields.items() if status.get(k) != v}
        if set(patch) == {"lastMetricsRefresh"} and not _stale(status.get("lastMetricsRefresh")):
            patch = {}  # not a heartbeat: the time goes with other changes, or now and then
        if not patch or await self._patch(
            f"{POLICIES_PATH}/{obj.name}/status", {"status": patch}, MERGE
        ):
            for key in [k for k in self._since if k[0] == obj.name]:
                del self._since[key]
        if LEGACY_FINALIZER in obj.finalizers:  # no timer needs it any more: let deletes finish
            kept = [f for f in obj.finalizers if f != LEGACY_FINALIZER]
            await self._patch(
                f"{POLICIES_PATH}/{obj.name}",
                {"metadata": {"finalizers": kept or None}},
                MERGE,
            )

    def _metrics_fields(self, name: str, conditions: list[dict[str, Any]]) -> dict[str, Any]:
        scheduler = self.scheduler
        policy = next((p for p in scheduler.policies.policies() if p.name == name), None)
        if policy is None:
            return {"conditions": conditions}
        cache = scheduler.usage.cache_for(policy)
        report = metrics_report(policy, cache, scheduler.state.nodes, time.time())
        state = scheduler.state
        problems = thresholds_problems(policy, state.nodes, state.priorities)
        if problems:  # said in the status, and logged when they change
            report = dataclasses.replace(
                report, message=f"{report.message}; hot thresholds: {'; '.join(problems)}"
            )
        if self._threshold_problems.get(name, []) != problems:
            if problems:
                log.warning("SchedulingPolicy %s: hot thresholds: %s", name, "; ".join(problems))
            self._threshold_problems[name] = problems
        fields = status_fields(
            report,
            conditions,
            cache.last_success if cache is not None else None,
        )
        fields["conditions_message"] = report.message
        fields["available"] = report.available
        obs.POLICY_METRICS_AVAILABLE.labels(name).set(1 if report.available else 0)
        obs.POLICY_FRESH_NODES.labels(name).set(report.fresh_nodes)
        samples = scheduler.usage.samples_for(policy)
        hot = hot_nodes(policy, samples, scheduler.state.nodes, time.time())
        obs.POLICY_HOT_NODES.labels(name).set(hot)
        self._gauged.add(name)
        return fields

    # --- the operator itself -------------------------------------------------------------------
    async def _report_operator(self) -> None:
        notices = self.degradations.notices
        while notices and self.target is not None:
            notice = notices[0]  # removed once written: an outage must not swallow it
            key = ("notice", str(id(notice)))
            if not await self._event(key, self.target, notice.type, notice.reason, notice.message):
                break  # the next pass tries again, in order
            notices.popleft()
        if self.target is None:
            notices.clear()
        generation = self.degradations.generation
        target = self.target
        if generation == self._condition_generation or target is None or target["kind"] != "Pod":
            return
        active = self.degradations.active
        condition = {
            "type": CONDITION,
            "status": "True" if active else "False",
            "reason": ",".join(sorted({d.event_reason for d in active.values()})) or "AsExpected",
            "message": self.degradations.summary()[:1024],
            "lastTransitionTime": self._since.setdefault(("", CONDITION, str(generation)), stamp()),
        }
        path = f"/api/v1/namespaces/{target['namespace']}/pods/{target['name']}/status"
        if await self._patch(path, {"status": {"conditions": [condition]}}, STRATEGIC_MERGE):
            self._condition_generation = generation
            for pending in [k for k in self._since if k[:2] == ("", CONDITION)]:
                del self._since[pending]

    async def _event(
        self,
        key: tuple[str, ...],
        involved: dict[str, str],
        event_type: str,
        reason: str,
        message: str,
    ) -> bool:
        """An event about `key`; True once written. One the last pass could not write is
        posted again under its name, whatever `message` says now, if it reports the same."""
        self._retried.add(key)
        body = self._unwritten.get(key)
        if body is None or body["reason"] != reason:
            body = self.binder.cluster_event(involved, event_type, reason, message)
        if await self.binder.post_event(body):
            self._unwritten.pop(key, None)
            return True
        self._unwritten[key] = body
        return False

    async def _patch(self, path: str, body: dict[str, Any], content_type: str) -> bool:
        """True when done: written, or refused in a way a retry cannot fix (4xx, e.g. the
        object is gone); False when the next pass should try again (network, 5xx)."""
        try:
            status, data = await self.transport.request(
                "PATCH", path, body, content_type=content_type
            )
        except Exception as exc:  # retried by the next pass
            log.warning("PATCH %s failed: %r", path, exc)
            obs.REPORT_ERRORS.inc()
            return False
        if status >= 300:
            log.warning("PATCH %s failed: HTTP %s %s", path, status, data[:300])
            obs.REPORT_ERRORS.inc()
        return status < 500


REFRESH_STAMP_EVERY = 300.0  # seconds: how stale lastMetricsRefresh may get on its own


def _stale(written: Any) -> bool:
    """Whether a lastMetricsRefresh written earlier is due to be written again."""
    try:
        when = datetime.strptime(str(written), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return True
    return (datetime.now(UTC) - when).total_seconds() >= REFRESH_STAMP_EVERY
