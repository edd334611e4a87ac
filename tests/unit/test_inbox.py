"""squall.worker.routing.Inbox: an executor's bounded inbox (a SimpleQueue with its bound kept
by its length), the calls of a queue.Queue plus `offer`."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from squall.worker.routing import Inbox

pytestmark = pytest.mark.unit


def test_first_in_first_out_and_the_fill_the_load_aware_shuffle_reads() -> None:
    inbox = Inbox(4)
    assert inbox.empty() and inbox.qsize() == 0 and inbox.maxsize == 4
    for i in range(3):
        inbox.put_nowait([[i]])
    assert inbox.qsize() / inbox.maxsize == 0.75 and not inbox.full()
    assert [inbox.get_nowait() for _ in range(3)] == [[[0]], [[1]], [[2]]]
    assert inbox.empty()


def test_bounded_offer_and_put_nowait_refuse_when_full() -> None:
    inbox = Inbox(2)
    assert inbox.offer([[1]]) and inbox.offer([[2]])
    assert inbox.full()
    assert not inbox.offer([[3]])
    with pytest.raises(queue.Full):
        inbox.put_nowait([[3]])
    with pytest.raises(queue.Full):
        inbox.put([[3]], block=False)
    assert inbox.qsize() == 2


def test_an_unbounded_inbox_is_refused() -> None:
    with pytest.raises(ValueError):
        Inbox(0)


def test_a_blocked_put_times_out_when_nobody_takes() -> None:
    inbox = Inbox(1)
    inbox.put([[1]])
    t0 = time.monotonic()
    with pytest.raises(queue.Full):
        inbox.put([[2]], timeout=0.05)
    assert 0.04 <= time.monotonic() - t0 < 2.0
    assert inbox.qsize() == 1 and inbox.get_nowait() == [[1]]


def test_a_blocked_put_goes_in_as_soon_as_there_is_room() -> None:
    inbox = Inbox(1)
    inbox.put([[1]])
    taker = threading.Timer(0.05, inbox.get)
    taker.start()
    t0 = time.monotonic()
    inbox.put([[2]], timeout=10.0)
    assert time.monotonic() - t0 < 5.0
    taker.join()
    assert inbox.get_nowait() == [[2]] and inbox.empty()


def test_get_waits_with_a_timeout_and_is_woken_by_a_put() -> None:
    inbox = Inbox(4)
    t0 = time.monotonic()
    with pytest.raises(queue.Empty):
        inbox.get(timeout=0.05)
    assert 0.04 <= time.monotonic() - t0 < 2.0
    with pytest.raises(queue.Empty):
        inbox.get_nowait()
    putter = threading.Timer(0.05, inbox.put_nowait, args=([[7]],))
    putter.start()
    assert inbox.get(timeout=10.0) == [[7]]
    putter.join()


def test_racing_producers_overshoot_by_fewer_than_their_number() -> None:
    """The bound is checked before the put: with P producers an inbox holds at most
    maxsize + P - 1 batches, whatever the interleaving."""
    inbox = Inbox(8)
    producers, stop = 4, threading.Event()
    high = 0

    def produce() -> None:
        while not stop.is_set():
            inbox.offer([[1]])

    ts = [threading.Thread(target=produce) for _ in range(producers)]
    for t in ts:
        t.start()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        high = max(high, inbox.qsize())
        try:
            inbox.get(timeout=0.01)
        except queue.Empty:
            pass
    stop.set()
    for t in ts:
        t.join()
    high = max(high, inbox.qsize())
    assert 1 <= high <= inbox.maxsize + producers - 1


def test_a_stoppable_blocked_put_loop_ends_when_stopped() -> None:
    """How the worker waits on a full inbox (Executor._put, Worker._put): short timed puts in a
    loop that checks a stop event, so a stopped worker never hangs on an inbox nobody drains."""
    inbox = Inbox(1)
    inbox.put([[1]])
    stop = threading.Event()
    result: list[bool] = []

    def blocked() -> None:
        while not stop.is_set():
            try:
                inbox.put([[2]], timeout=0.05)
                result.append(True)
                return
            except queue.Full:
                continue
        result.append(False)

    t = threading.Thread(target=blocked)
    t.start()
    time.sleep(0.1)
    stop.set()
    t.join(2.0)
    assert not t.is_alive() and result == [False] and inbox.qsize() == 1
