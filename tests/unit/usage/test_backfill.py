"""A replica that just started fills its windows from a source that keeps history (Prometheus),
in the background after its first refresh; one that keeps none (metrics-server), or fails, leaves
them to the replica's own samples, and says so."""

from __future__ import annotations

import asyncio

import pytest

from loadwise.usage.cache import BACKFILL_POINTS, MetricsCache, NodeSample

NOW = 1_000_000.0


class Remembering:
    """A source whose past answers show a burst 100 s ago; `broken` fails them."""

    name = "prometheus"
    dimensions = ()

    def __init__(self, broken: bool = False) -> None:
        self.asked: list[float | None] = []
        self.broken = broken

    async def fetch(self) -> dict[str, NodeSample]:
        return await self.fetch_at(None)

    async def fetch_at(self, when: float | None) -> dict[str, NodeSample]:
        self.asked.append(when)
        if when is not None and self.broken:
            raise RuntimeError("HTTP 503: overloaded")
        at = NOW if when is None else when
        return {"n1": NodeSample(0.95 if abs(at - (NOW - 100)) < 5 else 0.1, 0.2, at)}


class Forgetful:
    name = "metrics-server"
    dimensions = ()

    async def fetch(self) -> dict[str, NodeSample]:
        return {"n1": NodeSample(0.1, 0.2, NOW)}


async def windowed(source: object, keep: float = 300, backfill: bool = True) -> MetricsCache:
    cache = MetricsCache(source, 10.0, backfill=backfill)  # type: ignore[arg-type]
    cache.history.keep = keep
    await cache.refresh()
    await cache.backfilled_windows()
    await asyncio.sleep(0)
    return cache


async def test_the_first_refresh_fills_the_window_from_the_sources_history() -> None:
    source = Remembering()
    cache = await windowed(source)
    past = [w for w in source.asked if w is not None]
    assert len(past) == 30 and min(past) == NOW - 300 and max(past) == NOW - 10
    peak = cache.history.aggregated("max", 300, cache.samples)["n1"]
    assert peak.cpu == pytest.approx(0.95)  # the burst before this replica started
    assert cache.window_note(300) == (
        "windows hold up to 300s of 300s (filled from prometheus's history (30 answers))"
    )
    await cache.refresh()  # already filled: not asked again
    assert len([w for w in source.asked if w is not None]) == 30
    cache.history.keep = 3600  # a policy asks for a longer window: filled again, coarser
    await cache.refresh()
    await cache.backfilled_windows()
    assert len([w for w in source.asked if w is not None]) == 30 + BACKFILL_POINTS
    await cache.close()


async def test_no_history_or_a_failed_backfill_leaves_the_replicas_own_samples() -> None:
    cache = await windowed(Forgetful())
    assert cache.window_note(300) == (
        "windows hold up to 0s of 300s (metrics-server keeps no history)"
    )
    broken = await windowed(Remembering(broken=True))
    assert broken.window_note(300) == (
        "windows hold up to 0s of 300s "
        "(backfill from prometheus failed after 0 answers: RuntimeError: HTTP 503: overloaded)"
    )
    assert broken.history.aggregated("max", 300, broken.samples)["n1"].cpu == pytest.approx(0.1)
    source = Remembering()  # the setting metrics.backfill off: not one past answer asked
    off = await windowed(source, backfill=False)
    assert source.asked == [None] and off.window_note(300) == (
        "windows hold up to 0s of 300s (backfill off (metrics.backfill))"
    )


async def test_start_up_fills_the_windows_before_the_first_decision() -> None:
    """The first refresh can go out before the policies are known (no window asked yet):
    start-up then starts the backfill itself and waits for it, bounded."""
    source = Remembering()
    cache = MetricsCache(source, 10.0)  # type: ignore[arg-type]
    await cache.refresh()  # no policy yet: nothing to fill
    assert source.asked == [None]
    cache.history.keep = 300  # the policies are seeded
    await cache.fill_windows(timeout=5)
    assert cache.backfilled == 300 and len(source.asked) == 31
    assert cache.history.aggregated("max", 300, cache.samples)["n1"].cpu == pytest.approx(0.95)
    await cache.fill_windows(timeout=5)  # full: not asked again
    assert len(source.asked) == 31
    await cache.close()


class Growing(Remembering):
    """A second node shows up in the answers after the first backfill (a new node, or one back
    after a gap in its series); Prometheus has its past too."""

    def __init__(self) -> None:
        super().__init__()
        self.both = False

    async def fetch_at(self, when: float | None) -> dict[str, NodeSample]:
        answer = await super().fetch_at(when)
        if self.both:
            at = NOW if when is None else when
            answer["n2"] = NodeSample(0.9 if at < NOW - 50 else 0.2, 0.2, at)
        return answer


async def test_a_node_first_seen_later_is_filled_at_most_once_a_window() -> None:
    source = Growing()
    cache = await windowed(source)
    source.both = True
    await cache.refresh()
    await cache.backfilled_windows()
    assert cache.history.span("n2") == 0  # within a window of the last backfill: not yet
    cache._backfill_at -= 300  # a window later
    await cache.refresh()
    await cache.backfilled_windows()
    assert cache.history.span("n2") == 300
    assert cache.history.aggregated("max", 300, cache.samples)["n2"].cpu == pytest.approx(0.9)
    await cache.close()
