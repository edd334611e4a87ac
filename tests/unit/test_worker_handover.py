"""When a worker asked to stop leaves (squall.worker.handover): plain values, the clock given."""

from __future__ import annotations

import dataclasses

from squall.worker.handover import DRAIN_SECS, Leaving, should_leave

# asked to stop at t=100 with a 15 s window, the slot still assigned, ZooKeeper there, no successor
WAITING = Leaving(now=101.0, stop_requested=100.0, handover_secs=15.0, assigned=True, successor=False,
                  zk_ready=True, retiring=False)


def at(now: float, **changes: object) -> Leaving:
    return dataclasses.replace(WAITING, now=now, **changes)


def test_not_asked_to_stop_never_leaves() -> None:
    assert not should_leave(at(1000.0, stop_requested=None))
    assert not should_leave(at(1000.0, stop_requested=None, handover_secs=0.0, assigned=False))


def test_serves_the_slot_until_its_successor_registers() -> None:
    assert not should_leave(at(100.0))
    assert not should_leave(at(114.9))
    assert should_leave(at(101.0, successor=True))


def test_leaves_at_the_end_of_the_window_without_a_successor() -> None:
    assert should_leave(at(115.0))
    assert should_leave(at(130.0))


def test_leaves_at_once_when_there_is_nothing_to_hand_over_or_no_way_to_see_it() -> None:
    assert should_leave(at(100.0, handover_secs=0.0))  # no window asked for (squall run)
    assert should_leave(at(100.0, assigned=False))  # the slot left the assignment
    assert should_leave(at(100.0, zk_ready=False))  # ZooKeeper away: no successor can be seen


def test_retiring_executors_still_get_their_drain_time_once_it_leaves() -> None:
    assert not should_leave(at(100.0, successor=True, retiring=True))
    assert should_leave(at(100.0 + DRAIN_SECS + 0.1, successor=True, retiring=True))
    assert not should_leave(at(100.0, handover_secs=0.0, retiring=True))
    assert should_leave(at(116.0, retiring=True))  # past the window, the drain time is long over
