"""squall.acker: the XOR acker ledger, its batch path, the spout's pending book, rotation."""

from __future__ import annotations

import itertools
import random

import pytest

from squall import wire
from squall.acker import ID_BATCH, AckerLedger, Ids, PendingTuples, RotatingMap, Rotator, fresh_ids

pytestmark = pytest.mark.unit

ROOT = 0x1234_5678_9ABC_DEF
SPOUT = 7


# --------------------------------------------------------------------------------------------
# helpers: the one-by-one path, written as completions like `apply` produces
# --------------------------------------------------------------------------------------------


def one_by_one(ledger: AckerLedger, items: list[list[int]]) -> list[list[int]]:
    done: list[list[int]] = []
    for kind, _task, root, val, extra in items:
        if kind == wire.INIT:
            r = ledger.init(root, val, extra)
            if r is not None:
                done.append([wire.DONE, extra, root, 1 if r else 0, 0])
        elif kind == wire.ACK:
            res = ledger.ack(root, val)
            if res is not None:
                done.append([wire.DONE, res[0], root, 1 if res[1] else 0, 0])
        else:
            res = ledger.fail(root)
            if res is not None:
                done.append([wire.DONE, res[0], root, 1 if res[1] else 0, 0])
    return done


def snapshot(ledger: AckerLedger) -> dict[int, list[int]]:
    return {k: list(v) for k, v in ledger.pending.items()}


# --------------------------------------------------------------------------------------------
# XOR trees
# --------------------------------------------------------------------------------------------


def test_single_edge_tree_completes_on_ack() -> None:
    led = AckerLedger(30, now=0.0)
    assert led.init(ROOT, 0xABC, SPOUT) is None
    assert len(led) == 1
    assert led.ack(ROOT, 0xABC) == (SPOUT, True)
    assert len(led) == 0
    assert ROOT not in led.pending


def test_ack_before_init_completes_on_init() -> None:
    led = AckerLedger(30, now=0.0)
    # the ack overtook the init: the acker does not know the spout yet
    assert led.ack(ROOT, 0xABC) is None
    assert len(led) == 1
    assert led.init(ROOT, 0xABC, SPOUT) is True
    assert len(led) == 0


def test_init_with_no_edges_is_complete_at_once() -> None:
    led = AckerLedger(30, now=0.0)
    assert led.init(ROOT, 0, SPOUT) is True
    assert len(led) == 0
    done: list[list[int]] = []
    led.apply([[wire.INIT, 1, ROOT, 0, SPOUT]], done)
    assert done == [[wire.DONE, SPOUT, ROOT, 1, 0]]
    assert len(led) == 0


def _multi_edge_messages() -> tuple[list[list[int]], int]:
    """The spout emits to 3 tasks (edges e1 e2 e3); the bolt holding e1 emits two children
    anchored to it (c1 c2) and acks e1; every other tuple is acked as a leaf."""
    e1, e2, e3, c1, c2 = 0x1111, 0x2222_0000, 0x4444_0000_0000, 0x0808_0808, 0x7070_0000_0001
    msgs = [
        [wire.INIT, 1, ROOT, e1 ^ e2 ^ e3, SPOUT],
        [wire.ACK, 1, ROOT, e1 ^ c1 ^ c2, 0],
        [wire.ACK, 1, ROOT, e2, 0],
        [wire.ACK, 1, ROOT, e3, 0],
        [wire.ACK, 1, ROOT, c1, 0],
        [wire.ACK, 1, ROOT, c2, 0],
    ]
    return msgs, len(msgs)


def test_multi_edge_tree_completes_only_after_last_message_in_every_order() -> None:
    msgs, n = _multi_edge_messages()
    orders = 0
    for order in itertools.permutations(range(n)):
        led = AckerLedger(30, now=0.0)
        for step, i in enumerate(order):
            done = one_by_one(led, [msgs[i]])
            if step < n - 1:
                assert done == [], f"completed early at step {step} of order {order}"
                assert len(led) == 1
            else:
                assert done == [[wire.DONE, SPOUT, ROOT, 1, 0]], order
                assert len(led) == 0
        orders += 1
    assert orders == 720


def test_multi_edge_tree_batch_in_every_order() -> None:
    msgs, n = _multi_edge_messages()
    for order in itertools.permutations(range(n)):
        led = AckerLedger(30, now=0.0)
        done: list[list[int]] = []
        for step, i in enumerate(order):
            led.apply([msgs[i]], done)
            assert len(done) == (1 if step == n - 1 else 0), order
        assert done == [[wire.DONE, SPOUT, ROOT, 1, 0]]
        assert len(led) == 0


