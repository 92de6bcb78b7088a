"""The Helm chart with the real helm binary (hack/ensure-tools installs it), no cluster: `helm lint
--strict` is clean, it renders without --kube-version, values.schema.json covers every value and
refuses bad ones, and what it renders is what the operator and Prometheus need."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from loadwise.config import Config, env_name
from loadwise.policies.policy import parse_spec
from loadwise.preflight import PERMISSIONS, needed
from loadwise.setting_groups import flat_fields
from loadwise_dev.controlplane import helm_binary

CHART = Path(__file__).resolve().parents[2] / "charts" / "loadwise"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    # No kubeconfig: nothing here may need a cluster.
    return subprocess.run(
        [str(helm_binary()), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "KUBECONFIG": "/nonexistent"},
    )


def render(*sets: str) -> list[dict[str, Any]]:
    args = [a for s in sets for a in ("--set", s)]
    done = helm("template", "lw", str(CHART), "--namespace", "loadwise-system", *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = (
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    )
    return doc


EVERY_OPTION = [
    "serviceMonitor.enabled=true",
    "serviceMonitor.prometheusServiceAccount.name=prom",
    "networkPolicy.enabled=true",
    "serving.tlsSecretName=lw-tls",
    "priorityClassName=system-cluster-critical",
    "replicas=1",
    "leaderElection.enabled=false",
    "metrics.sources=prometheus\\,metrics-server",
]


@pytest.mark.parametrize("sets", [[], EVERY_OPTION], ids=["defaults", "every-option"])
def test_helm_lint_strict_is_clean(sets: list[str]) -> None:
    done = helm("lint", "--strict", str(CHART), *(a for s in sets for a in ("--set", s)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout


def test_renders_without_a_kube_version() -> None:
    # The Grafana dashboard ConfigMap has its own test (test_dashboard.py).
    kinds = sorted(
        f"{d['kind']}/{d['metadata']['name']}" for d in render() if d["kind"] != "ConfigMap"
    )
    assert kinds == [
        "ClusterRole/lw-loadwise",
        "ClusterRole/lw-loadwise-metrics-reader",
        "ClusterRoleBinding/lw-loadwise",
        "ClusterRoleBinding/lw-loadwise-auth-delegator",
        "Deployment/lw-loadwise",
        "PodDisruptionBudget/lw-loadwise",
        "Role/lw-loadwise-leader-election",
        "RoleBinding/lw-loadwise-leader-election",
        "SchedulingPolicy/lw-loadwise-default",
        "Service/lw-loadwise",
        "ServiceAccount/lw-loadwise",
    ]


def leaves(values: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of values.yaml down to scalars, lists and empty maps."""
    paths = []
    for key, value in values.items():
        if isinstance(value, dict) and value:
            paths += leaves(value, (*prefix, key))
        else:
            paths.append((*prefix, key))
    return paths


def test_the_schema_covers_every_value_and_forbids_unknown_keys() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in leaves(values):
        node = SCHEMA
        for key in path:
            props = node.get("properties", {})
            if key not in props:
                # Free-form maps (labels, tlsConfig, resources) are described as a whole.
                assert node.get("type") == "object", path
                assert node.get("additionalProperties") is not False, path
                break
            node = props[key]
        assert (
            node.get("description") or node.get("type") or node.get("enum") or node.get("oneOf")
        ), path
    # Every map the chart defines refuses keys it does not know (a typo is an error).
    for key in (
        "image",
        "leaderElection",
        "metrics",
        "serving",
        "serviceMonitor",
        "defaultPolicy",
        "dashboards",
        "serviceAccount",
        "preemption",
    ):
        assert SCHEMA["properties"][key]["additionalProperties"] is False, key


def test_the_schema_enums_are_the_operators() -> None:
    """One source of truth: a value the schema admits is one the operator accepts."""
    fields = {f.name: f.info for f in flat_fields(Config)}
    level = fields["log_level"].annotation
    assert SCHEMA["properties"]["logLevel"]["enum"] == list(get_args(level))
    log_format = fields["log_format"].annotation
    assert SCHEMA["properties"]["logFormat"]["enum"] == list(get_args(log_format))
    preset = fields["prometheus_preset"].annotation
    metrics = SCHEMA["properties"]["metrics"]["properties"]
    assert metrics["preset"]["enum"] == list(get_args(preset))


