"""Settings a user can discover: `loadwise run --help` made from the Config model, flags over
variables, unknown LOADWISE_* variables refused by name."""

from __future__ import annotations

import argparse
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from loadwise import cli
from loadwise.config import TOOLING_VARIABLES, Config, unknown_variables
from loadwise.kube import prefetch
from loadwise.setting_groups import flat_fields
from loadwise.settings_help import settings
from loadwise.usage.prometheus_settings import DEFAULT_CPU_QUERY
from loadwise_dev.controlplane import helm_binary

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "loadwise"


@pytest.fixture(autouse=True)
def no_prefetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cli.main(["run", ...])` would ask the kubeconfig's API server for the start-up lists."""
    monkeypatch.setattr(prefetch, "start", lambda: None)


def run_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--help"])
    assert exited.value.code == 0
    # argparse wraps help to the terminal: compare with whitespace folded.
    return " ".join(capsys.readouterr().out.split())


def test_every_setting_has_a_description() -> None:
    missing = [f.name for f in flat_fields(Config) if not (f.info.description or "").strip()]
    assert missing == []


def test_run_help_lists_every_setting_with_variable_default_and_meaning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = run_help(capsys)
    for s in settings():
        folded = " ".join(f"{s.description} [{s.variable}, default {s.default}]".split())
        assert folded in text, s.field
        assert s.flag in text
    # Spot checks of the generated text against the model.
    assert "[LOADWISE_PROMETHEUS_URL, default empty]" in text
    assert "--leader-elect, --no-leader-elect" in text
    assert "[LOADWISE_METRICS_SOURCES, default prometheus]" in text
    assert "[LOADWISE_PROMETHEUS_DIMENSIONS, default {}]" in text


def test_a_typo_is_refused_by_name_with_the_closest_setting() -> None:
    with pytest.raises(ValueError) as refused:
        Config.from_env({"LOADWISE_PROMETHEUS_ULR": "http://prom:9090"})
    message = str(refused.value)
    assert "unknown setting LOADWISE_PROMETHEUS_ULR" in message
    assert "did you mean LOADWISE_PROMETHEUS_URL?" in message
    # Nothing close: named anyway, no suggestion.
    assert unknown_variables({"LOADWISE_ZZZ": "1"}) == [
        "unknown setting LOADWISE_ZZZ; `loadwise run --help` lists them"
    ]


def test_tooling_variables_and_other_prefixes_are_not_settings_but_allowed() -> None:
    env = dict.fromkeys(TOOLING_VARIABLES, "x") | {"KUBECONFIG": "/k", "LOADWISEX": "1"}
    assert unknown_variables(env) == []
    assert Config.from_env(env) == Config()


def service_links(service: dict[str, Any]) -> dict[str, str]:
    """The variables the kubelet gives a pod for `service` (pkg/kubelet/envvars FromServices):
    the name upper-cased with - as _, then _SERVICE_HOST, _SERVICE_PORT and one per named port,
    and the Docker-link style _PORT, _PORT_<port>_<PROTO> with _PROTO, _PORT and _ADDR."""
    name = service["metadata"]["name"].upper().replace("-", "_")
    ip = "10.96.0.10"
    ports = service["spec"]["ports"]
    first = ports[0]
    links = {
        f"{name}_SERVICE_HOST": ip,
        f"{name}_SERVICE_PORT": str(first["port"]),
        f"{name}_PORT": f"{first.get('protocol', 'TCP').lower()}://{ip}:{first['port']}",
    }
    for port in ports:
        proto = port.get("protocol", "TCP")
        if port.get("name"):
            links[f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(
                port["port"]
            )
        base = f"{name}_PORT_{port['port']}_{proto}"
        links[base] = f"{proto.lower()}://{ip}:{port['port']}"
        links[f"{base}_PROTO"] = proto.lower()
        links[f"{base}_PORT"] = str(port["port"])
        links[f"{base}_ADDR"] = ip
    return links


def chart_service(release: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(helm_binary()), "template", release, str(CHART)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "KUBECONFIG": "/nonexistent"},
        check=True,
    )
    (service,) = (d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Service")
    return cast(dict[str, Any], service)


def test_service_links_of_a_loadwise_service_are_not_settings() -> None:
    """The chart's pods have no service links (enableServiceLinks: false), but any other pod
    in the namespace of a release named loadwise gets LOADWISE_LOADWISE_* variables for its
    Service `loadwise-loadwise`, and so does a second install's operator there."""
    service = chart_service("loadwise")
    assert service["metadata"]["name"] == "loadwise-loadwise"
    links = service_links(service)
    assert "LOADWISE_LOADWISE_SERVICE_PORT_HTTPS_METRICS" in links
    assert "LOADWISE_LOADWISE_PORT_10259_TCP_ADDR" in links
    assert unknown_variables(links) == []
    assert Config.from_env(links) == Config()
    # Without the Service's host variable the same names are typos like any other.
    alone = {k: v for k, v in links.items() if not k.endswith("_SERVICE_HOST")}
    assert len(unknown_variables(alone)) == len(alone)
    # Only the kubelet's shapes: anything else beside the host variable is still refused.
    odd = [
        "LOADWISE_LOADWISE_SERVICE_HOSTS",
        "LOADWISE_LOADWISE_PORTS",
        "LOADWISE_LOADWISE_PORT_HTTPS",
        "LOADWISE_LOADWISE_PORT_10259_TCP_HOST",
        "LOADWISE_LOADWISE_PORT_10259_HTTP",
        "LOADWISE_LOADWISE_METRICS_INTERVAL",
    ]
    env = {"LOADWISE_LOADWISE_SERVICE_HOST": "10.96.0.10"} | dict.fromkeys(odd, "1")
    assert [p.split()[2].rstrip(";") for p in unknown_variables(env)] == sorted(odd)


def test_flags_override_variables_and_errors_name_their_origin() -> None:
    env = {"LOADWISE_METRICS_INTERVAL": "5", "LOADWISE_PROMETHEUS_URL": "http://a"}
    config = Config.from_env(env, flags={"metrics_interval": "7", "prometheus_url": None})
    assert (config.metrics.interval, config.sources.prometheus.url) == (7.0, "http://a")
    with pytest.raises(ValueError, match=r"--metrics-lag: Input should be greater"):
        Config.from_env({}, flags={"metrics_lag": "-1"})
    with pytest.raises(ValueError, match=r"LOADWISE_METRICS_LAG: Input should be greater"):
        Config.from_env({"LOADWISE_METRICS_LAG": "-1"})


def test_to_env_reads_back_to_the_same_settings() -> None:
    config = Config.of(
        metrics_sources=("prometheus", "metrics-server"),
        prometheus_dimensions={"gpu": "avg by (node) (x)"},
        learn_usage=False,
        metrics_interval=2.5,
        http_port=0,
    )
    assert Config.from_env(config.to_env()) == config
    assert Config.from_env(Config.of(metrics_sources=()).to_env()).metrics.enabled == ()


def test_cli_flags_reach_the_config_and_bad_settings_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Config] = []
    monkeypatch.setattr(cli, "run", lambda config: seen.append(config) or 0)
    monkeypatch.setenv("LOADWISE_BIND_CONCURRENCY", "8")
    assert cli.main(["run", "--bind-concurrency", "16", "--no-leader-elect"]) == 0
    assert (seen[0].scheduling.bind_concurrency, seen[0].election.leader_elect) == (16, False)
    monkeypatch.setenv("LOADWISE_PROMETHEUS_ULR", "x")
    assert cli.main(["run"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.match(r"loadwise: unknown setting LOADWISE_PROMETHEUS_ULR \(did you mean", err)


# Names the tests make up on purpose: a typo, a name close to nothing, the kubelet's service
# links for a Service named loadwise-loadwise (test_service_links_...), and the setting of the
# example source docs/architecture.md adds (test_source_registry.py).
SYNTHETIC = re.compile(r"LOADWISE_(PROMETHEUS_ULR|ZZZ|FILE_PATH|LOADWISE(_\w*)?)")


def test_every_loadwise_variable_the_repository_uses_is_a_setting_or_tooling() -> None:
    """A script or test that sets a LOADWISE_* variable no setting reads would be refused by
    `loadwise run` (hack/build-image's LOADWISE_IMAGE was)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--",
         "hack", "dev", "bench", "Makefile", "tests"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    used: dict[str, str] = {}
    for path in listed:
        file = ROOT / path
        if not file.is_file():
            continue
        try:
            text = file.read_text()
        except UnicodeDecodeError:
            continue
        for name in re.findall(r"LOADWISE_[A-Z0-9_]*[A-Z0-9]", text):
            used.setdefault(name, path)
    assert "LOADWISE_IMAGE" in used and "LOADWISE_CACHE" in used  # the scan sees scripts
    known = {f"LOADWISE_{f.name.upper()}" for f in flat_fields(Config)} | TOOLING_VARIABLES
    strays = {
        name: path
        for name, path in used.items()
        if name not in known and not SYNTHETIC.fullmatch(name)
    }
    assert strays == {}


def test_log_level_is_a_level_name_in_any_case(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert Config.from_env({"LOADWISE_LOG_LEVEL": " debug "}).logging.level == "DEBUG"
    assert Config.from_env({}, flags={"log_level": "Warning"}).logging.level == "WARNING"
    seen: list[Config] = []
    monkeypatch.setattr(cli, "run", lambda config: seen.append(config) or 0)
    assert cli.main(["run", "--log-level", "verbose"]) == 2  # was a traceback from logging
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--log-level: Input should be" in err
    assert seen == []


def test_whitespace_queries_and_sub_second_refreshes_are_refused() -> None:
    for variable in (
        "LOADWISE_PROMETHEUS_CPU_QUERY",
        "LOADWISE_PROMETHEUS_MEMORY_QUERY",
        "LOADWISE_PROMETHEUS_POD_CPU_QUERY",
        "LOADWISE_PROMETHEUS_POD_MEMORY_QUERY",
    ):
        with pytest.raises(ValueError, match=variable):
            Config.from_env({variable: " \n\t"})
        field = variable.removeprefix("LOADWISE_").lower()
        assert Config.from_env({variable: " up \n"}).flat()[field] == "up"
    assert Config.of(metrics_interval=1.0).metrics.interval == 1.0
    with pytest.raises(ValueError, match="LOADWISE_METRICS_INTERVAL"):
        Config.from_env({"LOADWISE_METRICS_INTERVAL": "0.5"})


def test_a_prometheus_preset_sets_the_queries_and_label_that_are_not_set() -> None:
    default = Config.from_env({})
    assert default.sources.prometheus.preset == "node-exporter"
    assert (default.sources.prometheus.cpu_query, default.sources.prometheus.node_label) == (
        DEFAULT_CPU_QUERY,
        "node",
    )
    stack = Config.from_env({"LOADWISE_PROMETHEUS_PRESET": "kube-prometheus-stack"})
    assert "machine_cpu_cores" in stack.sources.prometheus.cpu_query
    assert "machine_memory_bytes" in stack.sources.prometheus.memory_query
    kp = Config.from_env({"LOADWISE_PROMETHEUS_PRESET": "kube-prometheus"})
    assert (
        kp.sources.prometheus.node_label == "instance"
        and "by (instance)" in kp.sources.prometheus.cpu_query
    )
    # What is set explicitly wins over the preset, query by query.
    mixed = Config.from_env(
        {
            "LOADWISE_PROMETHEUS_PRESET": "kube-prometheus",
            "LOADWISE_PROMETHEUS_CPU_QUERY": "my_cpu",
            "LOADWISE_PROMETHEUS_NODE_LABEL": "kubernetes_node",
        }
    )
    assert (mixed.sources.prometheus.cpu_query, mixed.sources.prometheus.node_label) == (
        "my_cpu",
        "kubernetes_node",
    )
    assert mixed.sources.prometheus.memory_query == kp.sources.prometheus.memory_query
    with pytest.raises(ValueError, match="LOADWISE_PROMETHEUS_PRESET"):
        Config.from_env({"LOADWISE_PROMETHEUS_PRESET": "graphite"})


def test_a_mistyped_flag_names_the_closest_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--bind-concurency", "3"])
    assert "(did you mean --bind-concurrency?)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["explain", "ns/pod", "--prometheus-ulr", "http://p"])
    assert "(did you mean --prometheus-url?)" in capsys.readouterr().err


def test_explain_takes_the_operators_settings_and_says_when_the_server_is_unreachable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        'clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\n'
        "users: [{name: u, user: {token: abc}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert cli.main(["explain", "ns/pod", "--prometheus-url", "http://p:9090"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loadwise explain: cannot reach the API server") and "127.0.0.1:1" in err
    assert len(err.strip().splitlines()) == 1  # no traceback


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--version"])
    assert stopped.value.code == 0
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert capsys.readouterr().out.strip() == f"loadwise {project['version']}"
    # One version: the package's, the chart's and the image's (the chart's appVersion).
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == project["version"]


# Every setting as users set it before the settings were grouped by concern, each with a value
# other than its default (as its LOADWISE_* variable would hold it). The names are a promise:
# a chart, a Deployment or a script that sets one must keep working.
FLAT_SETTINGS = {
    "scheduler_name": "other-scheduler",
    "metrics_sources": "metrics-server",
    "prometheus_url": "http://prometheus.example:9090",
    "prometheus_cpu_query": "cpu_q",
    "prometheus_memory_query": "mem_q",
    "prometheus_node_label": "instance",
    "prometheus_preset": "kube-prometheus",
    "prometheus_dimensions": '{"gpu": "gpu_q"}',
    "prometheus_pod_cpu_query": "pod_cpu_q",
    "prometheus_pod_memory_query": "pod_mem_q",
    "learn_usage": "false",
    "prometheus_timeout": "7.5",
    "prometheus_ca_file": __file__,
    "prometheus_bearer_token_file": "",  # not with a username: its own case below
    "prometheus_username": "reader",
    "prometheus_password_file": __file__,
    "prometheus_headers": '{"X-Scope-OrgID": "team-a"}',
    "metrics_lag": "12",
    "metrics_interval": "3",
    "preemption": "false",
    "rebalance_evictions": "true",
    "bind_concurrency": "17",
    "initial_backoff": "0.5",
    "max_backoff": "20",
    "volume_bind_timeout": "30",
    "unschedulable_timeout": "45",
    "failure_event_interval": "5",
    "http_host": "127.0.0.1",
    "http_port": "8080",
    "reconcile_interval": "120",
    "log_level": "DEBUG",
    "log_format": "json",
    "leader_elect": "false",
    "lease_name": "my-lease",
    "lease_namespace": "kube-system",
    "lease_duration": "30",
    "renew_deadline": "20",
    "retry_period": "4",
    "identity": "replica-a",
    "pod_name": "loadwise-0",
    "pod_namespace": "loadwise-system",
    "api_probe_interval": "3",
    "secure_port": "10300",
    "tls_cert_file": __file__,
    "tls_private_key_file": __file__,
}


def test_every_setting_keeps_its_flat_variable_and_flag_name() -> None:
    """Grouping the settings (config.election.lease_name, config.sources.prometheus.url)
    changed no name users set: each old LOADWISE_* variable and each --flag still sets its
    setting, and no setting is named otherwise."""
    names = [s.field for s in settings()]
    assert set(FLAT_SETTINGS) <= set(names)  # a new setting may come; none of these may go
    assert len(names) == len(set(names))  # and no two settings (or sources) share a name
    env = {f"LOADWISE_{name.upper()}": value for name, value in FLAT_SETTINGS.items() if value}
    from_env = Config.from_env(env)
    expected = Config.from_env({}).flat()
    for name, value in FLAT_SETTINGS.items():
        if value:
            assert from_env.flat()[name] != expected[name], name  # set, not left at its default
    flags = [
        f"--{name.replace('_', '-')}={value}" for name, value in FLAT_SETTINGS.items() if value
    ]
    flags = [f.replace("--learn-usage=false", "--no-learn-usage") for f in flags]
    flags = [f.replace("--preemption=false", "--no-preemption") for f in flags]
    flags = [f.replace("--rebalance-evictions=true", "--rebalance-evictions") for f in flags]
    flags = [f.replace("--leader-elect=false", "--no-leader-elect") for f in flags]
    parser = argparse.ArgumentParser()
    cli.add_setting_flags(parser)
    from_flags = Config.from_env({}, flags=cli.setting_flags(parser.parse_args(flags)))
    assert from_flags == from_env
    assert Config.from_env(from_env.to_env()) == from_env
    token = Config.from_env({"LOADWISE_PROMETHEUS_BEARER_TOKEN_FILE": __file__})
    assert token.sources.prometheus.bearer_token_file == __file__
    # The groups hold what the flat names set.
    assert from_env.election.lease_name == "my-lease"
    assert from_env.sources.prometheus.url == "http://prometheus.example:9090"
    assert from_env.metrics.enabled == ("metrics-server",)
    assert (from_env.logging.level, from_env.serving.secure_port) == ("DEBUG", 10300)


def test_a_changed_setting_derives_the_rest_again_and_a_typo_is_named() -> None:
    """`but` keeps what was given and derives the rest again: a preset changed later fills in
    its own URL, queries and node label, as the same settings given at once do."""
    later = Config.of().but(prometheus_preset="kube-prometheus")
    assert later == Config.of(prometheus_preset="kube-prometheus")
    assert later.sources.prometheus.node_label == "instance"
    kept = Config.of(prometheus_url="http://p:9090").but(prometheus_preset="kube-prometheus")
    assert kept.sources.prometheus.url == "http://p:9090"  # given, so kept
    with pytest.raises(
        ValueError, match="unknown setting 'lease_nme' \\(did you mean 'lease_name'"
    ):
        Config.of(lease_nme="x")
    assert Config.of(metrics_sources="prometheus, metrics-server,prometheus").metrics.enabled == (
        "prometheus",
        "metrics-server",
    )


def test_explain_takes_kubectls_namespace_flag_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.explain_target("ns/web", None) == "ns/web"
    assert cli.explain_target("web", "ns") == "ns/web"
    assert cli.explain_target("pod/web", "ns") == "ns/web"
    with pytest.raises(SystemExit):
        cli.main(["explain", "-n", "ns", "node/n1"])
    assert "with -n ns, expected POD or pod/POD, not 'node/n1'" in capsys.readouterr().err