def test_missing_ack_keeps_tree_pending() -> None:
    msgs, _ = _multi_edge_messages()
    led = AckerLedger(30, now=0.0)
    assert one_by_one(led, msgs[:-1]) == []
    assert len(led) == 1
    assert ROOT in led.pending


def test_fail_reports_spout_task() -> None:
    led = AckerLedger(30, now=0.0)
    led.init(ROOT, 0x55, SPOUT)
    assert led.fail(ROOT) == (SPOUT, False)
    assert len(led) == 0


def test_fail_before_init_reports_on_init() -> None:
    led = AckerLedger(30, now=0.0)
    assert led.fail(ROOT) is None
    assert len(led) == 1
    assert led.init(ROOT, 0x55, SPOUT) is False
    assert len(led) == 0


def test_fail_wins_over_a_zero_xor() -> None:
    # the xor returns to 0, but one bolt failed a tuple: the tree failed
    led = AckerLedger(30, now=0.0)
    assert led.ack(ROOT, 0x55) is None
    assert led.fail(ROOT) is None
    assert led.init(ROOT, 0x55, SPOUT) is False
    done: list[list[int]] = []
    led2 = AckerLedger(30, now=0.0)
    led2.apply(
        [[wire.ACK, 1, ROOT, 0x55, 0], [wire.FAIL, 1, ROOT, 0, 0], [wire.INIT, 1, ROOT, 0x55, SPOUT]],
        done,
    )
    assert done == [[wire.DONE, SPOUT, ROOT, 0, 0]]


def test_fail_in_batch_before_and_after_init() -> None:
    for msgs in (
        [[wire.INIT, 1, ROOT, 0x55, SPOUT], [wire.FAIL, 1, ROOT, 0, 0]],
        [[wire.FAIL, 1, ROOT, 0, 0], [wire.INIT, 1, ROOT, 0x55, SPOUT]],
    ):
        led = AckerLedger(30, now=0.0)
        done: list[list[int]] = []
        led.apply(msgs, done)
        assert done == [[wire.DONE, SPOUT, ROOT, 0, 0]]
        assert len(led) == 0


def test_independent_roots_do_not_interfere() -> None:
    led = AckerLedger(30, now=0.0)
    led.init(1, 0xA, 3)
    led.init(2, 0xA, 4)
    assert led.ack(1, 0xA) == (3, True)
    assert len(led) == 1
    assert led.fail(2) == (4, False)
    assert len(led) == 0


# --------------------------------------------------------------------------------------------
# apply == init/ack/fail one by one
# --------------------------------------------------------------------------------------------


def _random_messages(rng: random.Random, n: int) -> list[list[int]]:
    """Random acker traffic on a few roots with a few values, so that xors often return to 0,
    acks overtake inits, fails arrive before and after inits, and roots are reused."""
    roots = [rng.getrandbits(62) for _ in range(rng.randint(1, 6))]
    vals = [0, *(rng.getrandbits(62) for _ in range(3))]
    out = []
    for _ in range(n):
        kind = rng.choices((wire.INIT, wire.ACK, wire.FAIL), weights=(3, 6, 1))[0]
        root = rng.choice(roots)
        if kind == wire.INIT:
            out.append([kind, 1, root, rng.choice(vals), rng.randint(1, 5)])
        elif kind == wire.ACK:
            out.append([kind, 1, root, rng.choice(vals), 0])
        else:
            out.append([kind, 1, root, 0, 0])
    return out


def _random_trees(rng: random.Random, trees: int) -> list[list[int]]:
    """Well-formed trees (init + acks whose xor cancels), shuffled together. In about one tree
    in five a bolt fails one tuple instead of acking it (and so emits no children from it)."""
    msgs: list[list[int]] = []
    for _ in range(trees):
        root = rng.getrandbits(62)
        spout = rng.randint(1, 9)
        first = [rng.getrandbits(62) for _ in range(rng.randint(0, 4))]
        init_xor = 0
        for e in first:
            init_xor ^= e
        msgs.append([wire.INIT, 1, root, init_xor, spout])
        frontier = list(first)
        fail_at = rng.randint(0, 6) if rng.random() < 0.25 else -1
        handled = 0
        while frontier:
            edge = frontier.pop()
            if handled == fail_at:
                msgs.append([wire.FAIL, 1, root, 0, 0])
                handled += 1
                continue
            handled += 1
            kids = [rng.getrandbits(62) for _ in range(rng.choice((0, 0, 1, 2)))]
            val = edge
            for k in kids:
                val ^= k
            frontier.extend(kids)
            msgs.append([wire.ACK, 1, root, val, 0])
    rng.shuffle(msgs)
    return msgs


