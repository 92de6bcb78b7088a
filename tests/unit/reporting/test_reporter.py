"""Reporter and status.py over the FakeTransport: what the leader writes on SchedulingPolicies
and on its own Pod, and what it writes again after a failure."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY

from loadwise.degradations import Degradations
from loadwise.kube import times
from loadwise.kube.transport import STRATEGIC_MERGE
from loadwise.policies.policywatch import POLICIES_PATH, PolicyWatch
from loadwise.reporting import policy_status, reporter
from loadwise.reporting.policy_status import set_condition
from loadwise.reporting.reporter import CONDITION, LEGACY_FINALIZER, MERGE, Reporter
from loadwise.scheduler.binding.binder import Binder
from loadwise.scheduler.queue import SchedulingQueue
from loadwise.scheduler.scheduler import Scheduler
from loadwise.usage.cache import MetricsCache, NodeSample
from loadwise_dev import manifests

from ...fakes import Call, FakeTransport, Reply

NAME = "loadwise-scheduler"
OPERATOR_POD = {"apiVersion": "v1", "kind": "Pod", "name": "lw-0", "namespace": "lw-system"}


class Source:
    name = "prometheus"
    dimensions = ()

    async def fetch(self) -> dict[str, NodeSample]:
        return {}


class Setup:
    def __init__(self, target: dict[str, str] | None = None) -> None:
        self.failures: dict[str, list[Reply | BaseException]] = {}  # path -> next answers
        self.fake = FakeTransport(self.handle)
        self.cache = MetricsCache(Source(), 10.0)
        binder = Binder(self.fake, NAME)
        self.scheduler = Scheduler(NAME, binder, {"prometheus": self.cache}, SchedulingQueue())
        self.scheduler.on_node_event("ADDED", manifests.node("n1"))
        self.degradations = Degradations()
        self.policies = PolicyWatch(self.fake, self.scheduler.policies, self.degradations)
        self.policies.crd_present = True
        self.reporter = Reporter(
            self.fake, binder, self.scheduler, self.policies, self.degradations, target
        )

    def handle(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        params: Mapping[str, str] | None,
    ) -> Reply:
        failures = self.failures.get(path)
        if failures:
            failure = failures.pop(0)
            if isinstance(failure, BaseException):
                raise failure
            return failure
        return (201 if method == "POST" else 200), {}

    def fresh(self) -> None:
        self.cache.samples = {"n1": NodeSample(0.2, 0.3, time.time())}
        self.cache.last_error = None

    def failing(self) -> None:
        self.cache.last_error = "PrometheusError: HTTP 503"
        self.cache.samples = {}

    def policy(
        self, name: str, spec: Any, generation: int = 1, status: Mapping[str, Any] | None = None
    ) -> None:
        meta = {"name": name, "uid": f"uid-{name}", "generation": generation}
        self.policies.on_event("MODIFIED", {"metadata": meta, "spec": spec, "status": status})

    def watch_sees_patches(self, name: str) -> None:
        """The watch brings the policy back with what was patched merged into its status."""
        obj = self.policies.objects[name]
        status = dict(obj.status)
        for call in self.status_patches(name):
            status.update((call.body or {})["status"])
        obj.status = status

    def status_patches(self, name: str) -> list[Call]:
        return self.fake.requests("PATCH", f"{POLICIES_PATH}/{name}/status")

    def events(self, reason: str) -> list[Call]:
        return [
            c
            for c in self.fake.requests("POST", "/events")
            if c.body is not None and c.body["reason"] == reason
        ]


def report_errors() -> float:
    return REGISTRY.get_sample_value("loadwise_report_errors_total") or 0.0


async def test_a_status_patch_carries_only_what_changed_and_none_when_nothing_did() -> None:
    setup = Setup()
    setup.fresh()
    setup.policy("p", {}, status={"observedGeneration": 1})
    await setup.reporter.report_once()
    (first,) = setup.status_patches("p")
    assert first.content_type == MERGE
    status = (first.body or {})["status"]
    assert set(status) == {"conditions", "nodesWithFreshMetrics", "lastMetricsRefresh"}
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("MetricsAvailable", "True"),
        ("Ready", "True"),
    ]
    assert status["nodesWithFreshMetrics"] == 1

    setup.watch_sees_patches("p")
    await setup.reporter.report_once()
    assert len(setup.status_patches("p")) == 1  # nothing changed: nothing written


async def test_the_refresh_time_is_no_heartbeat_and_conditions_carry_their_generation() -> None:
    """A refresh alone rewrites no status (every 10 s on every policy would be a heartbeat in
    status); the time goes with other changes, or once it is 5 minutes old."""
    setup = Setup()
    setup.fresh()
    setup.cache.last_success = time.time() - 10
    setup.policy("p", {}, generation=4, status={"observedGeneration": 4})
    await setup.reporter.report_once()
    (first,) = setup.status_patches("p")
    status = (first.body or {})["status"]
    assert {c["observedGeneration"] for c in status["conditions"]} == {4}
    setup.watch_sees_patches("p")
    setup.cache.last_success = time.time()  # refreshed again, 10 s later
    await setup.reporter.report_once()
    assert len(setup.status_patches("p")) == 1
    setup.policies.objects["p"].status = {  # as if written 10 minutes and more ago
        **setup.policies.objects["p"].status,
        "lastMetricsRefresh": "2020-01-01T00:00:00Z",
    }
    await setup.reporter.report_once()
    assert set((setup.status_patches("p")[-1].body or {})["status"]) == {"lastMetricsRefresh"}


async def test_an_invalid_policy_gets_one_event_per_generation_on_default() -> None:
    setup = Setup()
    setup.policy("bad", {"weights": {"cpu": -1}})
    await setup.reporter.report_once()
    await setup.reporter.report_once()
    (event,) = setup.events("InvalidPolicy")
    assert event.path == "/api/v1/namespaces/default/events"
    body = event.body or {}
    assert body["type"] == "Warning" and body["message"].startswith("ignored: spec.weights.cpu")
    assert body["involvedObject"] == {
        "apiVersion": "loadwise.io/v1alpha1",
        "kind": "SchedulingPolicy",
        "name": "bad",
        "uid": "uid-bad",
    }  # cluster-scoped: no namespace, so `kubectl describe schedpol` finds it
    (ready,) = (setup.status_patches("bad")[0].body or {})["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "Invalid")

    setup.policy("bad", {"weights": {"cpu": -2}}, generation=2)
    await setup.reporter.report_once()
    await setup.reporter.report_once()
    assert len(setup.events("InvalidPolicy")) == 2


async def test_metrics_degraded_is_posted_once_per_transition() -> None:
    setup = Setup()
    setup.fresh()
    setup.policy("p", {})
    await setup.reporter.report_once()
    assert not setup.events("MetricsDegraded")
    setup.failing()
    for _ in range(3):
        await setup.reporter.report_once()
    (degraded,) = setup.events("MetricsDegraded")
    assert "HTTP 503" in (degraded.body or {})["message"]
    assert degraded.path == "/api/v1/namespaces/default/events"
    setup.fresh()
    await setup.reporter.report_once()
    await setup.reporter.report_once()
    assert len(setup.events("MetricsRecovered")) == 1
    setup.failing()
    await setup.reporter.report_once()
    assert len(setup.events("MetricsDegraded")) == 2


async def test_a_failed_status_patch_is_counted_and_written_by_the_next_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = iter(range(1_800_000_000, 1_900_000_000, 7))  # every stamp a new second
    monkeypatch.setattr(policy_status, "stamp", lambda: times.stamp(next(ticks)))
    setup = Setup()
    setup.fresh()
    setup.policy("p", {})
    setup.failures[f"{POLICIES_PATH}/p/status"] = [(500, b"etcd timeout"), TimeoutError()]
    before = report_errors()
    await setup.reporter.report_once()
    await setup.reporter.report_once()
    assert report_errors() == before + 2
    await setup.reporter.report_once()
    first, second, third = setup.status_patches("p")
    assert first.body == second.body == third.body  # the same write, until it lands
    assert report_errors() == before + 2


async def test_the_degraded_condition_on_our_pod_is_retried_until_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = iter(range(1_800_000_000, 1_900_000_000, 7))  # every stamp a new second
    monkeypatch.setattr(reporter, "stamp", lambda: times.stamp(next(ticks)))
    setup = Setup(target=OPERATOR_POD)
    setup.fresh()
    setup.policy("p", {})
    setup.degradations.set("api_unreachable", "the API server has not answered for 4s")
    path = "/api/v1/namespaces/lw-system/pods/lw-0/status"
    setup.failures[path] = [(503, b"")]
    await setup.reporter.report_once()
    (event,) = setup.events("ApiServerUnreachable")
    assert event.path == "/api/v1/namespaces/lw-system/events"
    assert (event.body or {})["involvedObject"]["namespace"] == "lw-system"
    await setup.reporter.report_once()
    await setup.reporter.report_once()
    first, second = setup.fake.requests("PATCH", path)  # failed, then written; then no more
    assert first.body == second.body and second.content_type == STRATEGIC_MERGE
    (condition,) = (second.body or {})["status"]["conditions"]
    assert (condition["type"], condition["status"]) == (CONDITION, "True")
    assert condition["reason"] == "ApiServerUnreachable"
    assert len(setup.events("ApiServerUnreachable")) == 1


async def test_a_legacy_finalizer_is_removed() -> None:
    setup = Setup()
    setup.fresh()
    meta = {"name": "p", "uid": "u", "generation": 1, "finalizers": [LEGACY_FINALIZER, "x/y"]}
    setup.policies.on_event("ADDED", {"metadata": meta, "spec": {}})
    await setup.reporter.report_once()
    (patch,) = setup.fake.requests("PATCH", f"{POLICIES_PATH}/p")[1:]
    assert patch.path == f"{POLICIES_PATH}/p"
    assert patch.body == {"metadata": {"finalizers": ["x/y"]}}


def test_set_condition_keeps_the_transition_time_while_the_status_holds() -> None:
    old = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Other", "status": "True", "lastTransitionTime": "2026-01-02T00:00:00Z"},
    ]
    same = set_condition(old, {"type": "Ready", "status": "True", "reason": "Valid"})
    assert [c["type"] for c in same] == ["Other", "Ready"]  # the other writer's is kept
    assert same[1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = set_condition(old, {"type": "Ready", "status": "False", "reason": "Invalid"})
    assert flipped[1]["lastTransitionTime"] != "2026-01-01T00:00:00Z"


async def test_a_degradation_event_is_not_lost_when_the_api_server_is_down() -> None:
    """The notice stays queued until its event is written (it was popped and lost before: the
    ApiServerUnreachable Warning of an outage never appeared after it)."""
    setup = Setup(target=OPERATOR_POD)
    setup.fresh()
    setup.degradations.set("api_unreachable", "the API server has not answered for 4s")
    setup.degradations.clear("api_unreachable", "the API server was unreachable for 9s")
    setup.failures["/api/v1/namespaces/lw-system/events"] = [
        aiohttp.ClientConnectionError("refused"),
        aiohttp.ClientConnectionError("refused"),
    ]
    await setup.reporter.report_once()
    await setup.reporter.report_once()  # two refused attempts of the first notice
    await setup.reporter.report_once()  # the API server answers again: both, in order
    await setup.reporter.report_once()  # and nothing more
    reasons = [(c.body or {})["reason"] for c in setup.fake.requests("POST", "/events")]
    assert reasons == ["ApiServerUnreachable"] * 3 + ["ApiServerUnreachableResolved"]


async def test_a_metrics_degraded_event_that_failed_is_posted_by_the_next_pass() -> None:
    setup = Setup()
    setup.fresh()
    setup.policy("p", {})
    await setup.reporter.report_once()
    setup.failing()
    setup.failures["/api/v1/namespaces/default/events"] = [(503, b"")]
    await setup.reporter.report_once()  # refused (503)
    await setup.reporter.report_once()  # written
    await setup.reporter.report_once()  # once per transition: not again
    assert len(setup.events("MetricsDegraded")) == 2


async def test_an_event_retried_by_the_next_pass_keeps_its_name() -> None:
    """A POST whose answer was lost may have been written: the next pass posts the same name,
    so the API server answers 409 rather than taking a second event (a network black hole)."""
    setup = Setup(target=OPERATOR_POD)
    setup.fresh()
    setup.policy("bad", {"weights": {"cpu": -1}})
    setup.degradations.set("api_unreachable", "the API server has not answered for 4s")
    lost = aiohttp.ClientConnectionError("answer lost")
    setup.failures["/api/v1/namespaces/default/events"] = [lost, (409, b"AlreadyExists")]
    setup.failures["/api/v1/namespaces/lw-system/events"] = [lost, (409, b"AlreadyExists")]
    for _ in range(3):
        await setup.reporter.report_once()
    posts = [c.body or {} for c in setup.fake.requests("POST", "/events")]
    names: dict[str, set[str]] = {}
    for body in posts:
        names.setdefault(body["reason"], set()).add(body["metadata"]["name"])
    # a policy's event and the first notice (NoPolicy) each tried twice under one name, the
    # second notice once after them, and the 409s were taken as written: nothing more
    assert {r: len(n) for r, n in names.items()} == {
        "InvalidPolicy": 1,
        "NoPolicy": 1,
        "ApiServerUnreachable": 1,
    }
    assert len(posts) == 5
    assert not setup.reporter._unwritten


def policy_gauges(name: str) -> tuple[float | None, float | None]:
    labels = {"policy": name}
    return (
        REGISTRY.get_sample_value("loadwise_policy_metrics_available", labels),
        REGISTRY.get_sample_value("loadwise_policy_fresh_nodes", labels),
    )


async def test_per_policy_gauges_go_when_this_replica_stops_leading() -> None:
    """Only the leader keeps them current: a former leader's last 1 would hide the new
    leader's 0 under the dashboard's max over replicas."""
    setup = Setup()
    setup.fresh()
    setup.policy("gauged", {})
    task = asyncio.create_task(setup.reporter.run(3600))
    for _ in range(100):
        await asyncio.sleep(0)
        if policy_gauges("gauged") != (None, None):
            break
    assert policy_gauges("gauged") == (1.0, 1.0)
    task.cancel()  # what the Runtime does when the Lease is lost or the operator stops
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert policy_gauges("gauged") == (None, None)
    # The Runtime also drops them at the moment of the loss, and twice is harmless.
    await setup.reporter.report_once()
    assert policy_gauges("gauged") == (1.0, 1.0)
    setup.reporter.forget_gauges()
    setup.reporter.forget_gauges()
    assert policy_gauges("gauged") == (None, None)


async def test_hot_nodes_are_counted_by_the_policys_thresholds_and_fresh_samples() -> None:
    setup = Setup()
    for name in ("n2", "n3", "n4"):
        setup.scheduler.on_node_event("ADDED", manifests.node(name))
    now = time.time()
    setup.cache.samples = {
        "n1": NodeSample(0.2, 0.3, now),  # cool
        "n2": NodeSample(0.9, 0.3, now),  # over 85% CPU
        "n3": NodeSample(0.5, 0.95, now),  # over 90% memory
        "n4": NodeSample(0.99, 0.99, now - 3600),  # hot but stale: not judged
        "gone": NodeSample(0.99, 0.99, now),  # no such node
    }
    setup.policy("default-limits", {})
    setup.policy("strict", {"hotThresholds": {"cpu": 15}})
    await setup.reporter.report_once()
    hot = {
        name: REGISTRY.get_sample_value("loadwise_policy_hot_nodes", {"policy": name})
        for name in ("default-limits", "strict")
    }
    assert hot == {"default-limits": 2.0, "strict": 3.0}
