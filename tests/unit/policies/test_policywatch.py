"""PolicyWatch: what each SchedulingPolicy event does to the live policies and degradations
(events fed directly), and a CRD missing at start-up and installed later (over the
FakeTransport)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import pytest

from loadwise.degradations import Degradations
from loadwise.policies import policywatch as policywatch_module
from loadwise.policies.policywatch import POLICIES_PATH, PolicyWatch
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.scheduler import Scheduler
from loadwise.usage.cache import MetricsCache

from ...fakes import FakeTransport, Reply, until


def watch() -> tuple[PolicyWatch, Scheduler, Degradations, FakeTransport]:
    transport = FakeTransport()  # events are fed directly: no call is made
    scheduler = Scheduler(
        "loadwise-scheduler",
        Binder(transport, "loadwise-scheduler"),
        {"prometheus": MetricsCache(None, 10.0)},
        SchedulingQueue(),
    )
    degradations = Degradations()
    policies = PolicyWatch(transport, scheduler.policies, degradations)
    policies.crd_present = True
    return policies, scheduler, degradations, transport


def policy(name: str, spec: Any, generation: int = 1, uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid, "generation": generation}, "spec": spec}


def test_a_spec_that_is_not_an_object_is_invalid_with_a_message_not_a_crash() -> None:
    policies, scheduler, degradations, _ = watch()
    policies.on_event("ADDED", policy("odd", ["not", "an", "object"]))
    assert policies.objects["odd"].error == "spec: must be an object, not list"
    assert len(scheduler.policies) == 0
    assert "1 invalid one(s) ignored" in degradations.active["no_policy"].message


def test_no_spec_means_the_defaults_and_a_valid_policy_clears_no_policy() -> None:
    policies, scheduler, degradations, _ = watch()
    policies.relisted(set())
    assert "no_policy" in degradations.active
    policies.on_event(None, {"metadata": {"name": "bare", "uid": "u", "generation": 1}})
    assert scheduler.policies.names() == ["bare"] and not policies.objects["bare"].error
    assert "no_policy" not in degradations.active
    assert [n.reason for n in degradations.notices] == ["NoPolicy", "NoPolicyResolved"]


def test_status_only_updates_do_not_reapply_and_a_new_generation_does() -> None:
    policies, scheduler, _, _ = watch()
    policies.on_event("ADDED", policy("p", {"weights": {"cpu": 1, "memory": 1}}))
    first = scheduler.policies.policies()[0]
    raw = policy("p", {"weights": {"cpu": 1, "memory": 1}})
    raw["status"] = {"nodesWithFreshMetrics": 3}
    policies.on_event("MODIFIED", raw)
    assert scheduler.policies.policies()[0] is first  # not re-validated, queue not woken
    assert policies.objects["p"].status == {"nodesWithFreshMetrics": 3}
    policies.on_event("MODIFIED", policy("p", {"weights": {"cpu": -1}}, generation=2))
    assert policies.objects["p"].error.startswith("spec.weights.cpu")
    assert len(scheduler.policies) == 0  # the invalid new version replaces the old one


def test_deleted_and_relisted_policies_are_forgotten() -> None:
    policies, scheduler, degradations, _ = watch()
    policies.on_event("ADDED", policy("a", {}))
    policies.on_event("ADDED", policy("b", {}, uid="u2"))
    policies.on_event("DELETED", policy("a", {}))
    assert scheduler.policies.names() == ["b"]
    policies.relisted({"x"})  # b vanished while nobody watched
    assert not scheduler.policies.names() and not policies.objects
    assert "no_policy" in degradations.active


def test_events_are_applied_without_a_call() -> None:
    policies, _, _, transport = watch()
    policies.on_event("ADDED", policy("a", {}))
    policies.on_event("DELETED", policy("a", {}))
    assert transport.calls == [] and transport.watches == []


async def test_a_crd_installed_after_start_up_is_found_and_its_policies_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(policywatch_module, "CRD_RETRY", 0.01)
    installed = False

    def api(
        method: str, path: str, body: Mapping[str, Any] | None, params: Mapping[str, str] | None
    ) -> Reply:
        assert (method, path) == ("GET", POLICIES_PATH)
        if not installed:
            return 404, {"kind": "Status", "reason": "NotFound"}
        items = [policy("late", {"weights": {"cpu": 2, "memory": 1}})]
        return 200, {"metadata": {"resourceVersion": "42"}, "items": items}

    policies, scheduler, degradations, transport = watch()
    transport.handler = api
    policies.crd_present = None
    await policies.seed()  # start-up goes on without the CRD
    assert policies.crd_present is False and "crd_missing" in degradations.active
    task = asyncio.create_task(policies.run())
    try:
        await asyncio.sleep(0.05)
        assert policies.crd_present is False and len(transport.calls) > 1  # looking again
        installed = True
        await until(lambda: len(transport.watches) == 1)
        assert scheduler.policies.names() == ["late"]
        assert "crd_missing" not in degradations.active and "no_policy" not in degradations.active
        assert (transport.watches[0].params or {})["resourceVersion"] == "42"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
