"""Odd but API-valid pods, nodes and SchedulingPolicies (and some invalid policies), seeded.

What a scheduler meets in a real cluster and tests rarely show: quantities far beyond any node,
resources nobody offers, selectors and affinity that match nothing, label values at the edge of
the grammar, tolerations of everything or of taints that do not exist, init and sidecar
containers bigger than the app, limits without requests, scheduling gates, nodes that are
cordoned, tainted, NotReady or have no CPU, and policies with extreme weights. The API server
accepts all of these; invalid policies are refused by the CRD schema (422) and only counted.

Every generated pod carries the label `odd=<kind>` so results can be told apart from the burst.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from . import manifests

ODD_LABEL = "odd"
SCHEDULER = "loadwise-scheduler"

Pod = dict[str, Any]


def _container(name: str, requests: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "registry.k8s.io/pause:3.10"}
    if requests is not None:
        container["resources"] = {"requests": requests}
    container.update(extra)
    return container


def _pod(name: str, namespace: str, kind: str, **spec: Any) -> Pod:
    body = manifests.pod(name, namespace=namespace, cpu="10m", memory="16Mi")
    body["metadata"]["labels"][ODD_LABEL] = kind
    body["spec"].update(spec)
    return body


def _huge_cpu(rng: random.Random, name: str, ns: str) -> Pod:
    cpu = rng.choice(["100000", "1e6", "99999999m", "4096"])
    return _pod(name, ns, "huge-cpu", containers=[_container("app", {"cpu": cpu})])


def _huge_memory(rng: random.Random, name: str, ns: str) -> Pod:
    memory = rng.choice(["1Ei", "900Pi", "123456789Gi"])
    return _pod(name, ns, "huge-memory", containers=[_container("app", {"memory": memory})])


def _unknown_resource(rng: random.Random, name: str, ns: str) -> Pod:
    resource = rng.choice(["example.com/widget", "vendor.io/fpga", "hugepages-1Gi"])
    amount = "1Gi" if resource.startswith("hugepages") else str(rng.randint(1, 8))
    requests = {"cpu": "10m", resource: amount}
    limits = {resource: amount}  # extended resources and hugepages need requests == limits
    container = _container("app", requests)
    container["resources"]["limits"] = limits
    if resource.startswith("hugepages"):
        container["resources"]["limits"]["memory"] = "2Gi"
        container["resources"]["requests"]["memory"] = "2Gi"
    return _pod(name, ns, "unknown-resource", containers=[container])


def _selector_nothing(rng: random.Random, name: str, ns: str) -> Pod:
    return _pod(
        name,
        ns,
        "selector-nothing",
        nodeSelector={"example.com/nowhere": rng.choice(["true", "x" * 63, "a.b-c_d"])},
    )


def _affinity_nothing(rng: random.Random, name: str, ns: str) -> Pod:
    expressions = rng.choice(
        [
            [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["no-such-node"]}],
            [{"key": "loadwise.io/simulated", "operator": "DoesNotExist"}],
            [{"key": "loadwise.io/simulated", "operator": "Gt", "values": ["5"]}],
            [{"key": "kubernetes.io/os", "operator": "NotIn", "values": ["linux"]}],
        ]
    )
    terms = [{"matchExpressions": expressions}]
    if rng.random() < 0.5:
        terms.append({"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["nowhere-0"]}
        ]})  # fmt: skip
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms
        }}
    }  # fmt: skip
    return _pod(name, ns, "affinity-nothing", affinity=affinity)


def _odd_labels(rng: random.Random, name: str, ns: str) -> Pod:
    pod = _pod(name, ns, "odd-labels", containers=[_container("app", {"cpu": "1m"})])
    pod["metadata"]["labels"].update(
        {
            "a" * 63: "b" * 63,
            "example.com/" + "k" * 50: "",
            "x.y-z_w": "0-0.0_0",
            "UPPER": "Mixed.Case-1_2",
            "team": rng.choice(["", "a", "Z9"]),
        }
    )
    pod["metadata"]["annotations"] = {"note": "é ü ✓ " + "~" * 200}
    return pod


def _tolerate_everything(rng: random.Random, name: str, ns: str) -> Pod:
    tolerations = rng.choice(
        [
            [{"operator": "Exists"}],
            [{"operator": "Exists", "effect": "NoSchedule"}],
            [{"key": "nonexistent.example/taint", "operator": "Equal", "value": "x" * 63,
              "effect": "NoExecute", "tolerationSeconds": 0}],
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
              "effect": "NoSchedule"},
             {"key": "odd", "operator": "Exists", "effect": "PreferNoSchedule"}],
        ]
    )  # fmt: skip
    return _pod(name, ns, "tolerations", tolerations=tolerations)


def _best_effort(rng: random.Random, name: str, ns: str) -> Pod:
    return _pod(name, ns, "best-effort", containers=[_container("app")])


def _limits_only(rng: random.Random, name: str, ns: str) -> Pod:
    container = _container("app")
    container["resources"] = {"limits": {"cpu": rng.choice(["5m", "20m"]), "memory": "32Mi"}}
    return _pod(name, ns, "limits-only", containers=[container])


def _tiny(rng: random.Random, name: str, ns: str) -> Pod:
    requests = {"cpu": rng.choice(["1m", "0", "0.001"]), "memory": rng.choice(["1", "0", "1Ki"])}
    return _pod(name, ns, "tiny", containers=[_container("app", requests)])


def _init_peak(rng: random.Random, name: str, ns: str) -> Pod:
    """An init container far bigger than the app: the pod needs the peak."""
    return _pod(
        name,
        ns,
        "init-peak",
        initContainers=[_container("init", {"cpu": rng.choice(["3", "64"]), "memory": "64Mi"})],
        containers=[_container("app", {"cpu": "5m", "memory": "16Mi"})],
    )


def _sidecar(rng: random.Random, name: str, ns: str) -> Pod:
    return _pod(
        name,
        ns,
        "sidecar",
        initContainers=[
            _container("side", {"cpu": "5m", "memory": "8Mi"}, restartPolicy="Always"),
            _container("init", {"cpu": "10m", "memory": "8Mi"}),
        ],
        containers=[_container("app", {"cpu": "5m"}), _container("two", {"memory": "4Mi"})],
    )


def _gated(rng: random.Random, name: str, ns: str) -> Pod:
    return _pod(name, ns, "gated", schedulingGates=[{"name": "example.com/wait-" + "g" * 20}])


def _self_anti_affinity(rng: random.Random, name: str, ns: str) -> Pod:
    """Required anti-affinity against a label nobody carries: trivially satisfiable."""
    affinity = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"example.com/never": "present"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    return _pod(name, ns, "anti-affinity", affinity=affinity)


def _other_scheduler(rng: random.Random, name: str, ns: str) -> Pod:
    """Not ours: loadwise must leave it alone (stays pending: nobody schedules it)."""
    pod = _pod(name, ns, "other-scheduler")
    pod["spec"]["schedulerName"] = rng.choice(["nobody", "x" * 60])
    return pod


def _long_name(rng: random.Random, name: str, ns: str) -> Pod:
    long = (name + "-" + "n" * 253)[:253].rstrip("-.")
    return _pod(long, ns, "long-name")


GENERATORS: list[tuple[Callable[[random.Random, str, str], Pod], float]] = [
    (_huge_cpu, 1.0),
    (_huge_memory, 0.5),
    (_unknown_resource, 1.0),
    (_selector_nothing, 1.0),
    (_affinity_nothing, 1.0),
    (_odd_labels, 1.0),
    (_tolerate_everything, 1.0),
    (_best_effort, 1.0),
    (_limits_only, 0.5),
    (_tiny, 1.0),
    (_init_peak, 0.5),
    (_sidecar, 0.5),
    (_gated, 0.3),
    (_self_anti_affinity, 0.3),
    (_other_scheduler, 0.3),
    (_long_name, 0.2),
]


def odd_pods(rng: random.Random, count: int, namespace: str, prefix: str = "odd") -> list[Pod]:
    makers = [g for g, _ in GENERATORS]
    weights = [w for _, w in GENERATORS]
    return [
        rng.choices(makers, weights)[0](rng, f"{prefix}-{i:05d}", namespace) for i in range(count)
    ]


def odd_nodes(rng: random.Random, count: int, prefix: str = "oddnode") -> list[dict[str, Any]]:
    """Valid nodes a scheduler must handle: cordoned, tainted, NotReady, no CPU, odd labels."""
    nodes = []
    for i in range(count):
        name = f"{prefix}-{i:03d}"
        kind = i % 6
        if kind == 0:
            body = manifests.node(name, unschedulable=True)
        elif kind == 1:
            body = manifests.node(name)
            body["spec"]["taints"] = [
                {"key": "example.com/" + "t" * 40, "value": "v" * 63, "effect": "NoSchedule"},
                {"key": "odd", "effect": "PreferNoSchedule"},
            ]
        elif kind == 2:
            body = manifests.node(name, ready=False)
        elif kind == 3:
            body = manifests.node(name, cpu="0", memory="0", pods=0)
        elif kind == 4:
            body = manifests.node(name, labels={"a" * 63: "", "x.y-z_w": "0-0.0_0"})
            body["spec"]["taints"] = [{"key": "dedicated", "value": "odd", "effect": "NoExecute"}]
        else:
            body = manifests.node(
                name, cpu="1m", memory="1Ki", pods=1, extra={"example.com/x": "0"}
            )
        body["metadata"]["labels"][ODD_LABEL] = str(kind)
        nodes.append(body)
    return nodes


def odd_policies(rng: random.Random, count: int, prefix: str = "odd") -> list[dict[str, Any]]:
    """Valid policies with extreme settings; the ones selecting burst pods rank below the
    default policy (precedence -1000), the rest select only odd pods."""
    specs: list[dict[str, Any]] = [
        {"weights": {"cpu": 100, "memory": 0}, "precedence": -1000, "loadShare": 100,
         "placementEstimate": 10, "hotThresholds": {"cpu": 1, "memory": 1}},
        {"weights": {"cpu": 0, "memory": 100}, "precedence": -999, "loadShare": 0},
        {"weights": {"cpu": 0.001, "memory": 0.001}, "precedence": 1000,
         "podSelector": {"matchExpressions": [{"key": ODD_LABEL, "operator": "Exists"}]},
         "metrics": {"source": "metrics-server", "maxAgeSeconds": 1}},
        {"weights": {"cpu": 100, "memory": 100}, "precedence": 999, "placementEstimate": 0,
         "podSelector": {"matchLabels": {ODD_LABEL: "tiny"}},
         "metrics": {"maxAgeSeconds": 3600}},
        {"schedulerName": "x" * 60, "precedence": 1000},
        {"namespaceSelector": {"matchExpressions": [
            {"key": "example.com/nothing", "operator": "In", "values": ["a" * 63]}]},
         "precedence": 1000},
        {"podSelector": {"matchLabels": {"a" * 63: "b" * 63}}, "precedence": 1000,
         "hotThresholds": {"cpu": 100, "memory": 100}},
    ]  # fmt: skip
    result = []
    for i in range(count):
        spec = specs[i % len(specs)]
        result.append(
            {
                "apiVersion": "loadwise.io/v1alpha1",
                "kind": "SchedulingPolicy",
                "metadata": {"name": f"{prefix}-{i:03d}", "labels": {ODD_LABEL: "policy"}},
                "spec": spec,
            }
        )
    return result


def invalid_policies(count: int, prefix: str = "bad") -> list[dict[str, Any]]:
    """Policies the CRD schema must refuse (422)."""
    specs: list[dict[str, Any]] = [
        {"weights": {"cpu": 0, "memory": 0}},
        {"weights": {"cpu": -1}},
        {"weights": {"cpu": 101}},
        {"loadShare": 101},
        {"precedence": 1001},
        {"hotThresholds": {"cpu": 0}},
        {"placementEstimate": 11},
        {"metrics": {"source": "graphite"}},
        {"metrics": {"maxAgeSeconds": 0}},
        {"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
        {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]}},
        {"weights": {"cpu": "lots"}},
    ]
    return [
        {
            "apiVersion": "loadwise.io/v1alpha1",
            "kind": "SchedulingPolicy",
            "metadata": {"name": f"{prefix}-{i:03d}"},
            "spec": specs[i % len(specs)],
        }
        for i in range(count)
    ]
