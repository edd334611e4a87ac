"""squall.windowing's pure logic against windows computed by hand: count and duration, tumbling
and sliding, processing time on an injected clock, event time with out-of-order input,
watermarks and late tuples."""

from __future__ import annotations

import math
from typing import Any

import pytest

from squall.components import Tuple
from squall.windowing import (
    BAD_TIMESTAMP,
    NO_TIMESTAMP,
    Size,
    WatermarkGenerator,
    Window,
    WindowConfig,
    WindowManager,
    parse_duration,
    timestamp_of,
)


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def cfg(length: int | str, sliding: int | str | None = None, **kw: Any) -> WindowConfig:
    spec: dict[str, Any] = {"windowLength": length, **kw}
    if sliding is not None:
        spec["slidingInterval"] = sliding
    return WindowConfig.from_spec(spec)


def view(w: Window[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    return w.get(), w.get_new(), w.get_expired()


# -- processing time, by count -----------------------------------------------------------------

def test_count_tumbling() -> None:
    m: WindowManager[int] = WindowManager(cfg(3), Clock())
    fired = [w for i in range(1, 8) for w in m.add(i)]
    assert [view(w) for w in fired] == [
        ([1, 2, 3], [1, 2, 3], []),
        ([4, 5, 6], [4, 5, 6], [1, 2, 3]),
    ]
    assert fired[0].get_start_timestamp() is None
    assert m.next_due() is None  # no timer for count windows
    assert len(m) == 4  # 4, 5, 6 wait to expire at the next window; 7 waits for it


def test_count_sliding() -> None:
    m: WindowManager[int] = WindowManager(cfg(4, 2), Clock())
    fired = [w for i in range(1, 9) for w in m.add(i)]
    assert [view(w) for w in fired] == [
        ([1, 2], [1, 2], []),
        ([1, 2, 3, 4], [3, 4], []),
        ([3, 4, 5, 6], [5, 6], [1, 2]),
        ([5, 6, 7, 8], [7, 8], [3, 4]),
    ]


# -- processing time, by duration --------------------------------------------------------------

def test_duration_tumbling_uses_each_window_own_end() -> None:
    clock = Clock(100.0)
    m: WindowManager[str] = WindowManager(cfg("10s"), clock)
    assert m.next_due() == 110.0
    for t, item in ((101.0, "a"), (105.0, "b")):
        clock.now = t
        assert m.add(item) == []
    clock.now = 109.9
    assert m.advance() == []
    clock.now = 110.0
    (w,) = m.advance()
    assert view(w) == (["a", "b"], ["a", "b"], [])
    assert (w.get_start_timestamp(), w.get_end_timestamp()) == (100.0, 110.0)
    clock.now = 112.0
    m.add("c")
    clock.now = 120.0
    m.add("d")  # at the end exactly: in the window ending at 120
    clock.now = 123.0
    m.add("e")  # arrives after 120 but before the (late) timer runs: next window's
    (w,) = m.advance()
    assert view(w) == (["c", "d"], ["c", "d"], ["a", "b"])
    assert w.get_end_timestamp() == 120.0
    assert m.take_evicted() == ["a", "b"]
    clock.now = 151.0  # a stalled executor catches up, window by window
    (w130,) = m.advance()  # (130, 140] and (140, 150] hold nothing: not windows for execute
    assert view(w130) == (["e"], ["e"], ["c", "d"])
    assert m.take_evicted() == ["c", "d", "e"]  # e left at 140: acked now
    assert m.next_due() == 160.0 and len(m) == 0
    clock.now = 162.0
    m.add("f")
    clock.now = 170.0
    (w,) = m.advance()
    assert view(w) == (["f"], ["f"], ["e"])  # e's expiry is reported with the next window


def test_duration_sliding() -> None:
    clock = Clock(0.0)
    m: WindowManager[float] = WindowManager(cfg("10s", "5s"), clock)
    fired: list[Window[float]] = []
    for t in (1.0, 4.0, 6.0, 9.0, 12.0):
        clock.now = t
        fired += m.advance()
        m.add(t)
    for t in (15.0, 20.0, 25.0):
        clock.now = t
        fired += m.advance()
    assert [(w.get_end_timestamp(), *view(w)) for w in fired] == [
        (5.0, [1.0, 4.0], [1.0, 4.0], []),
        (10.0, [1.0, 4.0, 6.0, 9.0], [6.0, 9.0], []),
        (15.0, [6.0, 9.0, 12.0], [12.0], [1.0, 4.0]),
        (20.0, [12.0], [], [6.0, 9.0]),
    ]
    assert m.take_evicted() == [1.0, 4.0, 6.0, 9.0, 12.0] and len(m) == 0


def test_a_window_lists_its_tuples_when_asked_even_after_they_left() -> None:
    """A fired window makes its list of tuples on the first `get` (a bolt that counts from
    `get_new` and `get_expired` never pays for it): asked after later windows moved its tuples
    out of the manager, it still holds exactly its own."""
    clock = Clock(0.0)
    m: WindowManager[int] = WindowManager(cfg("2s", "1s"), clock)
    kept: list[Window[int]] = []
    for sec in range(6):
        for j in range(3):
            clock.now = sec + 0.1 + 0.25 * j
            m.add(10 * sec + j)
        clock.now = sec + 1.0
        fired = m.advance()
        assert len(fired) == 1
        if sec % 2:
            kept += fired  # kept and not asked; the others are dropped without asking
    assert [len(w) for w in kept] == [6, 6, 6]
    assert [w.get() for w in kept] == [
        [0, 1, 2, 10, 11, 12], [20, 21, 22, 30, 31, 32], [40, 41, 42, 50, 51, 52]]
    assert kept[-1].get() is kept[-1].get()
    assert len(m) == 6  # 40-52 are still in the windows to come


def test_count_length_duration_sliding() -> None:
    """Storm's mixed form: the last 3 tuples, every 10 s."""
    clock = Clock(0.0)
    m: WindowManager[int] = WindowManager(cfg(3, "10s"), clock)
    for i in range(1, 6):
        clock.now = float(i)
        m.add(i)
    clock.now = 10.0
    (w,) = m.advance()
    assert view(w) == ([3, 4, 5], [3, 4, 5], [])  # 1 and 2 were in no window: not "expired"
    assert m.take_evicted() == [1, 2]  # but acked


def test_duration_length_count_sliding() -> None:
    """The last 10 s, after every 2 tuples."""
    clock = Clock(0.0)
    m: WindowManager[int] = WindowManager(cfg("10s", 2), clock)
    fired: list[Window[int]] = []
    for t in (1, 2, 8, 11, 13, 14):
        clock.now = float(t)
        fired += m.add(t)
    assert [(w.get_end_timestamp(), *view(w)) for w in fired] == [
        (2.0, [1, 2], [1, 2], []),
        (11.0, [2, 8, 11], [8, 11], [1]),
        (14.0, [8, 11, 13, 14], [13, 14], [2]),
    ]
    # no more tuples, so no more windows: the clock still takes tuples out, and they are acked
    assert m.take_evicted() == [1, 2]
    assert m.next_due() == 18.0
    clock.now = 23.5
    assert m.advance() == []
    assert m.take_evicted() == [8, 11, 13] and m.next_due() == 24.0


# -- event time ----------------------------------------------------------------------------------

def test_event_time_sliding_out_of_order_and_empty_stretches() -> None:
    m: WindowManager[float] = WindowManager(cfg("10s", "5s", timestampField="ts"), Clock())
    for ts in (3.0, 12.0, 1.0, 7.0):  # out of order
        m.add(ts, ts)
    assert m.next_due() is None  # event time: only watermarks fire
    (w5,) = m.watermark(9.0)
    assert (w5.get_start_timestamp(), w5.get_end_timestamp()) == (-5.0, 5.0)
    assert view(w5) == ([1.0, 3.0], [1.0, 3.0], [])
    w10, w15 = m.watermark(16.0)
    assert view(w10) == ([1.0, 3.0, 7.0], [7.0], [])
    assert view(w15) == ([7.0, 12.0], [12.0], [1.0, 3.0])
    assert m.watermark(16.0) == []  # not an advance
    assert m.take_evicted() == [1.0, 3.0]
    m.add(40.0, 40.0)
    fired = m.watermark(50.0)
    # (15, 25] .. (25, 35] hold nothing and are skipped; (40, 50] holds nothing either
    assert [(w.get_end_timestamp(), *view(w)) for w in fired] == [
        (20.0, [12.0], [], [7.0]),
        (40.0, [40.0], [40.0], [12.0]),
        (45.0, [40.0], [], []),
    ]
    # the watermark is a window length past 40: it leaves (a stream that ends needs this)
    assert m.take_evicted() == [7.0, 12.0, 40.0] and len(m) == 0


def test_event_time_tumbling_aligns_to_the_interval() -> None:
    m: WindowManager[float] = WindowManager(cfg("5s", timestampField="ts"), Clock())
    for ts in (7.5, 6.0, 10.0, 10.5, 3.0):
        m.add(ts, ts)
    fired = m.watermark(12.0)
    # ends are multiples of 5: (0, 5], (5, 10]; a tuple at 10.0 closes (5, 10]
    assert [(w.get_end_timestamp(), *view(w)) for w in fired] == [
        (5.0, [3.0], [3.0], []),
        (10.0, [6.0, 7.5, 10.0], [6.0, 7.5, 10.0], [3.0]),
    ]
    with pytest.raises(ValueError, match="at or below the watermark"):
        m.add(11.0, 11.0)


def test_event_time_count_windows_follow_timestamp_order() -> None:
    m: WindowManager[int] = WindowManager(cfg(3, timestampField="ts"), Clock())
    for ts in (5, 1, 3, 2, 4):
        m.add(ts, float(ts))
    (w,) = m.watermark(3.0)
    assert view(w) == ([1, 2, 3], [1, 2, 3], []) and w.get_end_timestamp() == 3.0
    assert m.watermark(10.0) == []  # 4 and 5 are only two of the next three
    m.add(6, 11.0)
    (w,) = m.watermark(12.0)
    assert view(w) == ([4, 5, 6], [4, 5, 6], [1, 2, 3])


def test_event_time_sliding_count() -> None:
    m: WindowManager[int] = WindowManager(cfg(4, 2, timestampField="ts"), Clock())
    for ts in (6, 2, 5, 1, 4, 3, 9):
        m.add(ts, float(ts))
    fired = m.watermark(7.0)
    assert [view(w) for w in fired] == [
        ([1, 2], [1, 2], []),
        ([1, 2, 3, 4], [3, 4], []),
        ([3, 4, 5, 6], [5, 6], [1, 2]),
    ]


def test_watermarks_track_the_slowest_stream_minus_the_lag() -> None:
    gen = WatermarkGenerator([("a", "default"), ("b", "default")], lag=2.0)
    assert gen.track(("a", "default"), 10.0)
    assert gen.compute() is None  # b not seen yet
    assert gen.track(("b", "default"), 7.0)
    assert gen.track(("a", "default"), 8.0)  # out of order on a: fine, the max stays 10
    assert gen.compute() == 5.0  # min(10, 7) - 2
    assert gen.compute() is None  # nothing moved
    assert not gen.track(("b", "default"), 5.0)  # at the watermark: late
    assert not gen.track(("a", "default"), 4.0)
    assert gen.track(("b", "default"), 5.5)  # within the lag: on time
    assert gen.track(("b", "default"), 12.0)
    assert gen.compute() == 8.0


def test_late_tuples_never_enter_a_window() -> None:
    """The pipeline the bolt runs: track, then add only what is on time."""
    config = cfg("10s", timestampField="ts", lag="1s")
    m: WindowManager[float] = WindowManager(config, Clock())
    gen = WatermarkGenerator(["s"], config.lag)
    late: list[float] = []
    fired: list[Window[float]] = []
    for ts in (1.0, 4.0, 12.0, 3.0, 22.0, 9.0, 15.0):
        if gen.track("s", ts):
            m.add(ts, ts)
        else:
            late.append(ts)
        wm = gen.compute()
        if wm is not None:
            fired += m.watermark(wm)
    # watermarks: 0, 3, 11 (after 12: closes (0, 10]), 21 (after 22: closes (10, 20])
    assert late == [3.0, 9.0, 15.0]
    assert [(w.get_end_timestamp(), w.get()) for w in fired] == [(10.0, [1.0, 4.0]), (20.0, [12.0])]


# -- configuration and timestamps ------------------------------------------------------------

def test_sizes_and_durations() -> None:
    assert parse_duration("500ms") == 0.5
    assert parse_duration("1.5m") == 90.0
    assert parse_duration("2h") == 7200.0
    assert Size.of(10) == Size(10, True)
    assert Size.of("30s") == Size(30.0, False)
    for bad in ("10", "10 s", "-1s", "0s", "s"):
        with pytest.raises(ValueError, match="duration"):
            Size.of(bad)
    with pytest.raises(ValueError, match="at least 1"):
        Size.of(0)
    with pytest.raises(ValueError):
        Size.of(True)


def test_how_long_a_window_holds_a_tuple() -> None:
    assert cfg(100).max_hold_secs() is None
    assert cfg("10s").max_hold_secs() == 20.0  # tumbling: in at a start, acked at the next end
    assert cfg("10s", "5s").max_hold_secs() == 15.0
    assert cfg(100, "5s").max_hold_secs() == 5.0
    assert cfg("10s", "5s", timestampField="ts", lag="3s", watermarkInterval="500ms").max_hold_secs() == 18.5


def test_timestamps_from_tuples() -> None:
    fields = {"word": 0, "ts": 1}

    def tup(value: Any) -> Tuple:
        return Tuple(["w", value], 1, "split", "default", fields, None)

    assert timestamp_of(tup(12), "ts") == (12.0, None)
    assert timestamp_of(tup(12.5), "ts") == (12.5, None)
    assert timestamp_of(tup(None), "ts") == (None, NO_TIMESTAMP)
    assert timestamp_of(tup(12), "time") == (None, NO_TIMESTAMP)
    for bad in ("12", True, math.nan, math.inf, [1]):
        assert timestamp_of(tup(bad), "ts") == (None, BAD_TIMESTAMP)
