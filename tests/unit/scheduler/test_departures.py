"""A pod group's member judges a node by its peak without the pods that have left it since
(scheduler/departures.py): their use is in the older samples, and is not coming back."""

from __future__ import annotations

import pytest

from loadwise.scheduler.departures import Departures, peaks
from loadwise.usage.cache import NodeSample
from loadwise_dev import manifests

from ...helpers import pod_info, state_with


def test_a_peak_leaves_out_the_pods_that_ran_in_it_and_have_left() -> None:
    clock = [200.0]
    departures = Departures(lambda: clock[0])
    state = state_with(manifests.node("n0", cpu="4"))
    early = pod_info("early", cpu="1", node="n0")  # left before the busy sample: not in it
    early.placed_at = 10.0
    busy = pod_info("busy", cpu="2", node="n0")  # in the busy sample, left after it
    busy.placed_at = 50.0
    late = pod_info("late", cpu="1", node="n0")  # placed after the busy sample
    late.placed_at = 150.0
    for pod, left in ((early, 90.0), (busy, 160.0), (late, 170.0)):
        clock[0] = left
        departures.left(pod)
    clock[0] = 200.0
    points = {"n0": [NodeSample(0.9, 0.5, 100.0), NodeSample(0.3, 0.2, 190.0)]}
    latest = {"n0": NodeSample(0.3, 0.2, 200.0)}

    def judged(estimate: float) -> NodeSample:
        return peaks(
            lambda node, since: [p for p in points[node] if p.timestamp >= since],
            latest, 120.0, state, departures,
            lambda pod: (estimate * pod.requests.nonzero[0], 0.0),
        )["n0"]  # fmt: skip

    assert judged(1.0).cpu == pytest.approx(0.9 - 2 / 4)  # busy's 2 CPUs of 4: 0.4 > 0.3
    assert judged(1.5).cpu == pytest.approx(0.3)  # less than the latest: the latest stands
    assert judged(1.0).timestamp == 200.0  # freshness is the latest sample's
    assert judged(1.0).seen == 100.0  # over 100 s of history: from the point at 100 on
    assert judged(1.0).memory == pytest.approx(0.5)  # its estimate uses no memory


def test_a_departure_is_forgotten_after_a_while_and_pods_never_placed_are_not_recorded() -> None:
    clock = [0.0]
    departures = Departures(lambda: clock[0])
    departures.left(pod_info("pending", cpu="1"))  # on no node
    assert not departures.version
    departures.left(pod_info("gone", cpu="1", node="n0"))
    assert [p.name for _, p in departures.on("n0")] == ["gone"]
    clock[0] = 1000.0
    assert not departures.on("n0")


def test_a_peak_counts_the_pods_placed_since_it_that_are_still_there() -> None:
    state = state_with(manifests.node("n0", cpu="4"))
    here = pod_info("here", cpu="1", node="n0")  # on the node before the busy sample
    state.assume(here, "n0", at=50.0)
    since = pod_info("since", cpu="2", node="n0")  # placed after the busy sample, still there
    state.assume(since, "n0", at=150.0)
    after = pod_info("after", cpu="1", node="n0")  # after the latest sample: the scorer's own
    state.assume(after, "n0", at=205.0)
    points = {"n0": [NodeSample(0.7, 0.5, 100.0)]}
    latest = {"n0": NodeSample(0.6, 0.5, 200.0)}
    peak = peaks(
        lambda node, since: [p for p in points[node] if p.timestamp >= since],
        latest, 120.0, state, Departures(lambda: 200.0),
        lambda pod: (pod.requests.nonzero[0], 0.0),
    )["n0"]  # fmt: skip
    assert peak.cpu == pytest.approx(0.7 + 2 / 4)  # the busy moment with `since` on it too


def test_a_rate_window_shows_a_pod_by_the_share_of_it_the_pod_was_there() -> None:
    clock = [255.0]
    departures = Departures(lambda: clock[0])
    state = state_with(manifests.node("n0", cpu="4"))
    gone = pod_info("gone", cpu="2", node="n0")  # left 45 s before the latest: a quarter in it
    gone.placed_at = 10.0
    departures.left(gone)
    new = pod_info("new", cpu="2", node="n0")  # placed 40 s before the older point: 2/3 in it
    state.assume(new, "n0", at=230.0)
    clock[0] = 300.0
    older = NodeSample(0.9, 0.5, 270.0, covers_until=210.0)  # rates over the last 60 s
    latest = NodeSample(0.5, 0.5, 300.0, covers_until=240.0)

    def peak(points: list[NodeSample]) -> float:
        return peaks(
            lambda node, since: list(points), {"n0": latest}, 120.0, state, departures,
            lambda pod: (pod.requests.nonzero[0], 0.0),
        )["n0"].cpu  # fmt: skip

    # the latest less the quarter of `gone`'s 2 CPUs it still shows (judged by the window's
    # middle, 270, it showed none of it: nothing was taken off)
    assert peak([]) == pytest.approx(0.5 - 0.25 * 2 / 4)
    # the older point showed 3/4 of `gone` (it left 15 s before the point) and 2/3 of `new`:
    # less the one, plus the third it lacks of the other (`new` is wholly in the latest)
    assert peak([older]) == pytest.approx(0.9 - 0.75 * 2 / 4 + 2 / 4 / 3)
