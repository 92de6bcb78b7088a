"""Binder: what each answer to a Binding means, and the bodies of its writes."""

from __future__ import annotations

import aiohttp
import pytest

from loadwise.kube.transport import STRATEGIC_MERGE
from loadwise.scheduler.binding.binder import Binder, BindResult

from ...fakes import Reply, answering
from ...helpers import pod_info

NAME = "loadwise-scheduler"


@pytest.mark.parametrize(
    ("reply", "result"),
    [
        ((201, {"kind": "Status", "status": "Success"}), BindResult.BOUND),
        ((200, b""), BindResult.BOUND),
        ((201, b"<html>not json"), BindResult.BOUND),  # the body is never needed
        ((404, {"kind": "Status", "reason": "NotFound"}), BindResult.GONE),
        ((409, {"kind": "Status", "reason": "Conflict"}), BindResult.CONFLICT),
        ((500, b"etcdserver: request timed out"), BindResult.ERROR),
        ((403, {"kind": "Status", "reason": "Forbidden"}), BindResult.ERROR),
        ((429, b""), BindResult.ERROR),
        (TimeoutError(), BindResult.ERROR),
        (aiohttp.ClientConnectionError("refused"), BindResult.ERROR),
        (aiohttp.ClientPayloadError("body cut short"), BindResult.ERROR),
    ],
)
async def test_each_answer_to_a_binding_is_classified(
    reply: Reply | BaseException, result: BindResult
) -> None:
    fake = answering(reply)
    pod = pod_info("web", namespace="team")
    assert await Binder(fake, NAME).bind(pod, "node-3") is result
    (call,) = fake.calls
    assert (call.method, call.path) == ("POST", "/api/v1/namespaces/team/pods/web/binding")
    assert call.body == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "web", "namespace": "team", "uid": pod.uid},  # UID precondition
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-3"},
    }


async def test_a_pod_event_names_the_pod_and_lives_in_its_namespace() -> None:
    fake = answering((201, {}))
    pod = pod_info("web", namespace="team")
    await Binder(fake, NAME).event(pod, "Normal", "Scheduled", "x" * 2000)
    (call,) = fake.calls
    assert (call.method, call.path) == ("POST", "/api/v1/namespaces/team/events")
    body = call.body or {}
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web",
        "namespace": "team",
        "uid": pod.uid,
    }
    assert body["metadata"]["namespace"] == "team"
    assert (body["type"], body["reason"], body["action"]) == ("Normal", "Scheduled", "Binding")
    assert body["source"] == {"component": NAME} and len(body["message"]) == 1024


async def test_unschedulable_is_a_strategic_merge_patch_of_the_pod_scheduled_condition() -> None:
    fake = answering((200, {}))
    await Binder(fake, NAME).mark_unschedulable(pod_info("web"), "0/1 nodes are available")
    (call,) = fake.calls
    assert (call.method, call.path) == ("PATCH", "/api/v1/namespaces/default/pods/web/status")
    assert call.content_type == STRATEGIC_MERGE
    (condition,) = (call.body or {})["status"]["conditions"]
    assert {k: condition[k] for k in ("type", "status", "reason", "message")} == {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available",
    }


async def test_an_event_on_a_cluster_scoped_object_lives_in_default_and_names_no_namespace() -> (
    None
):
    fake = answering((201, {}))
    involved = {"apiVersion": "loadwise.io/v1alpha1", "kind": "SchedulingPolicy", "name": "p"}
    await Binder(fake, NAME).object_event(involved, "Warning", "InvalidPolicy", "bad")
    (call,) = fake.calls
    assert call.path == "/api/v1/namespaces/default/events"
    body = call.body or {}
    assert "namespace" not in body["involvedObject"]
    assert body["metadata"]["namespace"] == "default"


@pytest.mark.parametrize(
    "reply", [(500, b"no"), (403, b"no"), TimeoutError(), aiohttp.ClientConnectionError()]
)
async def test_writes_other_than_the_binding_never_raise(reply: Reply | BaseException) -> None:
    binder = Binder(answering(reply), NAME)
    pod = pod_info("web")
    await binder.event(pod, "Warning", "FailedScheduling", "m")
    await binder.mark_unschedulable(pod, "m")
    await binder.object_event({"kind": "Lease", "name": "l", "namespace": "ns"}, "Normal", "R", "m")
