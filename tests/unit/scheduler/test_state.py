from typing import Any

from loadwise.resources import CPU, PODS
from loadwise.scheduler.state import ClusterState
from loadwise_dev import manifests

from ...helpers import pod_info


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


def test_drop_missing_keeps_assumed_pods_and_frees_the_rest() -> None:
    state = ClusterState()
    state.upsert_node(manifests.node("n"))
    state.upsert_node(manifests.node("gone"))
    real = pod_info(cpu="1", node="n")
    state.observe_bound(real, terminal=False)
    assumed = pod_info(cpu="1")
    state.assume(assumed, "n")
    assert state.drop_missing({real.uid, assumed.uid}, {"gone"})
    assert real.uid not in state.pods and assumed.uid in state.pods
    assert state.requested("n")[CPU] == 1000
    assert "gone" not in state.nodes


def test_drop_missing_frees_a_pod_whose_bind_landed_but_was_never_confirmed() -> None:
    """Bound, then deleted while the watch was away: the relist that misses it frees its room
    (a fault run once left 49 pods pending on 4.9 free CPUs)."""
    state = ClusterState()
    state.upsert_node(manifests.node("n"))
    landed, in_flight = pod_info(cpu="1"), pod_info(cpu="1")
    state.assume(landed, "n")
    state.assume(in_flight, "n")
    landed.bind_landed = True
    assert state.drop_missing({landed.uid, in_flight.uid}, set())
    assert landed.uid not in state.pods and in_flight.uid in state.pods
    assert state.requested("n")[CPU] == 1000
    assert state.accounted_cpu() == 1000


def test_changed_bound_pod_is_reaccounted() -> None:
    """Labels, deletion and resized requests of a placed pod are taken from each new event."""
    state = ClusterState()
    first = pod_info(cpu="1", node="n", labels={"v": "1"})
    state.observe_bound(first, terminal=False)
    resized = pod_info(cpu="500m", node="n", labels={"v": "2"})
    resized.uid = first.uid
    resized.deleting = True
    assert state.observe_bound(resized, terminal=False) is True  # capacity was freed
    assert state.requested("n")[CPU] == 500 and state.requested("n")[PODS] == 1
    assert state.pods[first.uid].labels == {"v": "2"} and state.pods[first.uid].deleting


def test_pods_seen_at_startup_are_not_estimated_as_new() -> None:
    import time as clock

    from loadwise.framework.types import parse_pod

    raw = manifests.pod("old")
    raw["metadata"]["uid"] = "old-uid"
    raw["spec"]["nodeName"] = "n"
    raw["status"] = {
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]
    }
    state = ClusterState()
    state.observe_bound(parse_pod(raw), terminal=False)
    assert list(state.placed_since("n", clock.time() - 600)) == []


def test_a_pod_assumed_twice_is_estimated_once() -> None:
    state = ClusterState()
    pod = pod_info(cpu="1")
    state.assume(pod, "n", at=100.0)
    state.forget(pod.uid)  # the bind failed
    state.assume(pod, "n", at=101.0)  # retried onto the same node
    assert [p.uid for p in state.placed_since("n", 50.0)] == [pod.uid]


def test_accounted_cpu_counts_existing_nodes_only() -> None:
    """A pod bound to a deleted node (until the pod GC removes it) holds nothing schedulable."""
    state = ClusterState()
    state.upsert_node(manifests.node("kept"))
    state.upsert_node(manifests.node("gone"))
    state.observe_bound(pod_info(cpu="1", node="kept"), terminal=False)
    state.observe_bound(pod_info(cpu="2", node="gone"), terminal=False)
    assert state.accounted_cpu() == 3000
    state.delete_node("gone")
    assert state.accounted_cpu() == 1000


def test_trimming_the_placement_log_drops_only_what_no_read_needs() -> None:
    """Reads never trim (a cycle is pure); trim_placements, between cycles, keeps the log small
    under churn without changing what placed_since answers after the cutoff."""
    state = ClusterState()
    state.upsert_node(manifests.node("n"))
    old, gone, new = pod_info(cpu="1"), pod_info(cpu="1"), pod_info(cpu="1")
    state.assume(old, "n", at=100.0)
    state.assume(gone, "n", at=150.0)
    state.assume(new, "n", at=200.0)
    state.remove_pod(gone.uid)
    assert [p.uid for p in state.placed_since("n", 120.0)] == [new.uid]
    assert len(state.loads["n"].recent) == 3  # reading changed nothing
    assert state.trim_placements(lambda node: 120.0) == 2  # `old` is covered, `gone` is gone
    assert [p.uid for p in state.placed_since("n", 120.0)] == [new.uid]
    assert [p.uid for p in state.placed_since("n", 0.0)] == [new.uid]


def test_a_placed_pod_is_parsed_with_every_field_plugins_read_of_placed_pods() -> None:
    """Placed pods skip their own filters' inputs at parse time (start-up parses every pod in
    the cluster); whatever a plugin declares it reads of placed pods must still be there."""
    from loadwise.framework.profile import DEFAULT_PROFILE
    from loadwise.framework.types import parse_pod

    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    raw = manifests.pod("full", labels={"app": "db"})
    raw["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "db",
            "uid": "u",
            "controller": True,
        }
    ]
    raw["metadata"]["uid"] = "uid-full"
    spec = raw["spec"]
    spec["nodeName"] = "n1"
    spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    spec["tolerations"] = [{"key": "k", "operator": "Exists"}]
    spec["nodeSelector"] = {"disk": "ssd"}
    spec["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    ]
    spec["affinity"] = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
    }
    full, placed = parse_pod(raw), parse_pod(raw, placed=True)
    assert DEFAULT_PROFILE.placed_fields
    for field in DEFAULT_PROFILE.placed_fields:
        assert getattr(placed, field) == getattr(full, field), field
    assert full.anti_affinity_terms and full.host_ports and full.owner is not None
    assert full.tolerations and not placed.tolerations  # the part that is skipped


def test_nodes_are_found_by_their_hostname_label_as_it_changes() -> None:
    def named(name: str, host: str | None) -> dict[str, Any]:
        raw = manifests.node(name)
        labels = raw["metadata"]["labels"]
        if host is None:
            del labels["kubernetes.io/hostname"]
        else:
            labels["kubernetes.io/hostname"] = host
        return raw

    state = ClusterState()
    state.upsert_node(named("a", "a"))
    state.upsert_node(named("b", "h"))
    state.upsert_node(named("c", "h"))  # labels need not be unique
    state.upsert_node(named("d", None))
    assert state.with_hostnames({"a"}) == {"a"} and state.with_hostnames({"h"}) == {"b", "c"}
    assert state.with_hostnames({"b", "x"}) == set() and state.with_hostnames({""}) == {"d"}
    assert state.with_hostnames({"a", "h", "x", "y", "z"}) == {"a", "b", "c"}
    state.upsert_node(named("b", "b"))  # relabelled
    assert state.with_hostnames({"h"}) == {"c"} and state.with_hostnames({"b"}) == {"b"}
    state.delete_node("c")
    assert state.with_hostnames({"h"}) == set()
    state.drop_missing(set(), {"a"})
    assert state.with_hostnames({"a", "b"}) == {"b"}