@pytest.mark.parametrize("seed", range(60))
def test_apply_equals_one_by_one_on_random_traffic(seed: int) -> None:
    rng = random.Random(seed)
    msgs = _random_messages(rng, rng.randint(1, 80)) if seed % 2 else _random_trees(rng, 12)
    a = AckerLedger(30, now=0.0)
    b = AckerLedger(30, now=0.0)
    expected = one_by_one(a, msgs)
    # the batch path, cut into random batches
    got: list[list[int]] = []
    i = 0
    while i < len(msgs):
        j = i + rng.randint(1, 10)
        b.apply(msgs[i:j], got)
        i = j
    assert got == expected
    assert snapshot(b) == snapshot(a)
    assert len(b) == len(a) == sum(1 for _ in a.pending.items())


@pytest.mark.parametrize("seed", range(20))
def test_random_trees_each_complete_or_fail_exactly_once(seed: int) -> None:
    rng = random.Random(1000 + seed)
    msgs = _random_trees(rng, 20)
    led = AckerLedger(30, now=0.0)
    done: list[list[int]] = []
    led.apply(msgs, done)
    roots = {m[2] for m in msgs if m[0] == wire.INIT}
    failed = {m[2] for m in msgs if m[0] == wire.FAIL}
    assert sorted(d[2] for d in done) == sorted(roots)
    for kind, spout, root, ok, _ in done:
        assert kind == wire.DONE
        init = next(m for m in msgs if m[0] == wire.INIT and m[2] == root)
        assert spout == init[4]
        assert ok == (0 if root in failed else 1)
    # acks that arrive after a failure was reported leave orphans (forgotten by rotation), never
    # an entry of a completed tree, and never one that could report again
    for root, (_xor, spout, _failed) in led.pending.items():
        assert root in failed and spout == -1


# --------------------------------------------------------------------------------------------
# rotation and timeouts
# --------------------------------------------------------------------------------------------


def test_rotator_counts_due_rotations() -> None:
    r = Rotator(30, 3, now=100.0)
    assert r.period == 15
    assert r.due(100.0) == 0
    assert r.due(114.999) == 0
    assert r.due(115.0) == 1
    assert r.due(115.0) == 0
    assert r.due(160.0) == 3  # 130, 145, 160
    assert r.due(161.0) == 0


@pytest.mark.parametrize("buckets", [2, 3, 4, 7])
@pytest.mark.parametrize("t", [0.0, 0.001, 7.5, 14.999, 15.0, 29.0, 100.3])
def test_acker_entry_lives_between_timeout_and_upper_bound(buckets: int, t: float) -> None:
    timeout = 30.0
    upper = timeout * (1 + 1 / (buckets - 1))
    led = AckerLedger(timeout, now=0.0, buckets=buckets)
    led.expire(t)  # the worker expires before it handles the message
    led.init(ROOT, 0x99, SPOUT)
    # drive the clock in small steps up to just before the timeout: never dropped
    now = t
    while now < t + timeout - 1e-6:
        assert led.expire(now) == 0
        assert ROOT in led.pending
        now += 0.5
    assert led.expire(t + timeout - 1e-6) == 0
    assert ROOT in led.pending
    # gone by timeout * (1 + 1/(buckets-1)) at the latest
    dropped = led.expire(t + upper)
    assert ROOT not in led.pending
    assert dropped == 1
    assert len(led) == 0
    # an ack arriving after the timeout starts an orphan entry, never a completion
    assert led.ack(ROOT, 0x99) is None


def test_acker_expire_counts_dropped_entries() -> None:
    led = AckerLedger(10, now=0.0, buckets=3)  # period 5
    led.init(1, 0x1, 1)
    led.ack(2, 0x2)  # orphan ack: also forgotten
    led.expire(5.0)
    led.init(3, 0x3, 1)
    assert led.expire(14.9) == 0
    assert led.expire(15.0) == 2
    assert len(led) == 1
    assert led.expire(20.0) == 1
    assert len(led) == 0


