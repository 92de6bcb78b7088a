"""The collector pauses while lists and refreshes decode; only lists freeze what survives."""

from __future__ import annotations

import gc

from loadwise.kube.informer import collection_paused


def test_a_refresh_pauses_the_collector_without_freezing() -> None:
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    with collection_paused(freeze=False):
        assert not gc.isenabled()
        kept = [[] for _ in range(100)]
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
    assert kept


def test_overlapping_blocks_resume_once_and_freeze_if_a_list_asked() -> None:
    gc.unfreeze()
    with collection_paused(freeze=False):
        with collection_paused():  # a list, inside a refresh
            survivors = [[] for _ in range(100)]
        assert not gc.isenabled()  # the refresh still runs
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(survivors)
    gc.unfreeze()
    with collection_paused(freeze=False):
        pass
    assert gc.get_freeze_count() == 0
