"""Storm's windowing (`BaseWindowedBolt`, `WindowManager`, trigger and eviction policies,
`WaterMarkEventGenerator`, `WindowedBoltExecutor`) in Python.

The decisions are pure: `WindowManager` and `WatermarkGenerator` take tuples, timestamps and an
injected clock and answer with the windows that fire; nothing here sleeps, starts a thread or
touches a socket. `WindowedBoltExecutor` is the bolt the worker's executor drives in place of a
user's `WindowedBolt` (as Storm wraps an `IWindowedBolt` in its `WindowedBoltExecutor`): it feeds
the manager, acks a tuple when it leaves its last window, anchors the bolt's emits to the
window's tuples and sends late tuples to the late stream. The executor calls its `on_timer` when
`seconds_to_next` says a time window or a watermark is due.

Windows, with `L` the length and `S` the sliding interval (tumbling: `S = L`):

- a window has an end `e` (its reference time); by duration it holds the tuples with timestamps
  in `(e - L, e]`, by count the last `L` tuples with timestamps `<= e`;
- processing time (the default): a tuple's timestamp is the clock when it arrived; a duration
  interval fires every `S` seconds of the clock, a count interval after every `S` tuples;
- event time (`timestampField`): a tuple's timestamp is that field (seconds, a number). Every
  `watermarkInterval` the watermark becomes the smallest, over the input streams, of the largest
  timestamp seen, minus `lag`; a tuple at or below the last watermark is late. A watermark fires,
  in order, every window whose end it passed: by duration, ends are multiples of `S` (aligned to
  the epoch, as Storm aligns them), windows holding no tuple are skipped; by count, every `S`-th
  tuple in timestamp order ends a window;
- a tuple expires (and is acked) when a window's start passes it, or when the clock (processing
  time) or the watermark (event time) is a window length past it; `get_expired()` of a window is
  what left the windows since the previous window (each once, after it was in `get_new()`),
  `get_new()` what no earlier window held. A window with
  no tuples is not passed to `execute` (as in Storm; what expired meanwhile is acked at once and
  shows in the next window's `get_expired()`).
"""

from __future__ import annotations

import bisect
from array import array
import dataclasses
from itertools import chain, repeat
import logging
import math
import re
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from squall.components import TICK_STREAM, OutputCollector, TopologyContext, Tuple, WindowedBolt

log = logging.getLogger("squall.windowing")

T = TypeVar("T")
Clock = Callable[[], float]

# the fields of a windowed bolt's late stream (Storm's has "tuple" alone)
LATE_FIELDS = ("tuple", "reason")
LATE = "late"
NO_TIMESTAMP = "no timestamp"
BAD_TIMESTAMP = "timestamp not a number"
DEFAULT_WATERMARK_INTERVAL = 1.0  # Storm's topology.bolts.watermark.event.interval.ms: 1000

_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)$")
DURATION_PATTERN = _DURATION.pattern
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: str, *, allow_zero: bool = False) -> float:
    """"500ms", "30s", "1.5m", "2h" -> seconds."""
    m = _DURATION.match(value)
    if m is None:
        raise ValueError(f"{value!r} is not a duration (a number and ms, s, m or h: 500ms, 30s, 2m)")
    secs = float(m.group(1)) * _UNIT[m.group(2)]
    if secs <= 0 and not (allow_zero and secs == 0):
        raise ValueError(f"{value!r}: a duration must be more than 0")
    return secs


@dataclasses.dataclass(frozen=True)
class Size:
    """A window length or sliding interval: a count of tuples or a duration in seconds."""

    value: float
    count: bool

    @staticmethod
    def of(value: int | str) -> Size:
        """An int is a count of tuples, a string a duration ("30s")."""
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"{value!r}: a count (an integer) or a duration (like 30s)")
        if isinstance(value, int):
            if value < 1:
                raise ValueError(f"{value!r}: a count must be at least 1")
            return Size(value, True)
        return Size(parse_duration(value), False)

    def __str__(self) -> str:
        return f"{int(self.value)} tuples" if self.count else f"{self.value:g}s"


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """One windowed bolt's windows (Storm's `topology.bolts.window.*` settings)."""

    length: Size
    sliding: Size
    timestamp_field: str | None = None
    lag: float = 0.0
    watermark_interval: float = DEFAULT_WATERMARK_INTERVAL
    late_stream: str | None = None

    @property
    def event_time(self) -> bool:
        return self.timestamp_field is not None

    def max_hold_secs(self) -> float | None:
        """The longest a tuple can wait in the windows, in seconds, when the windows are timed
        (None for count windows): Storm's rule is that the message timeout must exceed it."""
        secs = [s.value for s in (self.length, self.sliding) if not s.count]
        if not secs:
            return None
        total = sum(secs)
        if self.event_time:
            total += self.lag + self.watermark_interval
        return total

    @staticmethod
    def from_spec(spec: Mapping[str, Any]) -> WindowConfig:
        """From the topology file's `window` block (camelCase keys, as `WindowSpec` dumps it)."""
        length = Size.of(spec["windowLength"])
        sliding = spec.get("slidingInterval")
        lag = spec.get("lag")
        interval = spec.get("watermarkInterval")
        return WindowConfig(
            length=length,
            sliding=Size.of(sliding) if sliding is not None else length,
            timestamp_field=spec.get("timestampField"),
            lag=parse_duration(lag, allow_zero=True) if lag is not None else 0.0,
            watermark_interval=(
                parse_duration(interval) if interval is not None else DEFAULT_WATERMARK_INTERVAL
            ),
            late_stream=spec.get("lateStream"),
        )


