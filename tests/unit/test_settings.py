"""Settings a user can discover: `loadwise run --help` made from the Config model, flags over
variables, unknown LOADWISE_* variables refused by name."""

from __future__ import annotations

import re

import pytest

from loadwise import cli
from loadwise.config import TOOLING_VARIABLES, Config, settings, unknown_variables


def run_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--help"])
    assert exited.value.code == 0
    # argparse wraps help to the terminal: compare with whitespace folded.
    return " ".join(capsys.readouterr().out.split())


def test_every_setting_has_a_description() -> None:
    missing = [name for name, f in Config.model_fields.items() if not (f.description or "").strip()]
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
    assert "[LOADWISE_PROMETHEUS_URL, default http://prometheus-server.monitoring.svc]" in text
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


def test_service_links_of_a_service_named_loadwise_are_not_settings() -> None:
    """The kubelet gives every pod these for the chart's Service `loadwise` (and one named
    loadwise-metrics): refusing them would stop the operator in its own namespace."""
    links = {
        "LOADWISE_SERVICE_HOST": "10.96.0.10",
        "LOADWISE_SERVICE_PORT": "10259",
        "LOADWISE_SERVICE_PORT_HTTPS_METRICS": "10259",
        "LOADWISE_PORT": "tcp://10.96.0.10:10259",
        "LOADWISE_PORT_10259_TCP": "tcp://10.96.0.10:10259",
        "LOADWISE_PORT_10259_TCP_PROTO": "tcp",
        "LOADWISE_PORT_10259_TCP_PORT": "10259",
        "LOADWISE_PORT_10259_TCP_ADDR": "10.96.0.10",
        "LOADWISE_METRICS_SERVICE_HOST": "10.96.0.11",
        "LOADWISE_METRICS_PORT": "tcp://10.96.0.11:443",
    }
    assert unknown_variables(links) == []
    assert Config.from_env(links) == Config()
    # Without the Service's host variable the same names are typos like any other.
    alone = {k: v for k, v in links.items() if not k.endswith("_SERVICE_HOST")}
    assert len(unknown_variables(alone)) == len(alone)


def test_flags_override_variables_and_errors_name_their_origin() -> None:
    env = {"LOADWISE_METRICS_INTERVAL": "5", "LOADWISE_PROMETHEUS_URL": "http://a"}
    config = Config.from_env(env, flags={"metrics_interval": "7", "prometheus_url": None})
    assert (config.metrics_interval, config.prometheus_url) == (7.0, "http://a")
    with pytest.raises(ValueError, match=r"--metrics-lag: Input should be greater"):
        Config.from_env({}, flags={"metrics_lag": "-1"})
    with pytest.raises(ValueError, match=r"LOADWISE_METRICS_LAG: Input should be greater"):
        Config.from_env({"LOADWISE_METRICS_LAG": "-1"})


def test_to_env_reads_back_to_the_same_settings() -> None:
    config = Config(
        metrics_sources=("prometheus", "metrics-server"),
        prometheus_dimensions={"gpu": "avg by (node) (x)"},
        learn_usage=False,
        metrics_interval=2.5,
        http_port=0,
    )
    assert Config.from_env(config.to_env()) == config
    assert Config.from_env(Config(metrics_sources=()).to_env()).metrics_sources == ()


def test_cli_flags_reach_the_config_and_bad_settings_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Config] = []
    monkeypatch.setattr(cli, "run", lambda config: seen.append(config) or 0)
    monkeypatch.setenv("LOADWISE_BIND_CONCURRENCY", "8")
    assert cli.main(["run", "--bind-concurrency", "16", "--no-leader-elect"]) == 0
    assert (seen[0].bind_concurrency, seen[0].leader_elect) == (16, False)
    monkeypatch.setenv("LOADWISE_PROMETHEUS_ULR", "x")
    assert cli.main(["run"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.match(r"loadwise: unknown setting LOADWISE_PROMETHEUS_ULR \(did you mean", err)