def test_the_preset_is_one_value_and_explicit_settings_still_win() -> None:
    env = container_env(one(render(), "Deployment"))
    assert env["LOADWISE_PROMETHEUS_PRESET"] == "node-exporter"
    assert "LOADWISE_PROMETHEUS_NODE_LABEL" not in env and "LOADWISE_METRICS_LAG" not in env
    stack = "metrics.preset=kube-prometheus-stack"
    config = Config.from_env(container_env(one(render(stack), "Deployment")))
    assert config.sources.prometheus.preset == "kube-prometheus-stack"
    assert "machine_cpu_cores" in config.sources.prometheus.cpu_query
    assert config.sources.prometheus.url == "http://prometheus-operated.monitoring.svc:9090"
    assert config.metrics.lag is None  # derived from the scrape interval
    sets = (stack, "metrics.nodeLabel=kubernetes_node", "metrics.lagSeconds=90")
    sets += ("metrics.prometheusUrl=http://kps-kube-prometheus-prometheus.mon.svc:9090",)
    config = Config.from_env(container_env(one(render(*sets), "Deployment")))
    assert (config.sources.prometheus.node_label, config.metrics.lag) == ("kubernetes_node", 90)
    assert config.sources.prometheus.url == "http://kps-kube-prometheus-prometheus.mon.svc:9090"


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("replicas=-1", "/replicas"),
        ("replicas=two", "/replicas"),
        ("metrics.sources=graphite", "/metrics/sources"),
        ("metrics.sources=prometheus\\,graphite", "/metrics/sources"),
        ("metrics.refreshSeconds=ten", "/metrics/refreshSeconds"),
        ("metrics.refreshSeconds=0", "/metrics/refreshSeconds"),
        ("metrics.cpuQuery=  ", "/metrics/cpuQuery"),
        ("metrics.memoryQuery=\t", "/metrics/memoryQuery"),
        ("metrics.podCpuQuery= ", "/metrics/podCpuQuery"),
        ("metrics.podMemoryQuery= ", "/metrics/podMemoryQuery"),
        ("metrics.dimensions.gpu= ", "/metrics/dimensions/gpu"),
        ("metrics.lagSeconds=-5", "/metrics/lagSeconds"),
        ("metrics.preset=graphite", "/metrics/preset"),
        ("metrics.prometheusUrl=prometheus:9090", "/metrics/prometheusUrl"),
        ("metrics.prometheusUlr=http://x", "prometheusUlr"),
        ("metrics.dimensions.GPU=q", 'metrics.dimensions: "GPU" is not a dimension name'),
        ("metrics.learnUsage=maybe", "/metrics/learnUsage"),
        ("defaultPolicy.weights.cpu=-1", "/defaultPolicy/weights/cpu"),
        ("defaultPolicy.weights.memory=101", "/defaultPolicy/weights/memory"),
        ("leaderElection.leaseDurationSeconds=0", "/leaderElection/leaseDurationSeconds"),
        ("leaderElection.enabled=false", "replicas: 2 replicas need leaderElection.enabled=true"),
        ("leaderElection.retryPeriodSeconds=12", "retryPeriodSeconds < renewDeadlineSeconds"),
        ("podDisruptionBudget.minAvailable=-1", "/podDisruptionBudget/minAvailable"),
        ("podDisruptionBudget.minAvailable=2", "minAvailable (2) must be below replicas (2)"),
        ("podDisruptionBudget.minAvailable=100%", "minAvailable (100%) must be below replicas"),
        ("replicas=3,podDisruptionBudget.minAvailable=5", "minAvailable (5) must be below"),
        ("bindConcurrency=0", "/bindConcurrency"),
        ("logLevel=LOUD", "/logLevel"),
        ("logFormat=xml", "/logFormat"),
        ("schedulerName=default-scheduler", "schedulerName: default-scheduler is kube-scheduler's"),
        (
            "defaultPolicy.weights.cpu=0,defaultPolicy.weights.memory=0",
            "defaultPolicy.weights: cpu and memory cannot both be 0",
        ),
        ("metrics.dimensions.cpu=q", '"cpu" is not a dimension name'),
        ("schedulerName=Not_A_Name", "/schedulerName"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("serving.securePort=0", "/serving/securePort"),
        ("serving.securePort=443", "/serving/securePort"),  # non-root, no capabilities
        ("serving.securePort=70000", "/serving/securePort"),
        ("service.port=-1", "/service/port"),
        ("serviceMonitor.enabled=yes", "/serviceMonitor/enabled"),
        ("serviceMonitor.interval=30", "/serviceMonitor/interval"),
        (
            "serviceMonitor.enabled=true,serviceMonitor.scrapeTimeout=31s",
            "scrapeTimeout (31s) must not be longer than serviceMonitor.interval (30s)",
        ),
        (
            "serviceMonitor.enabled=true,serviceMonitor.interval=1m30s,"
            "serviceMonitor.scrapeTimeout=0091s",
            "scrapeTimeout (0091s) must not be longer",
        ),
        ("dashboards.enabled=yes", "/dashboards/enabled"),
        ("dashboards.label.team=x", "label"),
        ("networkPolicy.metricsFrom=all", "/networkPolicy/metricsFrom"),
        ("priorityClassName=7", None),  # --set makes 7 a number
        ("replica=3", "replica"),
        ("metrics.prometheusBearerToken.secret=t", "prometheusBearerToken needs secret and key"),
        ("metrics.prometheusCA.key=ca.crt", "prometheusCA needs key and one of secret or"),
        (
            "metrics.prometheusCA.key=k,metrics.prometheusCA.secret=s,"
            "metrics.prometheusCA.configMap=c",
            "prometheusCA needs key and one of secret or configMap",
        ),
        ("metrics.prometheusBasicAuth.username=u", "needs username, passwordSecret and"),
        (
            "metrics.prometheusBearerToken.secret=t,metrics.prometheusBearerToken.key=k,"
            "metrics.prometheusBasicAuth.username=u,metrics.prometheusBasicAuth.passwordSecret=s,"
            "metrics.prometheusBasicAuth.passwordKey=p",
            "set one of them, not both",
        ),
        ("metrics.prometheusBearerToken.token=x", "prometheusBearerToken"),
        ("defaultPolicy.name=Default", "/defaultPolicy/name"),
    ],
)
def test_bad_values_are_refused(setting: str, complaint: str | None) -> None:
    done = helm("template", "lw", str(CHART), "--set", setting)
    assert done.returncode != 0, f"{setting} was accepted"
    assert complaint is None or complaint in done.stderr, done.stderr