class Window(Generic[T]):
    """Storm's `Window` / `TupleWindow`: what `WindowedBolt.execute` receives.

    A window from a `WindowManager` makes its list of tuples when `get` is first called (or
    when the manager is about to remove some of them from its own list): a bolt that counts
    from `get_new` and `get_expired` alone never pays for a list of every tuple of the window,
    each of them touched (its count of references) twice while cold in memory."""

    __slots__ = ("_items", "_new", "_expired", "start", "end", "_of", "_first", "_stop", "__weakref__")

    def __init__(self, items: list[T] | None, new: list[T], expired: list[T], start: float | None,
                 end: float, of: WindowManager[T] | None = None, first: int = 0, stop: int = 0) -> None:
        self._items = items
        self._new = new
        self._expired = expired
        self.start = start
        self.end = end
        # items None: the window is the manager's tuples numbered [first, stop) since it started
        self._of = of
        self._first = first
        self._stop = stop

    def get(self) -> list[T]:
        """The tuples in this window, oldest first."""
        items = self._items
        if items is None:
            of = self._of
            assert of is not None
            gone = of._gone
            items = self._items = of.items[self._first - gone:self._stop - gone]
            self._of = None
        return items

    def get_new(self) -> list[T]:
        """The tuples no earlier window held."""
        return self._new

    def get_expired(self) -> list[T]:
        """The tuples that left the windows since the previous one (acked after this
        window's `execute`)."""
        return self._expired

    def get_start_timestamp(self) -> float | None:
        """`end - length` for a duration window; None for a count window."""
        return self.start

    def get_end_timestamp(self) -> float:
        """The window's reference time: its trigger's time, or its aligned end in event time."""
        return self.end

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else self._stop - self._first

    def __repr__(self) -> str:
        return (f"Window(end={self.end}, start={self.start}, {len(self)} tuples, "
                f"{len(self._new)} new, {len(self._expired)} expired)")


