"""The caches as policies read them."""

from __future__ import annotations

import random

from loadwise.policies.policy import Policy, parse_spec
from loadwise.scheduler.usage_sources import UsageSources
from loadwise.usage.cache import MetricsCache


def test_a_policy_whose_source_is_off_reads_one_empty_mapping() -> None:
    """The score index keeps its heaps while the samples are the same object: a fresh empty
    mapping per decision would rebuild them for every pod of such a policy."""
    usage = UsageSources({"prometheus": MetricsCache(None, 10)})
    off = Policy("ms", parse_spec({"metrics": {"source": "metrics-server"}}))
    assert usage.cache_for(off) is None
    first, second = usage.samples_for(off), usage.samples_for(off)
    assert first is second and dict(first) == {}
    assert usage.basis(off, 0.0, random.Random(0)).samples is first
