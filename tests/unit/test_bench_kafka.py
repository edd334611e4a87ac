"""bench/kafka_peers.py's arithmetic and topologies, on plain values: rates and ratios to Storm,
CPU rates with and without the broker, a case that ran the topic dry, the Squall shapes."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from squall import stats
from loadfile import load_file

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_kafka_peers() -> ModuleType:
    return load_file(BENCH / "kafka_peers.py", "bench_kafka_peers")


kp = load_kafka_peers()


def hist_of(*ms: float) -> dict[int, int]:
    h: dict[int, int] = {}
    for v in ms:
        b = stats.bucket_of(v)
        h[b] = h.get(b, 0) + 1
    return h


def test_ratios_are_squall_over_storm_per_shape_with_and_without_the_broker() -> None:
    results = {
        "storm-noop": {"acked_per_sec": 100_000.0, "window_s": 10.0, "cpu_s": 20.0, "broker_cpu_s": 5.0,
                       "acked_total": 2_000_000, "hist": hist_of(*[2.0] * 90, *[40.0] * 10)},
        "squall-noop": {"acked_per_sec": 150_000.0, "window_s": 10.0, "cpu_s": 10.0, "broker_cpu_s": 5.0,
                        "acked_total": 3_000_000, "hist": hist_of(*[3.0] * 99, 20.0)},
        "storm-wordcount": {"error": "RuntimeError: no result"},
        "squall-wordcount": {"acked_per_sec": 20_000.0, "words_per_sec": 130_000.0, "window_s": 10.0,
                             "cpu_s": 10.0, "acked_total": 400_000, "hist": hist_of(25.0)},
    }
    pairs = kp.summarize(results, records=5_000_000)

    noop = pairs["noop"]
    assert noop["of"] == ["squall-noop", "storm-noop"]
    assert noop["rate"] == pytest.approx(1.5)
    # Storm 100k/s over 20 CPU-s per 10 s = 50,000 per CPU-s; Squall 150,000
    assert results["storm-noop"]["rate_per_cpu_s"] == pytest.approx(50_000.0)
    assert noop["per_cpu_s"] == pytest.approx(3.0)
    # with the broker's 5 CPU-s: 1M / 25 = 40,000 and 1.5M / 15 = 100,000
    assert noop["per_cpu_s_with_broker"] == pytest.approx(2.5)
    assert noop["p99_ms"][0] == pytest.approx(stats.percentile(hist_of(*[3.0] * 99, 20.0), 0.99))
    assert noop["p99_ms"][1] > noop["p99_ms"][0]
    # a failed Storm case: no pairing for its shape, and the Squall case is still summarized
    assert "wordcount" not in pairs
    assert results["squall-wordcount"]["rate"] == 20_000.0
    assert results["squall-wordcount"]["rate_per_cpu_s_with_broker"] is None  # no broker CPU read


def test_a_case_that_acked_the_whole_topic_ran_dry() -> None:
    assert kp.ran_dry({"acked_total": 5_000_000}, 5_000_000)
    assert not kp.ran_dry({"acked_total": 4_999_999}, 5_000_000)
    assert not kp.ran_dry({}, 1)
    results = {"squall-noop": {"acked_per_sec": 1.0, "window_s": 1.0, "cpu_s": 1.0, "acked_total": 10, "hist": {}}}
    kp.summarize(results, records=10)
    assert results["squall-noop"]["ran_dry"] is True


@pytest.mark.parametrize("shape", ["noop", "wordcount"])
def test_squall_shapes_read_the_topic_from_its_start_with_acking_on(shape: str) -> None:
    topo = kp.squall_topology(shape, "127.0.0.1:9092", "sentences", "g-1", pending=700, spouts=2)
    spec = topo.spec
    assert (spec.num_workers, spec.num_ackers, spec.max_spout_pending) == (2, 2, 700)
    assert spec.message_timeout_secs == kp.TIMEOUT_S
    (spout,) = spec.spouts
    assert spout.class_name == "squall.kafka:KafkaSpout" and spout.parallelism == 2
    cfg = spout.config["kafka.spout"]
    assert cfg["firstPollOffsetStrategy"] == "EARLIEST"
    assert cfg["processingGuarantee"] == "AT_LEAST_ONCE"
    assert (cfg["topics"], cfg["groupId"]) == (["sentences"], "g-1")
    bolts = {b.name: b for b in spec.bolts}
    if shape == "noop":
        assert set(bolts) == {"sink"}
    else:
        assert set(bolts) == {"split", "count", "report"}
        assert (bolts["count"].parallelism, bolts["count"].num_tasks) == (2, 4)
    assert "offsetCommitPeriodMs" not in cfg  # the spout's own default unless told
    told = kp.squall_topology(shape, "127.0.0.1:9092", "sentences", "g-1", pending=700, commit_ms=1000)
    assert told.spec.spouts[0].config["kafka.spout"]["offsetCommitPeriodMs"] == 1000
    with pytest.raises(ValueError, match="shape"):
        kp.squall_topology("nope", "127.0.0.1:9092", "t", "g", 1)


def test_consumer_props_parse_and_reach_the_spout() -> None:
    kp = load_kafka_peers()
    assert kp.consumer_props(None) == {}
    props = kp.consumer_props("fetch.queue.backoff.ms=1000, queued.min.messages = 5000,")
    assert props == {"fetch.queue.backoff.ms": "1000", "queued.min.messages": "5000"}
    with pytest.raises(ValueError, match="'nokey' is not K=V"):
        kp.consumer_props("nokey")
    topo = kp.squall_topology("noop", "k:9092", "t", "g", 1000, 2, 1000, props=props, workers=2)
    spout = topo.spec.spouts[0]
    assert spout.config["kafka.spout"]["props"] == props
    assert spout.parallelism == 2 and topo.spec.num_workers == 2