class WindowManager(Generic[T]):
    """Storm's WindowManager with its trigger and eviction policies, for one bolt task.

    Keeps the tuples of the current and coming windows sorted by timestamp (arrival time in
    processing time), as two parallel lists. `add`, `watermark` and `advance` return the windows
    that fired, oldest first; `take_evicted` what left every window (for the caller to ack).
    Memory is bounded by the windows: by count, at most length + sliding tuples wait; by
    duration, those of length + sliding seconds (plus the lag, in event time).
    """

    def __init__(self, config: WindowConfig, clock: Clock = time.time) -> None:
        self.config = config
        self.clock = clock
        self._event_time = config.event_time
        # timestamps (sorted) and their tuples; the first `_seen` were in a window already (a
        # prefix: a later tuple never sorts before the end of a window that fired)
        self.ts: list[float] = []
        self.items: list[T] = []
        self._seen = 0
        # evicted, not yet acked by the caller; evicted after a window held them, not yet in a
        # window's get_expired
        self._evicted: list[T] = []
        self._unreported: list[T] = []
        # tuples removed from the front of `items` since the start; the windows fired that have
        # not made their lists yet (`Window.get`), made before `items` loses any of their tuples
        self._gone = 0
        self._lazy: list[weakref.ref[Window[T]]] = []
        length, sliding = config.length, config.sliding
        self._length_n = int(length.value) if length.count else 0
        self._length_s = 0.0 if length.count else length.value
        self._slide_n = int(sliding.value) if sliding.count else 0
        self._slide_s = 0.0 if sliding.count else sliding.value
        # processing time: tuples since the last count trigger, the next duration trigger
        self._since = 0
        self._next_fire: float | None = None
        if not config.event_time and not sliding.count:
            self._next_fire = clock() + self._slide_s
        # event time: the last duration window's end; index of the tuple ending the next count
        # window (positions at or below the last watermark never move)
        self._last_end: float | None = None
        self._next_index = self._slide_n - 1
        self.watermark_ts: float | None = None

    def __len__(self) -> int:
        return len(self.ts)

    # -- input ---------------------------------------------------------------------------------
    def add(self, item: T, ts: float | None = None) -> list[Window[T]]:
        """A tuple arrives. Processing time: `ts` is ignored (the clock is read); event time: `ts`
        is its timestamp, which the caller checked is above the watermark."""
        stamps = self.ts
        if not self._event_time:
            now = self.clock()
            if stamps and stamps[-1] > now:
                now = stamps[-1]  # a clock stepped back: keep arrival order
            stamps.append(now)
            self.items.append(item)
            if self._slide_n:
                self._since += 1
                if self._since >= self._slide_n:
                    self._since = 0
                    return self._fire(now, len(stamps))
            return _NONE
        if ts is None:
            raise ValueError("an event-time window needs each tuple's timestamp")
        if self.watermark_ts is not None and ts <= self.watermark_ts:
            raise ValueError(f"timestamp {ts} is at or below the watermark {self.watermark_ts}")
        if not stamps or stamps[-1] <= ts:
            stamps.append(ts)
            self.items.append(item)
        else:
            if self._lazy:
                self._make_lists()
            i = bisect.bisect_right(stamps, ts)
            stamps.insert(i, ts)
            self.items.insert(i, item)
        return _NONE

    def advance(self) -> list[Window[T]]:
        """Processing time: fire the duration windows due by the clock (each at its own end)."""
        out: list[Window[T]] = []
        now = self.clock()
        if self._next_fire is None:
            if not self._event_time and self._length_s:
                # windows slid by count: what the clock took out of every future window leaves
                self._evict(bisect.bisect_right(self.ts, now - self._length_s))
            return out
        while now >= self._next_fire:
            end = self._next_fire
            self._next_fire = end + self._slide_s
            out += self._fire(end, bisect.bisect_right(self.ts, end))
        return out

    def next_due(self) -> float | None:
        """When (clock time) `advance` has work; None when no timer is needed."""
        if self._next_fire is None and not self._event_time and self._length_s and self.ts:
            return self.ts[0] + self._length_s
        return self._next_fire

    def watermark(self, ts: float) -> list[Window[T]]:
        """Event time: every tuple with a timestamp <= `ts` has arrived; fire what it closes."""
        if self.watermark_ts is not None and ts <= self.watermark_ts:
            return []
        self.watermark_ts = ts
        out = self._count_windows(ts) if self._slide_n else self._duration_windows(ts)
        if self._length_s:
            # every window holding a tuple at or before ts - length has fired (or was empty)
            self._evict(bisect.bisect_right(self.ts, ts - self._length_s))
        return out

    # -- triggers ------------------------------------------------------------------------------
    def _count_windows(self, watermark: float) -> list[Window[T]]:
        out: list[Window[T]] = []
        stamps = self.ts
        ready = bisect.bisect_right(stamps, watermark)
        while self._next_index < ready:
            i = self._next_index
            before = len(stamps)
            out += self._fire(stamps[i], i + 1)
            gone = before - len(stamps)
            ready -= gone
            self._next_index = i - gone + self._slide_n
        return out

    def _duration_windows(self, watermark: float) -> list[Window[T]]:
        out: list[Window[T]] = []
        stamps = self.ts
        step = self._slide_s
        while stamps:
            if self._last_end is None:
                end = math.ceil(stamps[0] / step) * step
            else:
                end = self._last_end + step
                if not self._holds(end):
                    # no window up to the first tuple after `end` holds anything: skip to it
                    i = bisect.bisect_right(stamps, end)
                    if i == len(stamps):
                        break
                    end = math.ceil(stamps[i] / step) * step
            if end > watermark:
                break
            out += self._fire(end, bisect.bisect_right(stamps, end))
            self._last_end = end
        return out

    def _holds(self, end: float) -> bool:
        """Whether the duration window ending at `end` holds a tuple."""
        stamps = self.ts
        i = bisect.bisect_right(stamps, end - self._length_s)
        return i < len(stamps) and stamps[i] <= end

    def _fire(self, end: float, stop: int) -> list[Window[T]]:
        """The window ending at `end` over the first `stop` tuples; what falls out of it expires.
        An empty window is not returned: what expired goes to the next window's `get_expired`."""
        if self._length_n:
            first = max(0, stop - self._length_n)
            start = None
        else:
            start = end - self._length_s
            first = bisect.bisect_right(self.ts, start, 0, stop)
        seen = self._seen
        new = self.items[max(first, seen):stop] if stop > seen else []
        self._evict(first)
        self._seen = max(self._seen, stop - first)
        if stop <= first:
            return []
        expired, self._unreported = self._unreported, []
        # its tuples are now items[:stop - first]: the list is made if the bolt asks for it
        gone = self._gone
        window = Window(None, new, expired, start, end, self, gone, gone + stop - first)
        self._lazy.append(weakref.ref(window))
        return [window]

    def _make_lists(self) -> None:
        """The fired windows still alive make their lists before `items` changes."""
        for ref in self._lazy:
            window = ref()
            if window is not None:
                window.get()
        self._lazy.clear()

    def _evict(self, first: int) -> None:
        if first:
            if self._lazy:
                self._make_lists()
            self._gone += first
            items = self.items
            self._evicted += items[:first]
            # only what a window held can leave one (a tuple may leave unseen when the clock
            # passes it before a count interval completes)
            self._unreported += items[:min(first, self._seen)]
            del items[:first]
            del self.ts[:first]
            self._seen = max(0, self._seen - first)

    def take_evicted(self) -> list[T]:
        """The tuples that left every window since the last call: the caller acks them."""
        out, self._evicted = self._evicted, []
        return out

    def has_evicted(self) -> bool:
        return bool(self._evicted)