def test_a_sub_second_refresh_is_refused_and_edge_values_render() -> None:
    done = helm("template", "lw", str(CHART), "--set-json", "metrics.refreshSeconds=0.5")
    assert done.returncode != 0 and "/metrics/refreshSeconds" in done.stderr
    # `--set` passes a fractional number as a string: taken when it reads as one, at least 1.
    fractional = Config.from_env(
        container_env(one(render("metrics.refreshSeconds=1.5"), "Deployment"))
    )
    assert fractional.metrics.interval == 1.5
    for bad in ("0.5", "ten"):
        done = helm("template", "lw", str(CHART), "--set", f"metrics.refreshSeconds={bad}")
        assert done.returncode != 0 and "/metrics/refreshSeconds" in done.stderr, bad
    docs = render(
        "metrics.refreshSeconds=1",
        "serving.securePort=1024",
        "serviceMonitor.enabled=true",
        "serviceMonitor.interval=1m",
        "serviceMonitor.scrapeTimeout=60s",
        "replicas=3",
        "podDisruptionBudget.minAvailable=2",
        "metrics.cpuQuery= up ",
    )
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    config = Config.from_env(container_env(one(docs, "Deployment")))
    assert (config.metrics.interval, config.serving.secure_port) == (1.0, 1024)
    assert config.sources.prometheus.cpu_query == "up"
    # One replica renders no PodDisruptionBudget, so its minAvailable is not held against it.
    assert not [d for d in render("replicas=1") if d["kind"] == "PodDisruptionBudget"]


def test_two_sources_a_single_unelected_replica_and_a_percentage_render() -> None:
    docs = render(
        "metrics.sources=prometheus\\,metrics-server",
        "replicas=1",
        "leaderElection.enabled=false",
        "podDisruptionBudget.minAvailable=50%",
        "metrics.dimensions.gpu=avg by (node) (DCGM_FI_DEV_GPU_UTIL)",
    )
    env = container_env(one(docs, "Deployment"))
    assert env["LOADWISE_METRICS_SOURCES"] == "prometheus,metrics-server"
    assert env["LOADWISE_LEADER_ELECT"] == "false"


