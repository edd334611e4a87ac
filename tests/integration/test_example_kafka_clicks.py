"""examples/kafka-clicks on the session's real Kafka broker, real workers and real ZooKeeper: live
clicks produced into the input topic are enriched, counted per section in tumbling event-time
windows (the record timestamp) and written to the output topic; every closed window's count, plus
the clicks that went to the late topic, equals a recount of the input topic in one pass."""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from typing import Any

import pytest

from squall.kafka.broker import EmbeddedKafka
from squall_operator.local import LocalCluster
from helpers import import_example, logs_tail, stop_topology, wait_for
from kafka_clicks_example import EXAMPLE, LAG_S, WINDOW_S, start_clicks
from kafka_fixtures import read_to_end

pytestmark = pytest.mark.integration

def test_window_counts_equal_a_recount_of_the_input_topic(
        kafka_broker: EmbeddedKafka, make_cluster: Callable[..., LocalCluster]) -> None:
    run = start_clicks(kafka_broker, make_cluster)
    cluster, topo, topics, produce, clicks_mod = run.cluster, run.topo, run.topics, run.produce, run.clicks

    sent = produce.produce(kafka_broker.bootstrap_servers, topics["clicks"], rate=150, seconds=14, seed=26)
    # the recount, from the input topic itself
    clicks = [json.loads(m.value()) for m in read_to_end(kafka_broker, topics["clicks"])]
    assert len(clicks) == len(sent)
    sections = clicks_mod.load_sections()
    expected = produce.recount(clicks, WINDOW_S, sections)
    last_ts = max(c["ts"] for c in clicks)
    # closed: the watermark (the largest timestamp seen less the lag) has passed them, with a
    # second to spare for the watermark's period
    closed = {end for _, end in expected if end <= last_ts - LAG_S - 1}
    assert len(closed) >= 2, f"the run closed too few windows: {sorted(closed)}"
    want = {k: n for k, n in expected.items() if k[1] in closed}

    def outputs() -> dict[tuple[str, float], list[dict[str, Any]]]:
        got: dict[tuple[str, float], list[dict[str, Any]]] = collections.defaultdict(list)
        for m in read_to_end(kafka_broker, topics["click-counts"]):
            v = json.loads(m.value())
            assert m.key().decode() == v["section"]
            got[(v["section"], v["window_end"])].append(v)
        return got

    def late() -> collections.Counter[tuple[str, float]]:
        out: collections.Counter[tuple[str, float]] = collections.Counter()
        for m in read_to_end(kafka_broker, topics["clicks-late"]):
            section, _user, _page, ts = json.loads(m.value())
            out[(section, clicks_mod.window_of(ts, WINDOW_S)[1])] += 1
        return out

    def counted() -> dict[tuple[str, float], int]:
        """(section, window end) -> clicks counted in the output plus those reported late."""
        total: collections.Counter[tuple[str, float]] = late()
        for key, records in outputs().items():
            total[key] += records[0]["clicks"]
        return {k: n for k, n in total.items() if k[1] in closed}

    wait_for(lambda: counted() == want, 60, f"the counts of the {len(closed)} closed windows", cluster, 0.5)
    got, late_clicks = outputs(), late()
    for (section, end), records in got.items():
        # at least once: a record written twice is the same record
        assert all(r == records[0] for r in records), records
        assert records[0]["window_start"] == end - WINDOW_S, records[0]
    # a window with no late clicks has its distinct users right too
    for key in want:
        if key in got and not late_clicks.get(key):
            users = {c["user"] for c in clicks if (clicks_mod.section_of(sections, c["page"]),
                                                   clicks_mod.window_of(c["ts"], WINDOW_S)[1]) == key}
            assert got[key][0]["users"] == len(users), (key, got[key][0])
    # every closed window was counted by the window bolt (late clicks are counted above, in
    # clicks-late: how many come behind the lag depends on the machine's load, not on the code)
    assert closed <= {end for _, end in got}, (sorted(closed), sorted(got), logs_tail(cluster))
    assert "other" in {s for s, _ in want}, "no click on a page sections.csv does not know"
    print(f"{len(clicks)} clicks, {len(want)} (section, window) counts over {len(closed)} closed windows, "
          f"{sum(late_clicks.values())} late")
    stop_topology(cluster, topo.name)


def test_the_rules_the_recount_shares_with_the_topology() -> None:
    """The page table and the windows, with plain values (the recount above uses them too)."""
    (clicks_mod,) = import_example(EXAMPLE, "kafka_clicks")
    sections = clicks_mod.load_sections()
    assert clicks_mod.section_of(sections, "/news/world") == "news"
    assert clicks_mod.section_of(sections, "/") == "front"
    assert clicks_mod.section_of(sections, "/promo/black-friday") == "other"
    assert clicks_mod.section_of(sections, None) == "other"
    # (start, end], ends aligned to the epoch as Squall's (and Storm's) event-time windows
    assert clicks_mod.window_of(12.0, 4) == (8.0, 12.0)
    assert clicks_mod.window_of(12.001, 4) == (12.0, 16.0)
    assert clicks_mod.window_of(1764250061.5, 10) == (1764250060.0, 1764250070.0)