def test_expire_with_a_large_clock_jump_drops_everything_once() -> None:
    led = AckerLedger(30, now=0.0)
    for r in range(10):
        led.init(r + 1, 0x5, 1)
    assert led.expire(10_000.0) == 10
    assert len(led) == 0
    assert led.expire(10_000.0) == 0


# --------------------------------------------------------------------------------------------
# RotatingMap
# --------------------------------------------------------------------------------------------


def test_rotating_map_needs_two_buckets() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        RotatingMap(1)


def test_rotating_map_basic() -> None:
    m: RotatingMap[str] = RotatingMap(3)
    m.put(1, "a")
    m.put(2, "b")
    assert len(m) == 2 and 1 in m and m.get(1) == "a"
    assert m.rotate() == {}
    m.put(3, "c")
    assert m.get(1) == "a" and m.get(3) == "c"
    assert m.rotate() == {}
    assert m.rotate() == {1: "a", 2: "b"}
    assert len(m) == 1 and 1 not in m and m.get(1) is None
    assert m.pop(3) == "c"
    assert m.pop(3) is None
    assert len(m) == 0
    assert list(m.items()) == []


@pytest.mark.parametrize("seed", range(10))
def test_rotating_map_size_counter_matches_contents(seed: int) -> None:
    rng = random.Random(seed)
    m: RotatingMap[int] = RotatingMap(rng.randint(2, 5))
    model: dict[int, int] = {}
    ages: dict[int, int] = {}
    next_key = 1
    for _ in range(2000):
        op = rng.random()
        if op < 0.45:
            m.put(next_key, next_key * 10)
            model[next_key] = next_key * 10
            ages[next_key] = 0
            next_key += 1
        elif op < 0.8:
            key = rng.randint(1, next_key)
            assert m.pop(key) == model.pop(key, None)
            ages.pop(key, None)
        elif op < 0.9:
            key = rng.randint(1, next_key)
            assert m.get(key) == model.get(key)
            assert (key in m) == (key in model)
        else:
            dead = m.rotate()
            for k in list(ages):
                ages[k] += 1
            expect = {k: model[k] for k, a in ages.items() if a >= len(m._buckets)}
            assert dead == expect
            for k in expect:
                del model[k]
                del ages[k]
        assert len(m) == len(model) == sum(1 for _ in m.items())
        assert dict(m.items()) == model


# --------------------------------------------------------------------------------------------
# PendingTuples (the spout's book)
# --------------------------------------------------------------------------------------------


def test_pending_complete_returns_msg_id_and_emit_time() -> None:
    p = PendingTuples(30, now=0.0)
    p.add(ROOT, "m1", now=1.5)
    assert len(p) == 1
    assert p.complete(ROOT) == ("m1", 1.5)
    assert len(p) == 0
    assert p.complete(ROOT) is None


def test_pending_expire_returns_each_timed_out_id_exactly_once() -> None:
    p = PendingTuples(30, now=0.0, buckets=3)  # rotations every 15 s
    p.add(1, "a", now=0.0)
    p.add(2, "b", now=1.0)
    p.add(3, "c", now=2.0)
    assert p.complete(2) == ("b", 1.0)
    assert p.expire(14.0) == []
    assert p.expire(16.0) == []  # the first rotation (at 15) moves a and c to an older bucket
    p.add(4, "d", now=16.0)
    assert len(p) == 3
    assert p.expire(29.9) == []
    assert sorted(p.expire(45.0)) == ["a", "c"]
    assert p.expire(45.0) == []
    assert p.complete(1) is None  # already failed by timeout: not acked too
    assert len(p) == 1
    assert p.expire(60.0) == ["d"]
    assert p.expire(1000.0) == []
    assert len(p) == 0


def test_pending_expire_respects_the_timeout_window() -> None:
    timeout, buckets = 30.0, 3
    upper = timeout * (1 + 1 / (buckets - 1))
    for t in (0.0, 3.0, 14.99, 15.0, 22.2):
        p = PendingTuples(timeout, now=0.0, buckets=buckets)
        assert p.expire(t) == []
        p.add(9, "x", now=t)
        assert p.expire(t + timeout - 1e-6) == []
        assert p.expire(t + upper) == ["x"]