def container_env(deployment: dict[str, Any]) -> dict[str, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_deployment_serves_https_only_with_open_probes_and_valid_settings() -> None:
    deployment = one(render(), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["ports"] == [{"name": "https-metrics", "containerPort": 10259}]
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "https-metrics", "HTTPS")
    env = container_env(deployment)
    assert (env["LOADWISE_SECURE_PORT"], env["LOADWISE_HTTP_PORT"]) == ("10259", "0")
    # Every variable the chart sets is a setting the operator knows, with a valid value
    # (unknown LOADWISE_* variables are refused at start-up).
    config = Config.from_env(env)
    assert (config.serving.secure_port, config.serving.http_port, config.serving.tls_cert_file) == (
        10259,
        0,
        "",
    )
    assert "priorityClassName" not in pod
    # The chart's own Service would give release "loadwise" LOADWISE_LOADWISE_* variables.
    assert pod["enableServiceLinks"] is False
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "prometheus.io/scrape" not in str(deployment)  # plain scraping would get a 401


def test_a_tls_secret_and_a_priority_class() -> None:
    deployment = one(
        render("serving.tlsSecretName=lw-tls", "priorityClassName=system-cluster-critical"),
        "Deployment",
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert {"name": "tls", "secret": {"secretName": "lw-tls"}} in pod["volumes"]
    config = Config.from_env(container_env(deployment))
    assert config.serving.tls_cert_file == "/etc/loadwise/tls/tls.crt"
    assert config.serving.tls_private_key_file == "/etc/loadwise/tls/tls.key"


def test_metrics_access_rbac_and_the_service_monitor() -> None:
    docs = render()
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]  # off by default
    delegator = one(docs, "ClusterRoleBinding", "lw-loadwise-auth-delegator")
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    assert delegator["subjects"] == [
        {"kind": "ServiceAccount", "name": "lw-loadwise", "namespace": "loadwise-system"}
    ]
    reader = one(docs, "ClusterRole", "lw-loadwise-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics", "/shadow"], "verbs": ["get"]}]

    docs = render(
        "serviceMonitor.enabled=true",
        "serviceMonitor.labels.release=kps",
        "serviceMonitor.prometheusServiceAccount.name=prom",
        "serviceMonitor.prometheusServiceAccount.namespace=monitoring",
    )
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["port"] == "https-metrics"
    # The token of the chart's scraper account, from a Secret: no deprecated bearerTokenFile.
    assert "bearerTokenFile" not in endpoint
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "lw-loadwise-scraper-token", "key": "token"},
    }
    secret = one(docs, "Secret", "lw-loadwise-scraper-token")
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "lw-loadwise-scraper"
    }
    scraper = one(docs, "ClusterRoleBinding", "lw-loadwise-scraper")
    assert scraper["roleRef"]["name"] == "lw-loadwise-metrics-reader"
    assert scraper["subjects"][0]["name"] == "lw-loadwise-scraper"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}  # self-signed by default
    (endpoint,) = one(render(*EVERY_OPTION[:2], "serviceMonitor.auth=prometheus-token-file"),
                      "ServiceMonitor")["spec"]["endpoints"]  # fmt: skip
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    service = one(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert service["spec"]["ports"][0]["name"] == "https-metrics"
    binding = one(docs, "ClusterRoleBinding", "lw-loadwise-metrics-reader")
    assert binding["roleRef"]["name"] == "lw-loadwise-metrics-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prom", "namespace": "monitoring"}
    ]
    done = helm(
        "template", "lw", str(CHART), "--set", "serviceMonitor.enabled=true",
        "--set", "service.enabled=false",
    )  # fmt: skip
    assert done.returncode != 0 and "needs service.enabled" in done.stderr


def test_network_policy() -> None:
    assert not [d for d in render() if d["kind"] == "NetworkPolicy"]
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    done = helm(
        "template", "lw", str(CHART), "--set", "networkPolicy.enabled=true",
        "--set-json", f"networkPolicy.metricsFrom=[{json.dumps(peer)}]",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    policy = one([d for d in yaml.safe_load_all(done.stdout) if d], "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": "https-metrics", "protocol": "TCP"}], "from": [peer]}
    ]


def test_the_default_policy_is_a_fallback() -> None:
    policy = one(render("defaultPolicy.weights.cpu=3"), "SchedulingPolicy")
    spec = parse_spec(policy["spec"])
    assert spec.fallback and spec.weights.cpu == 3
    assert spec.metrics.source == "prometheus"
    # It governs this release's pods only, under the release's name (cluster-scoped: a second
    # release gets its own), or one given.
    assert policy["metadata"]["name"] == "lw-loadwise-default"
    assert spec.scheduler_name == "loadwise-scheduler"
    batch = ("schedulerName=batch-scheduler",)
    rendered = helm("template", "batch", str(CHART), "--set", batch[0]).stdout
    (other,) = (d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "SchedulingPolicy")
    assert other["metadata"]["name"] == "batch-loadwise-default"
    second = one(render(*batch, "defaultPolicy.name=default-batch"), "SchedulingPolicy")
    assert second["metadata"]["name"] == "default-batch"
    assert parse_spec(second["spec"]).scheduler_name == "batch-scheduler"
    assert not [d for d in render("defaultPolicy.create=false") if d["kind"] == "SchedulingPolicy"]
    # Its source is the first the operator runs: with metrics-server alone, metrics-server.
    for sources, expected in (
        ("metrics-server", "metrics-server"),
        (" metrics-server\\, prometheus", "metrics-server"),
        ("prometheus\\,metrics-server", "prometheus"),
        ("none", "prometheus"),  # no source at all: the CRD default, scoring by requests
    ):
        policy = one(render(f"metrics.sources={sources}"), "SchedulingPolicy")
        assert parse_spec(policy["spec"]).metrics.source == expected, sources


