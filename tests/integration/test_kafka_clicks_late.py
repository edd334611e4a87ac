"""examples/kafka-clicks' late path with data, on the session's real Kafka broker, real workers and
real ZooKeeper: once live clicks have moved the watermark on, clicks stamped a minute in the past
are sent; each of them comes out on the late topic as the example's `late_record` writes it
([section, user, page, ts]), none of them is counted in a window of the counts topic, and the
spout's commits move past them (their tuple trees, through the late KafkaBolt's delivery report,
completed)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from squall.kafka.broker import EmbeddedKafka
from squall_operator.local import LocalCluster
from helpers import stop_topology, wait_for
from kafka_clicks_example import LAG_S, WINDOW_S, start_clicks
from kafka_fixtures import committed, read_to_end

pytestmark = pytest.mark.integration

LATE_BY_S = 60  # far behind any watermark the live clicks make
N_LATE = 24


def send_clicks(broker: EmbeddedKafka, topic: str, clicks: list[dict[str, Any]]) -> dict[int, int]:
    """The clicks as produce.py sends them (keyed by user, the record timestamp set to `ts`); the
    last offset they were written at, per partition."""
    from confluent_kafka import Producer

    last: dict[int, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())

    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True, "linger.ms": 5})
    for c in clicks:
        p.produce(topic, key=c["user"].encode(), value=json.dumps(c).encode(), timestamp=int(c["ts"] * 1000),
                  on_delivery=delivered)
    assert p.flush(30) == 0, "late clicks not delivered"
    return last


def test_clicks_behind_the_watermark_go_to_the_late_topic(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    run = start_clicks(kafka_broker, make_cluster)
    cluster, topo, topics, produce, clicks_mod = run.cluster, run.topo, run.topics, run.produce, run.clicks
    sections = clicks_mod.load_sections()

    # live clicks until a window has closed: the watermark is past them
    live = produce.produce(kafka_broker.bootstrap_servers, topics["clicks"], rate=100, seconds=WINDOW_S + LAG_S + 2,
                           seed=7)
    wait_for(lambda: read_to_end(kafka_broker, topics["click-counts"]), 60, "a first closed window", cluster, 0.5)

    # a minute in the past: known pages, a page sections.csv does not know, and no page at all
    base_ms = int((time.time() - LATE_BY_S) * 1000)
    pages = sorted(sections) + ["/promo/black-friday", None]
    assert N_LATE >= len(pages)
    late_clicks = [{"user": f"late-{i}", "page": pages[i % len(pages)], "ts": (base_ms + i * 10) / 1000}
                   for i in range(N_LATE)]
    late_at = send_clicks(kafka_broker, topics["clicks"], late_clicks)
    # and live clicks after them, long enough for the watermark to close the windows of the live
    # clicks sent before them (a window's tuples are acked when it is evaluated)
    more = produce.produce(kafka_broker.bootstrap_servers, topics["clicks"], rate=100,
                           seconds=WINDOW_S + LAG_S + 2, seed=8)

    want = {(clicks_mod.section_of(sections, c["page"]), c["user"], c["page"], c["ts"]) for c in late_clicks}

    def late_out() -> list[tuple[Any, ...]]:
        out = []
        for m in read_to_end(kafka_broker, topics["clicks-late"]):
            assert m.key() is None, "late records have no key (late_record)"
            section, user, page, ts = json.loads(m.value())
            out.append((section, user, page, ts))
        return out

    wait_for(lambda: want <= set(late_out()), 60, f"the {N_LATE} late clicks on {topics['clicks-late']}",
             cluster, 0.5)
    got_late = late_out()
    # only late clicks there: ours, and live ones only if the machine held them back past the lag
    live_users = {c["user"] for c in live + more}
    assert {r for r in got_late if r[1].startswith("late-")} == want
    assert all(r[1] in live_users for r in got_late if not r[1].startswith("late-")), got_late
    # every section of the table, `other` and a click without a page were among them
    assert {"other"} | {sections[p] for p in sections} <= {r[0] for r in got_late}

    # no window of the counts topic counted them: their windows ended a minute ago
    late_windows = {clicks_mod.window_of(c["ts"], WINDOW_S)[1] for c in late_clicks}
    counts = [json.loads(m.value()) for m in read_to_end(kafka_broker, topics["click-counts"])]
    assert counts, "no window was written"
    assert not late_windows & {c["window_end"] for c in counts}, (sorted(late_windows), counts[:5])
    assert min(c["window_end"] for c in counts) > max(late_windows)

    # the late clicks' tuple trees completed (acked by the late KafkaBolt once the broker had the
    # record): the spout's group commits past each of them (the last windows, still open since
    # event time stopped with the clicks, hold the newest live clicks back)
    group = f"squall-{topo.name}-clicks"

    def past_the_late_clicks() -> bool:
        done = committed(kafka_broker, group, topics["clicks"])
        return all(done.get(p, -1) > offset for p, offset in late_at.items())

    wait_for(past_the_late_clicks, 60, f"{group}'s commits past the late clicks at {late_at}", cluster, 0.5)
    print(f"{len(live) + len(more)} live clicks, {len(got_late)} on the late topic ({N_LATE} sent late), "
          f"{len(counts)} window records")
    stop_topology(cluster, topo.name)