@pytest.mark.parametrize("seed", range(10))
def test_pending_len_and_expire_against_a_model(seed: int) -> None:
    rng = random.Random(seed)
    timeout = 10.0
    p = PendingTuples(timeout, now=0.0, buckets=3)
    now = 0.0
    live: dict[int, str] = {}
    seen_out: list[str] = []
    next_root = 1
    for _ in range(500):
        now += rng.uniform(0, 2)
        expired = p.expire(now)
        for mid in expired:
            root = int(mid[1:])
            assert live.pop(root) == mid
        seen_out.extend(expired)
        op = rng.random()
        if op < 0.6:
            p.add(next_root, f"m{next_root}", now)
            live[next_root] = f"m{next_root}"
            next_root += 1
        elif live:
            root = rng.choice(list(live)) if rng.random() < 0.9 else next_root + 5
            got = p.complete(root)
            if root in live:
                assert got is not None and got[0] == live.pop(root)
                seen_out.append(got[0])
            else:
                assert got is None
        assert len(p) == len(live)
    # nothing came out twice, whether by completion or by timeout
    assert len(seen_out) == len(set(seen_out))
    drained = p.drain()
    assert sorted(drained) == sorted(live.values())
    assert len(p) == 0
    assert set(seen_out).isdisjoint(drained)


def test_pending_drain_returns_every_id_from_every_bucket() -> None:
    p = PendingTuples(30, now=0.0, buckets=4)
    ids = []
    for i in range(12):
        p.expire(i * 3.0)
        p.add(i + 1, ("msg", i), now=i * 3.0)
        ids.append(("msg", i))
    assert len(p) == 12
    assert sorted(p.drain()) == sorted(ids)
    assert len(p) == 0
    assert p.drain() == []
    assert p.expire(1e6) == []


def test_init_new_registers_trees_that_then_complete_by_acks() -> None:
    ledger = AckerLedger(timeout_secs=30, now=0.0)
    done: list[list[int]] = []
    ledger.init_new([(11, 0b1010, 5), (12, 0, 6)], done)
    # a tree with no edges completes at once; the other waits for its acks
    assert done == [[3, 6, 12, 1, 0]]
    assert len(ledger) == 1
    done.clear()
    ledger.apply([[1, 1, 11, 0b1000, 0]], done)
    assert done == [] and len(ledger) == 1
    ledger.apply([[1, 1, 11, 0b0010, 0]], done)
    assert done == [[3, 5, 11, 1, 0]]
    assert len(ledger) == 0


def test_init_new_then_fail_reports_the_spout() -> None:
    ledger = AckerLedger(timeout_secs=30, now=0.0)
    done: list[list[int]] = []
    ledger.init_new([(21, 7, 9)], done)
    ledger.apply([[2, 1, 21, 0, 0]], done)
    assert done == [[3, 9, 21, 0, 0]]
    assert len(ledger) == 0


# --------------------------------------------------------------------------------------------
# root and edge ids: made in batches (`Ids`), uniform 62-bit like `random.getrandbits(62)`
# --------------------------------------------------------------------------------------------


def test_fresh_ids_are_62_bit_ints_with_every_bit_random() -> None:
    ids = fresh_ids(random.Random(), 4096)
    assert len(ids) == 4096
    assert all(type(i) is int and 0 <= i < 1 << 62 for i in ids)
    # each of the 62 bits is set in some ids and clear in others (a stuck bit fails this with
    # probability 2**-4095); the top two bits of the 64 drawn are the ones cleared
    for bit in range(62):
        ones = sum(i >> bit & 1 for i in ids)
        assert 1500 < ones < 2600, (bit, ones)
    assert len(set(ids)) == len(ids)


def test_ids_do_not_follow_the_random_module_seed() -> None:
    # each `Ids` has a generator of its own, seeded from the OS: a component seeding the
    # `random` module (in every worker alike) does not make ids repeat
    state = random.getstate()
    try:
        random.seed(11)
        a = [Ids().take() for _ in range(8)]
        random.seed(11)
        b = [Ids().take() for _ in range(8)]
        assert not set(a) & set(b)
        assert len(set(a)) == 8
    finally:
        random.setstate(state)


def test_ids_hand_out_each_id_of_a_batch_once_then_refill() -> None:
    ids = Ids()
    first = [ids.take() for _ in range(ID_BATCH)]
    assert len(set(first)) == ID_BATCH
    assert all(type(i) is int and 0 <= i < 1 << 62 for i in first)
    more = [ids.take() for _ in range(ID_BATCH + 5)]
    assert not set(first) & set(more)
    assert len(set(more)) == len(more)
