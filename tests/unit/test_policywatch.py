"""PolicyWatch: what each SchedulingPolicy event does to the live policies and degradations,
without a network (the informer's transport is never called here)."""

from __future__ import annotations

from typing import Any, cast

from loadwise.binder import Binder
from loadwise.degradations import Degradations
from loadwise.metrics.cache import MetricsCache
from loadwise.policywatch import PolicyWatch
from loadwise.queue import SchedulingQueue
from loadwise.scheduler import Scheduler
from loadwise.transport import Transport


def watch() -> tuple[PolicyWatch, Scheduler, Degradations]:
    transport = cast(Transport, None)  # never used: events are fed directly
    scheduler = Scheduler(
        "loadwise-scheduler",
        Binder(transport, "loadwise-scheduler"),
        {"prometheus": MetricsCache(None, 10.0)},
        SchedulingQueue(),
    )
    degradations = Degradations()
    policies = PolicyWatch(transport, scheduler, degradations)
    policies.crd_present = True
    return policies, scheduler, degradations


def policy(name: str, spec: Any, generation: int = 1, uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid, "generation": generation}, "spec": spec}


def test_a_spec_that_is_not_an_object_is_invalid_with_a_message_not_a_crash() -> None:
    policies, scheduler, degradations = watch()
    policies.on_event("ADDED", policy("odd", ["not", "an", "object"]))
    assert policies.objects["odd"].error == "spec: must be an object, not list"
    assert len(scheduler.policies) == 0
    assert "1 invalid one(s) ignored" in degradations.active["no_policy"].message


def test_no_spec_means_the_defaults_and_a_valid_policy_clears_no_policy() -> None:
    policies, scheduler, degradations = watch()
    policies.relisted(set())
    assert "no_policy" in degradations.active
    policies.on_event(None, {"metadata": {"name": "bare", "uid": "u", "generation": 1}})
    assert scheduler.policies.names() == ["bare"] and not policies.objects["bare"].error
    assert "no_policy" not in degradations.active
    assert [n.reason for n in degradations.notices] == ["NoPolicy", "NoPolicyResolved"]


def test_status_only_updates_do_not_reapply_and_a_new_generation_does() -> None:
    policies, scheduler, _ = watch()
    policies.on_event("ADDED", policy("p", {"weights": {"cpu": 1, "memory": 1}}))
    first = scheduler.policies.policies()[0]
    raw = policy("p", {"weights": {"cpu": 1, "memory": 1}})
    raw["status"] = {"podsScheduled": 3}
    policies.on_event("MODIFIED", raw)
    assert scheduler.policies.policies()[0] is first  # not re-validated, queue not woken
    assert policies.objects["p"].status == {"podsScheduled": 3}
    policies.on_event("MODIFIED", policy("p", {"weights": {"cpu": -1}}, generation=2))
    assert policies.objects["p"].error.startswith("spec.weights.cpu")
    assert len(scheduler.policies) == 0  # the invalid new version replaces the old one


def test_deleted_and_relisted_policies_are_forgotten() -> None:
    policies, scheduler, degradations = watch()
    policies.on_event("ADDED", policy("a", {}))
    policies.on_event("ADDED", policy("b", {}, uid="u2"))
    policies.on_event("DELETED", policy("a", {}))
    assert scheduler.policies.names() == ["b"]
    policies.relisted({"x"})  # b vanished while nobody watched
    assert not scheduler.policies.names() and not policies.objects
    assert "no_policy" in degradations.active
