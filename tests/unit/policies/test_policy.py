import pytest

from loadwise.policies.policy import DEFAULT_POLICY, Policy, parse_spec
from loadwise.policies.policy_set import PolicySet


def test_defaults() -> None:
    spec = parse_spec({})
    assert (spec.weights.cpu, spec.weights.memory) == (1, 1)
    assert spec.metrics.max_age_seconds == 60


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"weights": {"cpu": -1}}, "spec.weights.cpu"),
        ({"weights": {"cpu": "lots"}}, "spec.weights.cpu"),
        ({"weights": {"cpu": 0, "memory": 0}}, "spec.weights"),
        ({"weights": {"cpu": 1, "disk": 2}}, "spec.weights.disk"),
        ({"colour": "red"}, "spec.colour"),
        (
            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            "spec.podSelector",
        ),
        ({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}, "operator"),
        ({"precedence": 5000}, "spec.precedence"),
    ],
)
def test_invalid_specs_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_spec(spec)
    assert field in str(info.value)


def test_both_weights_zero_says_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"at least one of weights\.cpu and weights\.memory"):
        parse_spec({"weights": {"cpu": 0, "memory": 0}})


def test_selection_by_precedence_then_name() -> None:
    policies = PolicySet()
    policies.upsert(Policy("b-all", parse_spec({})))
    policies.upsert(Policy("a-all", parse_spec({})))
    policies.upsert(
        Policy("batch", parse_spec({"precedence": 10, "podSelector": {"matchLabels": {"t": "b"}}}))
    )
    assert policies.for_pod({"t": "b"}).name == "batch"
    assert policies.for_pod({"t": "x"}).name == "a-all"  # tie on precedence: name order
    policies.remove("a-all")
    policies.remove("b-all")
    assert policies.for_pod({}) is DEFAULT_POLICY


def test_a_fallback_policy_loses_to_every_other_policy_that_selects_the_pod() -> None:
    """The chart's default is a catch-all: a user's policy must win whatever its name (before,
    `aaa-all` beat it by name and `web` did not) or its precedence (even -1000)."""
    policies = PolicySet()
    policies.upsert(Policy("default", parse_spec({"fallback": True, "precedence": 1000})))
    assert policies.for_pod({}).name == "default"
    policies.upsert(Policy("web", parse_spec({"precedence": -1000})))
    policies.upsert(Policy("aaa-all", parse_spec({"precedence": -1000})))
    assert policies.for_pod({}).name == "aaa-all"
    policies.remove("aaa-all")
    assert policies.for_pod({}).name == "web"
    policies.upsert(Policy("web", parse_spec({"podSelector": {"matchLabels": {"tier": "web"}}})))
    assert policies.for_pod({"tier": "web"}).name == "web"
    assert policies.for_pod({"tier": "db"}).name == "default"  # only the fallback selects it
    assert policies.names() == ["web", "default"]
    # Among fallbacks the usual rule holds: equal precedence, the name that sorts first.
    policies.upsert(Policy("zz-fallback", parse_spec({"fallback": True, "precedence": 1000})))
    assert policies.for_pod({"tier": "db"}).name == "default"


def test_match_expressions() -> None:
    spec = parse_spec(
        {
            "podSelector": {
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["web", "api"]},
                    {"key": "canary", "operator": "DoesNotExist"},
                ]
            }
        }
    )
    assert spec.pod_selector.matches({"tier": "web"})
    assert not spec.pod_selector.matches({"tier": "db"})
    assert not spec.pod_selector.matches({"tier": "web", "canary": "1"})


def test_reapplying_a_policy_replaces_it() -> None:
    policies = PolicySet()
    policies.upsert(Policy("p", parse_spec({"weights": {"cpu": 1}})))
    policies.upsert(Policy("p", parse_spec({"weights": {"cpu": 7}})))
    assert len(policies) == 1
    assert policies.for_pod({}).spec.weights.cpu == 7
