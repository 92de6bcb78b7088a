import asyncio

from loadwise.scheduler.queue import SchedulingQueue

from ...helpers import pod_info


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_priority_then_age() -> None:
    queue = SchedulingQueue()
    low = pod_info("low")
    high = pod_info("high")
    high.priority = 100
    older = pod_info("older")
    older.created = low.created - 10
    for pod in (low, high, older):
        queue.add(pod)
    order = [queue.pop_nowait() for _ in range(3)]
    assert [p.name for p in order if p] == ["high", "older", "low"]


def test_backoff_doubles_up_to_max() -> None:
    clock = Clock()
    queue = SchedulingQueue(initial_backoff=1, max_backoff=10, clock=clock)
    pod = pod_info()
    queue.add(pod)
    assert queue.pop_nowait() is pod
    waits = []
    for _ in range(6):
        queue.backoff(pod.uid)  # the attempt failed: wait, then it is popped again
        start = clock.now
        while queue.pop_nowait() is None:
            clock.now += 0.5
        waits.append(clock.now - start)
    assert waits == [1, 2, 4, 8, 10, 10]


def test_tries_that_found_room_do_not_lengthen_the_next_backoff() -> None:
    clock = Clock()
    queue = SchedulingQueue(initial_backoff=1, max_backoff=10, clock=clock)
    pod = pod_info()
    queue.add(pod)
    for _ in range(3):  # three failures: the next backoff would be 8 s
        assert queue.pop_nowait() is pod
        queue.backoff(pod.uid)
        clock.now += 10
    for _ in range(20):  # a gang waiting for cool room: twenty tries a second apart
        assert queue.pop_nowait() is pod
        queue.retry_after(pod.uid, 1.0)
        clock.now += 1
    assert queue.pop_nowait() is pod
    queue.park(pod.uid)  # then no room at all: the first failure since it found room
    assert queue.move_all_to_active() == 1  # a cluster event
    clock.now += 0.5
    assert queue.pop_nowait() is None  # backing off: 1 s, not 10
    clock.now += 0.5
    assert queue.pop_nowait() is pod


def test_parked_pods_move_on_cluster_event_or_timeout() -> None:
    clock = Clock()
    queue = SchedulingQueue(initial_backoff=1, unschedulable_timeout=60, clock=clock)
    a, b = pod_info("a"), pod_info("b")
    queue.add(a)
    queue.add(b)
    assert queue.pop_nowait() is not None and queue.pop_nowait() is not None
    queue.park(a.uid)
    queue.park(b.uid)
    clock.now = 5
    assert queue.pop_nowait() is None  # parked: a backoff expiry alone does not retry
    assert queue.move_all_to_active() == 2
    assert {queue.pop_nowait().name, queue.pop_nowait().name} == {"a", "b"}  # type: ignore[union-attr]
    queue.park(a.uid)  # parked at t=5
    clock.now = 64
    assert queue.pop_nowait() is None
    clock.now = 65  # the periodic flush: nothing stays parked past the timeout
    popped = queue.pop_nowait()
    assert popped is not None and popped.name == "a"


def test_removed_pods_are_never_popped() -> None:
    queue = SchedulingQueue()
    pod = pod_info()
    queue.add(pod)
    queue.remove(pod.uid)
    assert queue.pop_nowait() is None
    assert len(queue) == 0


async def test_pop_waits_for_a_pod() -> None:
    queue = SchedulingQueue()
    waiter = asyncio.ensure_future(queue.pop())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    queue.add(pod_info("late"))
    popped = await asyncio.wait_for(waiter, 1)
    assert popped.name == "late"


def test_heaps_do_not_grow_with_pods_that_were_never_popped() -> None:
    """A standby adds every pending pod and never pops; the leader's binds remove them. The
    heaps must not keep an item per pod ever queued (they did: ~3 MiB a minute at 100 pods/s)."""
    queue = SchedulingQueue()
    for i in range(5000):
        pod = pod_info(f"p{i}")
        queue.add(pod)
        queue.remove(pod.uid)
    assert len(queue) == 0
    assert len(queue._active) <= 1024 + 1