_NONE: list[Any] = []  # no window fired (shared, never modified)


class WatermarkGenerator:
    """Storm's WaterMarkEventGenerator: the watermark over a bolt's input streams.

    `track` records a tuple's timestamp on its stream and says whether it is on time; `compute`
    (every `watermarkInterval`) gives the new watermark once every input stream has been seen:
    the smallest of the streams' largest timestamps, minus the lag; None when it did not move.
    """

    def __init__(self, streams: Iterable[Hashable], lag: float) -> None:
        self.streams = frozenset(streams)
        self.lag = lag
        self.max_ts: dict[Hashable, float] = {}
        self.last: float | None = None

    def track(self, stream: Hashable, ts: float) -> bool:
        current = self.max_ts.get(stream)
        if current is None or ts > current:
            self.max_ts[stream] = ts
        return self.last is None or ts > self.last

    def compute(self) -> float | None:
        if not self.streams or not self.streams <= self.max_ts.keys():
            return None
        ts = min(self.max_ts[s] for s in self.streams) - self.lag
        if self.last is not None and ts <= self.last:
            return None
        self.last = ts
        return ts


def timestamp_of(tup: Tuple, field: str) -> tuple[float | None, str | None]:
    """A tuple's event time from `field`: (seconds, None), or (None, why it has none)."""
    try:
        value = tup.get(field)
    except KeyError:
        return None, NO_TIMESTAMP
    if value is None:
        return None, NO_TIMESTAMP
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, BAD_TIMESTAMP
    return float(value), None


class _WindowCollector:
    """The collector a windowed bolt sees: emits default to anchoring on the window's tuples
    (Storm's WindowedOutputCollector); acking is the window's job, so `ack` does nothing."""

    def __init__(self, runner: WindowedBoltExecutor, collector: OutputCollector) -> None:
        self._runner = runner
        self._collector = collector

    def emit(self, values: Sequence[Any], stream: str = "default", anchors: Any = None) -> list[int]:
        if anchors is None:
            runner = self._runner
            if runner.rooted is not None and runner.window is not None:
                return runner.emit_window(values, stream, None)
            anchors = runner.anchors
        elif anchors:
            self._runner.explicit = True
            self._runner.unmirror()  # the anchors' own ids, back on the tuples
        return self._collector.emit(values, stream, anchors)

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = "default",
                    anchors: Any = None) -> None:
        if anchors is None:
            runner = self._runner
            if runner.rooted is not None and runner.window is not None:
                runner.emit_window(values, stream, task)
                return
            anchors = runner.anchors
        elif anchors:
            self._runner.explicit = True
            self._runner.unmirror()
        self._collector.emit_direct(task, values, stream, anchors)

    def ack(self, tup: Tuple) -> None:
        """Window tuples are acked when they expire."""

    def fail(self, tup: Tuple) -> None:
        self._runner.unmirror()  # its anchors back on it
        self._collector.fail(tup)

    def report_error(self, exc: BaseException) -> None:
        self._collector.report_error(exc)


