"""Click events from Kafka, enriched and counted per site section in event-time windows, back to
Kafka. The components of topology.yaml:

    clicks (squall.kafka:KafkaSpout, topic `clicks`, JSON values, the record timestamp)
      -> enrich (Enrich: page -> section from sections.csv)
      -> count (CountBySection: a tumbling event-time window, one record per section and window)
      -> counts (squall.kafka:KafkaBolt, topic `click-counts`)
    count's late stream -> late (squall.kafka:KafkaBolt, topic `clicks-late`)

A click is a JSON object {"user", "page", "ts"}; its event time is the Kafka record's timestamp
(the producer, produce.py, sets it to `ts`). `window_of` and `section_of` are the rules the
topology applies, so that a recount of the input topic (the tests, `produce.py --recount`) gives
the same numbers.
"""

from __future__ import annotations

import collections
import csv
import math
from pathlib import Path
from typing import Any

from squall import BasicBolt, Tuple, WindowedBolt

SECTIONS_CSV = Path(__file__).resolve().parent / "sections.csv"
UNKNOWN_SECTION = "other"


def load_sections(path: Path = SECTIONS_CSV) -> dict[str, str]:
    """The page -> section table (a CSV with the columns page, section)."""
    with path.open(newline="") as f:
        return {row["page"]: row["section"] for row in csv.DictReader(f)}


def section_of(sections: dict[str, str], page: Any) -> str:
    """A page's section; a page the table does not know is in `other`."""
    return sections.get(str(page), UNKNOWN_SECTION)


def window_of(ts: float, length_s: float) -> tuple[float, float]:
    """The tumbling window (start, end] of `length_s` seconds that holds event time `ts`: ends are
    multiples of the length (Squall's windows, as Storm's, are aligned to the epoch)."""
    end = math.ceil(ts / length_s) * length_s
    return end - length_s, end


def late_record(tup: Tuple) -> tuple[None, Any]:
    """The late topic's record of a late-stream tuple (fields tuple, reason): no key, the click's
    enriched values [section, user, page, ts] as the value (the KafkaBolt's `mapper`)."""
    return None, tup.get("tuple")


class Enrich(BasicBolt):
    """(key, value, timestamp) of a click record -> (section, user, page, ts). A value that is not
    a click (no page) is counted in `other` with the page None."""

    outputs = ["section", "user", "page", "ts"]

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.sections = load_sections(Path(conf.get("clicks.sections", SECTIONS_CSV)))

    def process(self, tup: Tuple) -> None:
        click = tup.get("value")
        if not isinstance(click, dict):
            click = {}
        page = click.get("page")
        self.collector.emit([section_of(self.sections, page), click.get("user", tup.get("key")), page,
                             tup.get("timestamp")])


class CountBySection(WindowedBolt):
    """Per window: one (section, counts) per section seen, counts being
    {"section", "window_start", "window_end", "clicks", "users"} (users: distinct users)."""

    outputs = ["section", "counts"]

    def execute(self, window: Any) -> None:
        clicks: collections.Counter[str] = collections.Counter()
        users: dict[str, set[Any]] = collections.defaultdict(set)
        for t in window.get():
            section = t.get("section")
            clicks[section] += 1
            users[section].add(t.get("user"))
        start, end = window.get_start_timestamp(), window.get_end_timestamp()
        for section, n in sorted(clicks.items()):
            self.collector.emit([section, {"section": section, "window_start": start, "window_end": end,
                                           "clicks": n, "users": len(users[section])}])