# Read access the chart grants that loadwise does not use (kube-scheduler's role grants the
# same): every other grant is in loadwise.preflight.PERMISSIONS, which the preflight check asks.
UNUSED_GRANTS = {
    ("get", "", "nodes"),
    ("get", "", "pods"),
    ("get", "", "namespaces"),
    ("get", "loadwise.io", "schedulingpolicies"),
    ("get", "metrics.k8s.io", "nodes"),
    ("get", "metrics.k8s.io", "pods"),
}


def grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def permission_key(p: Any) -> tuple[str, str, str]:
    return (p.verb, p.group, f"{p.resource}/{p.subresource}" if p.subresource else p.resource)


@pytest.mark.parametrize(
    "sets",
    [
        [],
        ["metrics.sources=prometheus\\,metrics-server"],
        ["replicas=1", "leaderElection.enabled=false"],
        ["preemption.enabled=false"],
        ["rebalancing.evictions=true"],
        ["softTaints.enabled=true"],
        ["shadow.enabled=true", "softTaints.enabled=true", "rebalancing.evictions=true"],
    ],
    ids=[
        "defaults", "metrics-server", "no-election", "no-preemption", "evictions", "soft-taints",
        "shadow",
    ],
)  # fmt: skip
def test_the_roles_grant_exactly_what_the_preflight_check_asks(sets: list[str]) -> None:
    """loadwise.preflight.PERMISSIONS and the metrics sources' own are the one list: the
    chart grants each permission the
    settings need (Leases in the release namespace only) and nothing else but UNUSED_GRANTS."""
    docs = render(*sets)
    env = container_env(one(docs, "Deployment"))
    config = Config.from_env({k: v for k, v in env.items() if k != "LOADWISE_POD_NAME"})
    cluster = grants(one(docs, "ClusterRole", "lw-loadwise"))
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    for role in roles.values():
        assert role["metadata"]["namespace"] == config.election.lease_namespace
    leases = grants(roles["lw-loadwise-leader-election"]) if config.election.leader_elect else set()
    ledger = roles.get("lw-loadwise-rebalancing")
    wanted = needed(config)
    in_roles = {p for p in wanted if p.when == "leader_elect" or p.resource == "configmaps"}
    granted = {permission_key(p) for p in wanted if p not in in_roles}
    assert granted <= cluster
    assert granted - UNUSED_GRANTS == cluster - UNUSED_GRANTS
    assert {permission_key(p) for p in wanted if p.when == "leader_elect"} == leases
    assert bool(leases) == config.election.leader_elect
    assert {permission_key(p) for p in wanted if p.resource == "configmaps"} == (
        grants(ledger) if ledger else set()
    )
    assert bool(ledger) == config.scheduling.rebalance_evictions
    if ledger:  # get and update of the ledger alone
        (named,) = [r for r in ledger["rules"] if "resourceNames" in r]
        assert named["resourceNames"] == [f"{config.election.lease_name}-rebalance"]
    # Everything the table lists is needed by some settings; each source's own when enabled.
    assert {p.when for p in PERMISSIONS} == {
        "always",
        "leader_elect",
        "preemption",
        "evictions",
        "soft_taints",
    }
    soft = {permission_key(p) for p in wanted if p.when == "soft_taints"}
    assert bool(soft) == config.scheduling.soft_taints
    for source in config.enabled_sources():
        assert set(source.permissions) <= set(wanted)
    if config.scheduling.shadow:  # a shadow trial: reads only, no Lease, no ledger
        assert {verb for verb, _, _ in cluster} == {"get", "list", "watch"}
        assert not roles and not config.election.leader_elect