class _WindowAnchoring:
    """Anchoring to a whole window through one tree of the bolt's own (with the worker's
    collector).

    Storm anchors a window's output to each of its tuples: one fresh edge id per tuple, written
    into the tuple's ack value, so each tuple's ack carries the edges of every window output
    anchored to it, and acking one output downstream is one acker message per spout tree of
    the window (tens of thousands for a busy window). Here a window that emits gets a tree of
    its own, registered with an acker with this task as its owner (`BoltCollector.new_tree`,
    `init_tree`): each output copy carries one edge of that tree, so acking it downstream is
    one message, and the acker tells this task when the window tree completed. What the
    window's outputs owe its spout trees is kept here instead: the acks of tuples leaving the
    windows are held back (`held`) while a window tree that may contain one of them is open,
    and sent when it completed. A spout tree still completes only when every tuple of it left
    the windows and every output anchored to them was acked; when an output fails downstream,
    or its window tree is not complete within the message timeout, every spout tree of that
    window is failed (Storm's outcome: its spouts replay them).

    For processing-time windows by duration, `execute` appends each anchor's (timestamp, root,
    edge) to three `array`s while the tuple is hot in memory, so the window's bursts read none
    of the (cold) tuples they ack; same timestamps as the manager's, so the same bisections
    pick the same tuples. Other windows read the tuples.

    Once copied, a tuple's anchors dict is dropped (`anchors` None, the count of its anchors in
    `rn`): a window keeps its tuples for its length and slide, and the dict, its key table and
    its two ids were about half of what each kept tuple weighs, read and freed cold when it
    expired. Whatever needs a tuple's own anchors back (the bolt anchoring an emit explicitly,
    or failing a tuple) first puts them back on every tuple the window holds (`restore`) and
    the window reads its tuples from then on, as for ids beyond 64 bits.

    The arrays are filled per batch of input, not per tuple: an array's `append` parses its
    argument by format (about 60 ns an item), a list's does not, so a tuple joining the window
    appends its roots, edges and count to three lists (`proot`, `pedge`, `pn`) and `settle`
    moves a batch of them into the arrays with one `fromlist` each (about 20 ns an item). The executor settles after
    each batch it hands over; whatever reads the arrays settles first (`rts` is a property
    that does).
    """

    __slots__ = ("collector", "clock", "timeout", "tree", "owing", "roots", "trees", "seq", "held",
                 "_rts", "rid", "redge", "rn", "proot", "pedge", "pn", "stamps", "items", "overflow")

    def __init__(self, collector: Any, mirror: bool, clock: Clock, timeout: float) -> None:
        self.collector = collector
        self.clock = clock
        self.timeout = timeout
        self.tree = 0  # the tree of the window being executed (0: none yet; -1: no spout trees)
        self.owing = 0  # XOR of the edge ids of its output copies
        self.roots: Any = None  # its spout trees: an array of root ids, or its tuples
        # open window trees, oldest first: id -> (sequence number, deadline, the window's start,
        # its spout trees: an array of root ids or the window's tuples), for failing them
        self.trees: dict[int, tuple[int, float, float | None, Any]] = {}
        self.seq = 0
        # acks of tuples that left the windows, held until every window tree up to the first
        # number (which may hold them) is closed: (number, root -> XOR), oldest first
        self.held: list[tuple[int, dict[int, int]]] = []
        self._rts = array("d") if mirror else None
        self.rid = array("q")
        self.redge = array("q")
        # per tuple held (not acked yet, oldest first): how many anchors it had, dropped from it
        self.rn = array("I")
        # the anchors of the newest tuples, not in the arrays yet (`settle`): roots, edges, and
        # per tuple how many; those tuples are the last len(pn) of `items` (the manager's list,
        # set by the window, as are its timestamps `stamps`); `overflow` is called with one
        # whose anchors do not fit the arrays
        self.proot: list[Any] = []
        self.pedge: list[Any] = []
        self.pn: list[int] = []
        self.stamps: list[float] = []
        self.items: list[Tuple] = []
        self.overflow: Callable[[Tuple], None] | None = None

    @property
    def rts(self) -> array[float] | None:
        """Per anchor copied, its tuple's timestamp (None: the window reads its tuples)."""
        if self.pn:
            self.settle()
        return self._rts

    def settle(self) -> None:
        """Copy the anchors of the tuples that joined since the last call into the arrays."""
        pn = self.pn
        k = len(pn)
        rts = self._rts
        if not k or rts is None:
            return
        rid, redge = self.rid, self.redge
        n0 = len(rid)
        try:
            rid.fromlist(self.proot)  # from a list: twice as fast as `extend`
            redge.fromlist(self.pedge)
        except (OverflowError, TypeError):
            # ids that do not fit 64 bits: this window reads its tuples' anchors from now on
            del rid[n0:]
            del redge[n0:]
            bad = next(t for t, a in zip(self.items[-k:], self._pending()) if any(
                type(x) is not int or not -2**63 <= x < 2**63 for kv in a.items() for x in kv))
            assert self.overflow is not None
            self.overflow(bad)
            return
        self.rn.fromlist(pn)
        stamps = self.stamps[-k:]
        if len(self.proot) == k and pn.count(1) == k:
            rts.fromlist(stamps)  # one anchor each, the common case
        else:
            rts.extend(chain.from_iterable(map(repeat, stamps, pn)))
        self.proot.clear()
        self.pedge.clear()
        pn.clear()

    def _pending(self) -> list[dict[Any, Any]]:
        """The anchors of the tuples not settled yet, as they had them, oldest first."""
        out: list[dict[Any, Any]] = []
        roots, edges = self.proot, self.pedge
        i = 0
        for k in self.pn:
            out.append({roots[j]: edges[j] for j in range(i, i + k)})
            i += k
        return out

    def put_back(self) -> None:
        """The tuples not settled yet get their anchors back (and leave the lists)."""
        pn = self.pn
        if pn:
            for tup, a in zip(self.items[-len(pn):], self._pending()):
                if a:
                    tup.anchors = a
            self.proot.clear()
            self.pedge.clear()
            pn.clear()

    def emit(self, window: Window[Tuple], values: Sequence[Any], stream: str, task: int | None) -> list[int]:
        tree = self.tree
        if not tree:
            # the window's first emit: its spout trees (to fail them if an output fails), and
            # a tree of its own when it has any (else its outputs are not anchored, as in Storm)
            rts = self.rts  # settles
            if rts is not None and window.start is not None:
                roots: Any = self.rid[bisect.bisect_right(rts, window.start):bisect.bisect_right(rts, window.end)]
                anchored = bool(roots)
            else:
                roots = window.get()
                anchored = any(t.anchors for t in roots)
            self.roots = roots
            tree = self.collector.new_tree() if anchored else -1
            self.tree = tree
        targets: list[int]
        targets, xor = self.collector.emit_tree(values, stream, max(tree, 0), task)
        self.owing ^= xor
        return targets

    def close_window(self, window: Window[Tuple]) -> None:
        """After a window's `execute`: register its tree, if its outputs went anywhere."""
        tree, owing, roots = self.tree, self.owing, self.roots
        self.tree, self.owing, self.roots = 0, 0, None
        if not owing:
            return
        self.seq += 1
        self.collector.init_tree(tree, owing)
        self.trees[tree] = (self.seq, self.clock() + self.timeout, window.start, roots)

    def ack(self, tuples: list[Tuple], first_kept: float | None, by_tuple: bool) -> None:
        """Ack `tuples`, which left the windows; `first_kept` is the timestamp of the oldest
        tuple still in them (None: none is). `by_tuple`: a tuple's own ack value may be set (the
        bolt anchored to some explicitly), so read the tuples."""
        rts = self.rts  # settles
        n = 0
        if rts is not None:
            n = len(rts) if first_kept is None else bisect.bisect_left(rts, first_kept)
        held: dict[int, int] | None = None
        if self.trees:
            # the newest open window tree that may hold one of them: by the timestamps when the
            # arrays have them (a window (start, end] holds none at or before its start)
            need = 0
            if rts is not None:
                if n:
                    last = rts[n - 1]
                    for seq, _deadline, start, _roots in self.trees.values():
                        if start is None or start < last:
                            need = seq
            else:
                need = self.seq
            if need:
                held = {}
                self.held.append((need, held))
        if rts is None or by_tuple:
            self.collector.ack_window(tuples, held)
        else:
            self.collector.ack_roots(self.rid, self.redge, n, held, len(tuples))
        if rts is not None:
            del rts[:n]
            del self.rid[:n]
            del self.redge[:n]
            del self.rn[:len(tuples)]

    def tree_done(self, tree: int, ok: bool) -> None:
        """The acker's word on a window tree: every output anchored to it was acked (`ok`),
        or one failed."""
        got = self.trees.pop(tree, None)
        if got is None:
            return  # timed out here already
        if not ok:
            self._fail(got[3])
        self._release()

    def next_deadline(self) -> float | None:
        for _seq, deadline, _start, _roots in self.trees.values():
            return deadline
        return None

    def expire(self, now: float) -> None:
        """Fail the window trees not complete within the message timeout."""
        trees = self.trees
        late = []
        for tree, (_seq, deadline, _start, roots) in trees.items():
            if deadline > now:
                break
            late.append(tree)
        if late:
            for tree in late:
                self._fail(trees.pop(tree)[3])
            self._release()

    def _fail(self, roots: Any) -> None:
        if type(roots) is not array:
            roots = [r for t in roots if t.anchors for r in t.anchors]
        self.collector.fail_roots(roots)

    def _release(self) -> None:
        held = self.held
        if not held:
            return
        low = None
        for seq, _deadline, _start, _roots in self.trees.values():
            low = seq
            break
        while held and (low is None or held[0][0] < low):
            self.collector.ack_held(held.pop(0)[1])

    def unmirror(self, tuples: Iterable[Tuple]) -> None:
        """Read the tuples' anchors from now on: anchors that do not fit the arrays (ids outside
        64 bits, which no Squall spout or collector makes), or the bolt needs its tuples' own
        anchors. `tuples`: those the window holds, oldest first; their anchors go back on them."""
        if self._rts is None:
            return
        self.put_back()  # the newest, not copied yet: past `rn`, so `restore` leaves them
        self.restore(tuples)
        self._rts = None
        self.rid = array("q")
        self.redge = array("q")
        self.rn = array("I")

    def restore(self, tuples: Iterable[Tuple]) -> None:
        """Put back the anchors dropped from `tuples` (the window's, oldest first: one entry of
        `rn` each, in order; a tuple past them, whose anchors did not fit, kept its own)."""
        rid, redge = self.rid, self.redge
        i = 0
        for tup, k in zip(tuples, self.rn):
            if k:
                tup.anchors = {rid[j]: redge[j] for j in range(i, i + k)}
                i += k


