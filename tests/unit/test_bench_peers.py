"""bench/peers.py's arithmetic: rates, percentiles and the pairings it states, on plain values."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from squall import stats
from loadfile import load_file

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_peers() -> ModuleType:
    return load_file(BENCH / "peers.py", "bench_peers")


peers = load_peers()


def hist_of(*ms: float) -> dict[int, int]:
    h: dict[int, int] = {}
    for v in ms:
        b = stats.bucket_of(v)
        h[b] = h.get(b, 0) + 1
    return h


def test_pairings_state_defaults_and_like_for_like() -> None:
    shapes = {c: (s, c) for c, s in [("storm-wc", "wordcount"), ("storm-wc-uniform", "wordcount"),
                                     ("squall-wc", "wordcount"), ("squall-wc-local", "wordcount"),
                                     ("squall-wc-uniform", "wordcount"),
                                     ("spark-wc", "wordcount"), ("bytewax-wc", "wordcount")]}
    results = {
        "storm-wc": {"words_per_sec": 400_000.0, "window_s": 10.0, "cpu_s": 20.0, "hist": hist_of(*[10.0] * 99, 35.0)},
        "storm-wc-uniform": {"words_per_sec": 200_000.0, "window_s": 10.0, "cpu_s": 20.0, "hist": hist_of(20.0)},
        "squall-wc": {"words_per_sec": 300_000.0, "window_s": 10.0, "cpu_s": 10.0, "hist": hist_of(22.0)},
        "squall-wc-uniform": {"words_per_sec": 100_000.0, "window_s": 10.0, "cpu_s": 10.0, "hist": hist_of(30.0)},
        "squall-wc-local": {"words_per_sec": 600_000.0, "window_s": 10.0, "cpu_s": 15.0, "hist": hist_of(12.0)},
        "spark-wc": {"words_per_sec": 150_000.0, "window_s": 10.0, "cpu_s": 20.0,
                     "batch_ms_p50": 160.0, "batch_ms_p99": 190.0},
        "bytewax-wc": {"words_per_sec": 1_200_000.0, "window_s": 10.0, "cpu_s": 10.0},
        "failed-peer": {"error": "RuntimeError: no result"},
    }
    pairs = peers.summarize(results, {**shapes, "failed-peer": ("wordcount", "x")})

    assert results["squall-wc"]["rate_per_cpu_s"] == pytest.approx(300_000.0)
    assert results["storm-wc"]["p99_ms"] == pytest.approx(stats.bucket_upper_ms(stats.bucket_of(10.0)))
    assert results["spark-wc"]["p99_ms"] == 190.0
    assert results["bytewax-wc"]["p99_ms"] is None
    assert "rate" not in results["failed-peer"]

    defaults = pairs["wordcount, defaults (both load-aware shuffle): Squall / Storm"]
    assert defaults["rate"] == pytest.approx(0.75)
    assert defaults["per_cpu_s"] == pytest.approx(1.5)
    uniform = pairs["wordcount, uniform (load-aware messaging off on both): Squall / Storm"]
    assert uniform["rate"] == pytest.approx(0.5)
    assert uniform["of"] == ["squall-wc-uniform", "storm-wc-uniform"]
    local = pairs["wordcount, like-for-like local: Squall localOrShuffle / Storm load-aware"]
    assert local["rate"] == pytest.approx(1.5)
    assert pairs["wordcount: Squall shuffle / Spark Structured Streaming"]["rate"] == pytest.approx(2.0)
    assert pairs["wordcount: Squall shuffle / Bytewax"]["rate"] == pytest.approx(0.25)
    # the noop pairing needs both noop cases: not stated from word count alone
    assert not any(k.startswith("noop") for k in pairs)


def test_scaled_wordcount_gives_every_worker_a_spout_a_split_and_a_count() -> None:
    topo = peers.squall_wordcount(700, "localOrShuffle", workers=4, scale=True)
    spec = topo.spec
    assert (spec.num_workers, spec.ackers, spec.max_spout_pending) == (4, 4, 700)
    by = {c.name: c for c in spec.components}
    assert [by[n].parallelism for n in ("sentences", "split", "count", "report")] == [4, 4, 4, 1]
    assert by["count"].tasks == 8
    assert by["split"].inputs[0].grouping.value == "localOrShuffle"
    assert "topology.disable.loadaware.messaging" not in spec.config


def test_uniform_wordcount_turns_load_aware_messaging_off() -> None:
    assert peers.squall_wordcount(1000, loadaware=False).spec.config["topology.disable.loadaware.messaging"] is True


def test_kept_local_is_the_share_of_the_target_run_beside_the_source() -> None:
    # the spout's worker split 300 sentences, the other worker 100: 3/4 stayed local
    work = {
        "a": {"sentences": 400, "split": 300, "count": 1500},
        "b": {"split": 100, "count": 1300, "report": 4},
    }
    assert peers.kept_local(work, "sentences", "split") == 0.75
    assert peers.kept_local({"a": {"sentences": 5, "split": 0}, "b": {"split": 0}}, "sentences", "split") is None
    assert peers.kept_local({"a": {"sentences": 5}, "b": {"split": 7}}, "sentences", "split") == 0.0
