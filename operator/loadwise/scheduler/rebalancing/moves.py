"""Moves: rebalancing's memory of what it evicted, which the scheduler obeys.

Each record is one eviction rebalancing asked for: the pod, its controller, the node it left and
the node chosen for its replacement. While a record holds:
- the room on the target is held for the replacement as a nominated pod is (pods of no higher
  priority leave it alone), until the controller's next pod claims it or `reserve_until`;
- the controller's pods stay off the source until `cool_until` (framework's RebalanceCoolDown);
- it counts against the rate limits for the hour after it.
The ledger is saved (move_store.py) before an eviction is asked for, so a new leader knows every
eviction its predecessor made or was making: it repeats none and forgets none.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ...framework.rebalance import HELD
from ...framework.types import Owner, PodInfo
from ...resources import PodRequests
from ..state import ClusterState

EVICTING = "evicting"  # asked for; the answer is not known (a leader may have died meanwhile)
EVICTED = "evicted"
KEEP_SECONDS = 3600.0  # rate limits look back an hour


@dataclass(frozen=True, slots=True)
class MoveRecord:
    uid: str  # the evicted pod's
    namespace: str
    name: str
    owner: Owner
    policy: str
    source: str
    target: str
    at: float  # when the eviction was asked for (wall clock)
    gone_by: float  # at + its termination grace period: its use has left the source by then
    reserve_until: float
    cool_until: float
    priority: int
    requests: Mapping[str, int] = field(default_factory=dict)
    nonzero: tuple[int, int] = (0, 0)
    labels: Mapping[str, str] = field(default_factory=dict)
    used: tuple[int, int] = (0, 0)  # what the pod was measured to use: its replacement's floor
    state: str = EVICTING
    claimed_by: str = ""  # the replacement pod that took the room

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def workload(self) -> str:
        return f"{self.namespace}/{self.owner.kind}/{self.owner.name}"

    def placeholder(self) -> PodInfo:
        """The replacement-to-be, nominated to the target: what holds its room."""
        return PodInfo(
            uid=f"{self.uid}{HELD}",
            namespace=self.namespace,
            name=f"{self.name} (replacement)",
            node_name="",
            scheduler_name="",
            priority=self.priority,
            created=self.at,
            labels=dict(self.labels),
            requests=PodRequests(dict(self.requests), self.nonzero),
            owner=self.owner,
            nominated_node=self.target,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> MoveRecord:
        data = dict(raw)
        data["owner"] = Owner(**data["owner"])
        data["nonzero"] = tuple(data.get("nonzero") or (0, 0))
        data["used"] = tuple(data.get("used") or (0, 0))
        return cls(**data)


class Moves:
    def __init__(self, state: ClusterState, nominated: dict[str, PodInfo]) -> None:
        self.state = state
        self.nominated = nominated  # the preemptor's: placeholders hold room as nominations do
        self.records: list[MoveRecord] = []
        self.loaded = False  # the saved ledger was read this term: evictions may start

    def __iter__(self) -> Iterator[MoveRecord]:
        return iter(self.records)

    def replace_all(self, records: Iterable[MoveRecord], now: float) -> None:
        """A new term's start: the saved ledger becomes ours."""
        self._unhold()
        self.records = list(records)
        self.loaded = True
        self.prune(now)

    def forget(self) -> None:
        """Leadership ended: the next leader reads the saved ledger."""
        self._unhold()
        self.records = []
        self.loaded = False
        self._apply(time.time())

    def add(self, record: MoveRecord) -> None:
        self.records.append(record)
        self._apply(record.at)

    def settle(self, uid: str, evicted: bool, now: float) -> None:
        """The eviction's answer: done (the record holds), or refused (it is dropped)."""
        for i, record in enumerate(self.records):
            if record.uid == uid:
                if evicted:
                    self.records[i] = replace(record, state=EVICTED)
                else:
                    del self.records[i]
                break
        self._apply(now)

    def claim(self, pod: PodInfo, now: float) -> str | None:
        """The target held for `pod` if it is the replacement of a pod rebalancing evicted (its
        controller's next pod): the room is its now. None otherwise."""
        owner = pod.owner
        if owner is None or not self.records:
            return None
        for i, record in enumerate(self.records):
            if (
                record.owner.uid == owner.uid
                and not record.claimed_by
                and record.reserve_until > now
                and record.uid != pod.uid
            ):
                self.records[i] = replace(record, claimed_by=pod.uid or pod.key)
                self._apply(now)
                return record.target
        return None

    def prune(self, now: float) -> bool:
        """Drop what no longer holds; True when something changed (then it is saved)."""
        kept = [r for r in self.records if max(r.at + KEEP_SECONDS, r.cool_until) > now]
        changed = len(kept) != len(self.records)
        self.records = kept
        self._apply(now)
        return changed

    def count(
        self,
        since: float,
        *,
        source: str | None = None,
        namespace: str | None = None,
        workload: str | None = None,
    ) -> int:
        return sum(
            1
            for r in self.records
            if r.at > since
            and (source is None or r.source == source)
            and (namespace is None or r.namespace == namespace)
            and (workload is None or r.workload == workload)
        )

    def settling(self, node: str, covered_from: float) -> bool:
        """Does the node's sample (covering use from `covered_from` on) still include a pod
        evicted from it? Then it is not judged hot again yet."""
        return any(r.source == node and r.gone_by > covered_from for r in self.records)

    def _apply(self, now: float) -> None:
        """Placeholders and cool-downs from the records (a handful: rebuilt whole)."""
        self._unhold()
        moved: dict[str, dict[str, float]] = {}
        for record in self.records:
            if record.cool_until > now:
                per = moved.setdefault(record.owner.uid, {})
                per[record.source] = max(per.get(record.source, 0.0), record.cool_until)
            if not record.claimed_by and record.reserve_until > now:
                placeholder = record.placeholder()
                self.nominated[placeholder.uid] = placeholder
        self.state.moved_off.clear()
        self.state.moved_off.update(moved)

    def held(self) -> list[PodInfo]:
        """The placeholders holding room now (each nominated to its target)."""
        return [p for uid, p in self.nominated.items() if uid.endswith(HELD)]

    def _unhold(self) -> None:
        for pod in self.held():
            del self.nominated[pod.uid]