# what `_WindowAnchoring` needs of a collector (the worker's `BoltCollector` has them)
_ANCHORING = ("new_tree", "emit_tree", "init_tree", "ack_window", "ack_roots", "ack_held", "fail_roots")


class WindowedBoltExecutor:
    """What the executor drives for a `WindowedBolt` (Storm's WindowedBoltExecutor)."""

    def __init__(self, bolt: WindowedBolt, config: WindowConfig, inputs: Iterable[tuple[str, str]],
                 clock: Clock = time.time, timeout: float = 30.0) -> None:
        self.bolt = bolt
        self.timeout = timeout  # the topology's message timeout: for the windows' own trees
        self.config = config
        self.clock = clock
        self.manager: WindowManager[Tuple] = WindowManager(config, clock)
        self.watermarks = WatermarkGenerator(inputs, config.lag) if config.event_time else None
        self._next_watermark = clock() + config.watermark_interval
        # the tuples of the window being executed (emits are anchored to them by default)
        self.anchors: list[Tuple] = []
        self.window: Window[Tuple] | None = None
        # the bolt gave anchors of its own to an emit: the tuples' ack values may be set
        self.explicit = False
        # with the worker's collector (`emit_tree` / `ack_window`...): window emits are anchored
        # to a tree of the window's own (see _WindowAnchoring); None with any other collector
        # (the stateful harness records acks itself): then per tuple, through the collector's
        # own `emit` and `ack`
        self.rooted: _WindowAnchoring | None = None
        # the worker's compiled input for this window while it mirrors (executor.WindowFeed)
        self.feed: Any = None
        self.late = 0
        self._warned = False
        if not config.event_time and not config.sliding.count:
            setattr(self, "execute", self._execute_timed)  # noqa: B010 - the hot path, bound once

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        if all(hasattr(collector, m) for m in _ANCHORING):
            config = self.config
            mirror = not config.event_time and not config.sliding.count and not config.length.count
            rooted = self.rooted = _WindowAnchoring(collector, mirror, self.clock, self.timeout)
            rooted.stamps = self.manager.ts
            rooted.items = self.manager.items
            rooted.overflow = self.unmirror
            if mirror:
                setattr(self, "execute", self._execute_mirrored)  # noqa: B010 - the hot path
        self.bolt.prepare(conf, context, _WindowCollector(self, collector))

    def emit_window(self, values: Sequence[Any], stream: str, task: int | None) -> list[int]:
        """An emit from `execute(window)` anchored to the window (the default)."""
        assert self.rooted is not None and self.window is not None
        return self.rooted.emit(self.window, values, stream, task)

    def _execute_timed(self, tup: Tuple) -> float | None:
        """`execute` for processing-time windows slid by duration, the common case: a tuple only
        joins the list (windows fire from `on_timer`). Returns the time it joined at (None: a
        tick, acked)."""
        if tup.stream == TICK_STREAM:
            self.collector.ack(tup)
            return None
        m = self.manager
        stamps = m.ts
        now = self.clock()
        if stamps and stamps[-1] > now:
            now = stamps[-1]  # a clock stepped back: keep arrival order
        stamps.append(now)
        m.items.append(tup)
        return now

    def _execute_mirrored(self, tup: Tuple) -> None:
        """`_execute_timed` that also moves the tuple's anchors to the window's lists, for
        `settle` to copy into its arrays (the worker's executor runs the same steps compiled:
        `squall.worker.bolt.WindowFeed`, and settles after each batch)."""
        if self._execute_timed(tup) is None:
            return
        rooted = self.rooted
        assert rooted is not None
        a = tup.anchors
        if a:
            rooted.proot.extend(a)
            rooted.pedge.extend(a.values())
            rooted.pn.append(len(a))
            tup.anchors = None
        else:
            rooted.pn.append(0)

    def settle(self) -> None:
        """Copy the anchors of the tuples that joined since the last call into the window's
        arrays (see _WindowAnchoring): the executor calls it after each batch."""
        rooted = self.rooted
        if rooted is not None and rooted.pn:
            rooted.settle()

    def unmirror(self, tup: Tuple | None = None) -> None:
        """Read the tuples' anchors from now on (their anchors put back on them): `tup` is
        anchored to ids outside 64 bits, or (None) the bolt needs the tuples' own anchors."""
        rooted = self.rooted
        if rooted is None or rooted._rts is None:
            return
        if tup is not None:
            log.warning("a tuple from %s:%s is anchored to ids outside 64 bits: this window "
                        "reads its tuples' anchors from now on", tup.source_component, tup.stream)
        m = self.manager
        rooted.unmirror(m._evicted + m.items)
        feed = self.feed
        if feed is not None:
            feed.on = False
        setattr(self, "execute", self._execute_timed)  # noqa: B010

    def execute(self, tup: Tuple) -> None:
        if tup.stream == TICK_STREAM:
            self.collector.ack(tup)
            return
        field = self.config.timestamp_field
        if field is None:
            fired = self.manager.add(tup)
            if fired or self.manager.has_evicted():
                self._activate(fired)
            return
        ts, why = timestamp_of(tup, field)
        if ts is None:
            self._late(tup, why or NO_TIMESTAMP)
            return
        assert self.watermarks is not None
        if not self.watermarks.track((tup.source_component, tup.stream), ts):
            self._late(tup, LATE)
            return
        self._activate(self.manager.add(tup, ts))

    def _late(self, tup: Tuple, reason: str) -> None:
        self.late += 1
        stream = self.config.late_stream
        if stream is not None:
            self.collector.emit([list(tup.values), reason], stream, tup)
        elif not self._warned:
            self._warned = True
            log.warning("a tuple from %s:%s went out of the windows (%s) and there is no late "
                        "stream to send it to; such tuples are acked and dropped",
                        tup.source_component, tup.stream, reason)
        self.collector.ack(tup)

    def seconds_to_next(self) -> float | None:
        """Seconds until `on_timer` has work (None: never, by time)."""
        due = self.manager.next_due()
        if self.watermarks is not None:
            due = self._next_watermark if due is None else min(due, self._next_watermark)
        if self.rooted is not None and self.rooted.trees:
            deadline = self.rooted.next_deadline()
            if deadline is not None:
                due = deadline if due is None else min(due, deadline)
        return None if due is None else due - self.clock()

    def held(self) -> int:
        """How many tuples the windows hold (waiting for, or in, a window)."""
        return len(self.manager)

    def tree_done(self, tree: int, ok: bool) -> None:
        """The acker's completion of one of the windows' own trees (see _WindowAnchoring)."""
        if self.rooted is not None:
            self.rooted.tree_done(tree, ok)

    def on_timer(self) -> None:
        """Fire the windows and the watermark that are due; fail the window trees that timed
        out."""
        rooted = self.rooted
        if rooted is not None:
            if rooted.pn:
                rooted.settle()  # before the manager moves any tuple out of its list
            if rooted.trees:
                rooted.expire(self.clock())
        self._activate(self.manager.advance())
        if self.watermarks is not None:
            now = self.clock()
            if now >= self._next_watermark:
                self._next_watermark = max(self._next_watermark + self.config.watermark_interval, now)
                ts = self.watermarks.compute()
                if ts is not None:
                    self._activate(self.manager.watermark(ts))

    def _activate(self, windows: list[Window[Tuple]]) -> None:
        """Execute the windows that fired, then ack what left the windows. Acking after, not
        before: when a late timer fires several windows at once, a tuple of the first may have
        been evicted by the next, and the first window's emits are anchored to it; acked before
        them, its tree would complete before their outputs were processed (or never)."""
        rooted = self.rooted
        for window in windows:
            self.window = window
            # with the worker's collector emits are anchored to the window through its tree
            # (`emit_window`), without a list of its tuples
            self.anchors = window.get() if rooted is None else []
            try:
                self.bolt.execute(window)
            except Exception as exc:  # the bolt's bug: reported; its tuples still expire and ack
                self.collector.report_error(exc)
            finally:
                if rooted is not None:
                    rooted.close_window(window)
                self.anchors = []
                self.window = None
        evicted = self.manager.take_evicted()
        if evicted:
            if rooted is not None:
                stamps = self.manager.ts
                rooted.ack(evicted, stamps[0] if stamps else None, self.explicit)
            else:
                for tup in evicted:
                    self.collector.ack(tup)

    def cleanup(self) -> None:
        self.bolt.cleanup()