def test_the_chart_takes_the_values_installs_commonly_need() -> None:
    """Pull secrets, a digest, annotations and labels, an existing or annotated
    ServiceAccount, extra environment, the pod's security context, spreading, names."""
    digest = "sha256:" + "ab" * 32
    docs = render(
        "fullnameOverride=sched",
        "commonLabels.team=platform",
        f"image.digest={digest}",
        "imagePullSecrets[0].name=regcred",
        "podAnnotations.example\\.com/owner=platform",
        "podLabels.tier=control",
        "serviceAccount.annotations.iam\\.example\\.com/role=loadwise",
        "extraEnv[0].name=HTTPS_PROXY",
        "extraEnv[0].value=http://proxy:3128",
        "podSecurityContext.runAsUser=20000",
        "podSecurityContext.runAsNonRoot=true",
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
    )
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["name"] == "sched"
    assert deployment["metadata"]["labels"]["team"] == "platform"
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["tier"] == "control"
    assert template["metadata"]["labels"]["team"] == "platform"
    assert template["metadata"]["annotations"] == {"example.com/owner": "platform"}
    pod = template["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"ghcr.io/loadwise/loadwise@{digest}"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["securityContext"] == {  # helm merges: the seccomp profile stays
        "runAsUser": 20000,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert container_env(deployment)["HTTPS_PROXY"] == "http://proxy:3128"
    account = one(docs, "ServiceAccount")
    assert account["metadata"]["name"] == pod["serviceAccountName"] == "sched"
    assert account["metadata"]["annotations"] == {"iam.example.com/role": "loadwise"}
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        for subject in binding["subjects"]:
            if subject["kind"] == "ServiceAccount" and subject["namespace"] == "loadwise-system":
                assert subject["name"] == "sched", binding["metadata"]["name"]
    assert (
        Config.from_env(container_env(deployment) | {"HTTPS_PROXY": ""}).election.lease_name
        == "sched"
    )


def test_an_existing_service_account_and_the_default_spreading_of_the_replicas() -> None:
    docs = render("serviceAccount.create=false", "serviceAccount.name=existing")
    assert not [d for d in docs if d["kind"] == "ServiceAccount"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "existing"
    done = helm("template", "lw", str(CHART), "--set", "serviceAccount.create=false")
    assert done.returncode != 0 and "serviceAccount.name is required" in done.stderr
    # By default the two replicas prefer different nodes; an affinity given replaces that.
    default = one(render(), "Deployment")["spec"]["template"]["spec"]["affinity"]
    (term,) = default["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    given = one(render("affinity.nodeAffinity.x=y"), "Deployment")["spec"]["template"]["spec"]
    assert given["affinity"] == {"nodeAffinity": {"x": "y"}}


def test_a_secured_prometheus_gets_its_files_mounted_and_named_in_the_settings() -> None:
    """Secrets and ConfigMaps become read-only files; the settings name them, and the operator
    accepts the resulting environment (its model checks the combination too)."""
    docs = render(
        "metrics.prometheusUrl=https://mimir.example:8080/prometheus",
        "metrics.prometheusCA.configMap=prom-ca",
        "metrics.prometheusCA.key=ca.crt",
        "metrics.prometheusBearerToken.secret=prom-token",
        "metrics.prometheusBearerToken.key=token",
        "metrics.prometheusHeaders.X-Scope-OrgID=team-a",
    )
    deployment = one(docs, "Deployment")
    env = container_env(deployment)
    assert env["LOADWISE_PROMETHEUS_CA_FILE"] == "/etc/loadwise/prometheus/ca/ca.crt"
    assert env["LOADWISE_PROMETHEUS_BEARER_TOKEN_FILE"] == "/etc/loadwise/prometheus/token/token"
    assert json.loads(env["LOADWISE_PROMETHEUS_HEADERS"]) == {"X-Scope-OrgID": "team-a"}
    assert "LOADWISE_PROMETHEUS_USERNAME" not in env
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["prometheus-ca"]["configMap"]["name"] == "prom-ca"
    assert volumes["prometheus-token"]["secret"]["secretName"] == "prom-token"
    (container,) = pod["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["prometheus-token"]["mountPath"] == "/etc/loadwise/prometheus/token"
    assert all(mounts[n]["readOnly"] for n in ("prometheus-ca", "prometheus-token"))
    headers = Config.from_env({"LOADWISE_PROMETHEUS_HEADERS": env["LOADWISE_PROMETHEUS_HEADERS"]})
    assert headers.sources.prometheus.headers == {"X-Scope-OrgID": "team-a"}


# The alerts' promtool tests: what the ServiceMonitor's targets would show. The target labels
# (job: the Service, namespace: the release's) are the ones every alert selects on; another
# namespace's series must never count.
SEL = 'job="lw-loadwise", namespace="loadwise-system"'
OTHER = 'job="lw-loadwise", namespace="elsewhere"'
TARGET_LABELS = {"job", "namespace", "pod"}


def series(name: str, labels: str, values: str, where: str = SEL) -> dict[str, str]:
    return {"series": f"{name}{{{where}{', ' if labels else ''}{labels}}}", "values": values}


def fires(at: str, alert: str, *alerts: dict[str, str]) -> dict[str, Any]:
    """At `at`, `alert` fires once per label set given (each with its severity); none: quiet."""
    return {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": a} for a in alerts]}


def quiet(at: str, alert: str) -> dict[str, Any]:
    return fires(at, alert)


ALERT_TESTS: list[dict[str, Any]] = [
    {   # Down, NoLeader, MetricsSourceDown, Degraded: one replica's series over 18 minutes.
        "interval": "1m",
        "input_series": [
            series("up", "pod='a'", "1x5 0x10"),  # scraped until 5m, then not
            series("loadwise_leader", "pod='a'", "1x3 0x10"),  # leads until 3m
            series("loadwise_leader", "pod='b'", "0x13"),  # a standby
            series("loadwise_metrics_source_up", "source='prometheus'", "0x10"),
            series("loadwise_metrics_source_up", "source='metrics-server'", "1x10"),
            series("loadwise_metrics_source_up", "source='prometheus'", "1x10", OTHER),
            series("loadwise_degraded", "reason='api_unreachable'", "0x3 1x15"),
            series("loadwise_degraded", "reason='no_policy'", "0x18"),
        ],
        "alert_rule_test": [
            quiet("4m", "LoadwiseDown"),  # up
            quiet("9m", "LoadwiseDown"),  # down for 3 of its 5 minutes
            fires("12m", "LoadwiseDown", {"severity": "critical"}),
            quiet("3m", "LoadwiseNoLeader"),  # one replica leads
            quiet("5m", "LoadwiseNoLeader"),  # none for 1 of its 2 minutes
            fires("7m", "LoadwiseNoLeader", {"severity": "critical"}),
            quiet("4m", "LoadwiseMetricsSourceDown"),  # down for 4 of its 5 minutes
            # prometheus only: metrics-server answers, and another namespace's up does not count
            fires("6m", "LoadwiseMetricsSourceDown",
                  {"severity": "warning", "source": "prometheus"}),
            quiet("10m", "LoadwiseDegraded"),  # degraded for 6 of its 10 minutes
            fires("14m", "LoadwiseDegraded", {"severity": "warning", "reason": "api_unreachable"}),
        ],
    },
    {   # PodsNotScheduled: three pods active until 40m; attempts go on for 20 minutes, then
        # stop; two pods unschedulable all along.
        "interval": "1m",
        "input_series": [
            series("scheduler_pending_pods", "pod='a', queue='active'", "3x40 0x20"),
            series("scheduler_pending_pods", "pod='a', queue='unschedulable'", "2x60"),
            series("scheduler_schedule_attempts_total",
                   "pod='a', result='scheduled', profile='loadwise-scheduler'", "0+6x20 120x40"),
        ],
        "alert_rule_test": [
            quiet("18m", "LoadwisePodsNotScheduled"),  # active pods, but attempts go on
            # No attempt in the last 5 minutes from 25m: for 8 of its 10 minutes.
            quiet("33m", "LoadwisePodsNotScheduled"),
            fires("37m", "LoadwisePodsNotScheduled", {"severity": "warning"}),
            # Unschedulable pods wait for a change in the cluster, not for an attempt.
            quiet("55m", "LoadwisePodsNotScheduled"),
        ],
    },
    {   # SchedulingErrors: errors at 0.05/s for 20 minutes, then at 0.2/s.
        "interval": "1m",
        "input_series": [
            series("scheduler_schedule_attempts_total",
                   "pod='a', result='error', profile='loadwise-scheduler'", "0+3x20 60+12x30"),
            # Neither other results nor another namespace's errors count.
            series("scheduler_schedule_attempts_total",
                   "pod='a', result='scheduled', profile='loadwise-scheduler'", "0+60x50"),
            series("scheduler_schedule_attempts_total",
                   "pod='a', result='error', profile='loadwise-scheduler'", "0+60x50", OTHER),
        ],
        "alert_rule_test": [
            quiet("18m", "LoadwiseSchedulingErrors"),  # below 0.1/s for 18 minutes
            quiet("30m", "LoadwiseSchedulingErrors"),  # above it from about 22m: not 10 minutes
            fires("36m", "LoadwiseSchedulingErrors", {"severity": "warning"}),
        ],
    },
    {   # EventsDropped (no `for`): one event dropped at 21m; another namespace drops all along.
        "interval": "1m",
        "input_series": [
            series("loadwise_events_dropped_total", "pod='a'", "0x20 1x30"),
            series("loadwise_events_dropped_total", "pod='a'", "0+1x50", OTHER),
        ],
        "alert_rule_test": [
            quiet("20m", "LoadwiseEventsDropped"),
            fires("22m", "LoadwiseEventsDropped", {
                "severity": "info", "job": "lw-loadwise", "namespace": "loadwise-system",
                "pod": "a"}),
            quiet("40m", "LoadwiseEventsDropped"),  # none dropped in the last 15 minutes
        ],
    },
]  # fmt: skip


def test_the_alerts_series_are_what_loadwise_exports() -> None:
    """Every series the alerts' tests feed promtool is one loadwise exports (observability.py),
    with exactly its labels besides the target's; `up` is Prometheus' own."""
    from prometheus_client.metrics import MetricWrapperBase

    from loadwise import observability

    exported = {
        m._name + ("_total" if m._type == "counter" else ""): set(m._labelnames)
        for m in vars(observability).values()
        if isinstance(m, MetricWrapperBase)
    }
    for group in ALERT_TESTS:
        for given in group["input_series"]:
            name, labels = re.fullmatch(r"(\w+)\{(.*)\}", given["series"]).groups()  # type: ignore[union-attr]
            keys = set(re.findall(r"(\w+)=", labels)) - TARGET_LABELS
            assert exported.get(name, set() if name == "up" else None) == keys, given


def test_the_alerts_are_valid_rules_and_fire_on_what_they_name(tmp_path: Path) -> None:
    """The PrometheusRule's groups pass the real promtool's check, and its unit tests: every
    alert fires on the series it is about (after its `for`, with its labels and annotations as
    rendered), for this release's job and namespace only, and stays quiet on series that must
    not fire it (below its threshold, or not for long enough)."""
    import shutil

    promtool = shutil.which("promtool")
    if promtool is None:
        reason = "promtool (Debian's prometheus package, hack/ensure-tools) is missing"
        if os.environ.get("CI"):
            pytest.fail(f"the alerts' promtool test must run in CI: {reason}")
        pytest.skip(reason)
    docs = render("serviceMonitor.enabled=true", "prometheusRule.enabled=true")
    rule = one(docs, "PrometheusRule")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    checked = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    annotations = {r["alert"]: r["annotations"] for r in rule["spec"]["groups"][0]["rules"]}
    tests = copy.deepcopy(ALERT_TESTS)  # given the annotations below
    cases = [case for group in tests for case in group["alert_rule_test"]]
    # Each alert is evaluated both ways: a new alert without its tests fails here.
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == set(annotations)
    assert {c["alertname"] for c in cases if not c["exp_alerts"]} == set(annotations)
    for case in cases:
        for alert in case["exp_alerts"]:
            labels = alert["exp_labels"]
            alert["exp_annotations"] = {  # promtool compares them too: as the rule renders them
                key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m, lb=labels: lb[m[1]], text)
                for key, text in annotations[case["alertname"]].items()
            }
    spec = tmp_path / "tests.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m",
                        "tests": tests})
    )  # fmt: skip
    tested = subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    refused = helm("template", "lw", str(CHART), "--set", "prometheusRule.enabled=true")
    assert "prometheusRule.enabled needs serviceMonitor.enabled" in refused.stderr


def test_every_alert_has_a_runbook_section_its_annotation_points_to() -> None:
    """docs/runbooks.md has a `## <alert>` section for each alert; with runbookBaseURL every
    alert's runbook_url is that URL and the section's anchor, without it a `runbook` note."""
    runbooks = (CHART.parent.parent / "docs" / "runbooks.md").read_text()
    sections = set(re.findall(r"^## (\w+)$", runbooks, re.MULTILINE))
    base = "https://docs.example/runbooks.md"
    for values, key in (
        ((), "runbook"),
        ((f"prometheusRule.runbookBaseURL={base}",), "runbook_url"),
    ):
        docs = render("serviceMonitor.enabled=true", "prometheusRule.enabled=true", *values)
        rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
        assert {r["alert"] for r in rules} == sections
        for rule in rules:
            alert = rule["alert"]
            if key == "runbook_url":
                assert rule["annotations"][key] == f"{base}#{alert.lower()}"
            else:
                assert f"section {alert}" in rule["annotations"][key]
                assert "runbook_url" not in rule["annotations"]


def test_every_setting_is_a_value_or_named_for_extra_env() -> None:
    """Every `loadwise run` setting is reachable from values: rendered from a value of its own,
    or named in values.yaml as one to set through extraEnv (which overrides the chart's)."""
    template = (CHART / "templates" / "deployment.yaml").read_text()
    values = (CHART / "values.yaml").read_text()
    extra = values[values.index("# Extra environment variables") : values.index("extraEnv: []")]
    for field in flat_fields(Config):
        variable = env_name(field.name)
        assert variable in template or variable in extra, variable
    sets = ("extraEnv[0].name=LOADWISE_INITIAL_BACKOFF", "extraEnv[0].value=2.5")
    sets += ("extraEnv[1].name=LOADWISE_METRICS_INTERVAL", "extraEnv[1].value=30")
    (container,) = one(render(*sets), "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}  # the last wins
    config = Config.from_env(env)
    assert (config.scheduling.initial_backoff, config.metrics.interval) == (2.5, 30)
