from loadwise.devcluster import manifests
from loadwise.resources import CPU, PODS
from loadwise.state import ClusterState

from ..helpers import pod_info


def test_assumed_pod_confirmed_by_watch_is_not_double_counted() -> None:
    state = ClusterState()
    state.upsert_node(manifests.node("n"))
    pod = pod_info(cpu="500m")
    state.assume(pod, "n")
    assert state.requested("n")[CPU] == 500
    bound = pod_info(cpu="500m", node="n")
    bound.uid = pod.uid
    state.observe_bound(bound, terminal=False)
    assert state.requested("n")[CPU] == 500
    assert state.requested("n")[PODS] == 1
    assert not state.pods[pod.uid].assumed


def test_forget_releases_only_assumed_pods() -> None:
    state = ClusterState()
    pod = pod_info(cpu="500m")
    state.assume(pod, "n")
    state.forget(pod.uid)
    assert state.requested("n")[CPU] == 0
    real = pod_info(cpu="500m", node="n")
    state.observe_bound(real, terminal=False)
    state.forget(real.uid)  # a real (watched) pod is not released by a failed bind elsewhere
    assert state.requested("n")[CPU] == 500


def test_terminal_pods_free_their_node() -> None:
    state = ClusterState()
    pod = pod_info(cpu="1", node="n")
    state.observe_bound(pod, terminal=False)
    assert state.observe_bound(pod, terminal=True) is True
    assert state.requested("n")[CPU] == 0


def test_pod_seen_on_another_node_moves_its_accounting() -> None:
    state = ClusterState()
    pod = pod_info(cpu="1")
    state.assume(pod, "a")
    moved = pod_info(cpu="1", node="b")
    moved.uid = pod.uid
    state.observe_bound(moved, terminal=False)
    assert state.requested("a")[CPU] == 0
    assert state.requested("b")[CPU] == 1000
