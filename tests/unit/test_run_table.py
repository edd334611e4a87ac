"""squall run's table: full component names in an 80-column terminal, and a final rate that is the
average over the run rather than the last refresh's (which is 0 once the topology is killed)."""

from __future__ import annotations

import pytest
from rich.console import Console

from squall_operator.run import ComponentSummary, _table, average_rates

pytestmark = pytest.mark.unit


def _render(summary: dict[str, ComponentSummary], rates: dict[str, float]) -> str:
    console = Console(width=80, record=True, force_terminal=False, color_system=None)
    console.print(_table("wordcount-with-a-long-name", "KILLED", 42.0, summary, rates))
    return console.export_text()


def test_long_component_names_are_not_cut_at_80_columns() -> None:
    summary = {
        "sentence-generator-from-kafka": ComponentSummary(kind="spout", executors=2, emitted=123_456, acked=120_000),
        "split-sentence-into-words": ComponentSummary(kind="bolt", executors=4, executed=120_000),
        "count-words-per-window": ComponentSummary(kind="bolt", executors=4, executed=987_654),
    }
    text = _render(summary, {"sentence-generator-from-kafka": 2_857.0})
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    # every figure is whole
    for figure in ("123,456", "120,000", "2,857", "p50 ms", "p99 ms"):
        assert figure in text, text
    rows = [line for line in lines if "(" not in line and line.rstrip().endswith(("0", "ms"))]
    assert all(line.split()[-1] in ("0.00", "ms") for line in rows), text
    # every name is whole, possibly folded over lines of the first column
    header = next(line for line in lines if "execs" in line)
    width = header.index("execs")
    body = "".join(line[:width].strip() for line in lines[lines.index(header) + 2:])
    for label in ("sentence-generator-from-kafka (spout)", "split-sentence-into-words (bolt)",
                  "count-words-per-window (bolt)"):
        assert label.replace(" ", "") in body.replace(" ", ""), text


def test_final_rates_are_averages_over_the_run() -> None:
    summary = {
        "spout": ComponentSummary(kind="spout", emitted=3_000, acked=2_000),
        "split": ComponentSummary(kind="bolt", executed=10_000),
    }
    assert average_rates(summary, 20.0) == {"spout": 100.0, "split": 500.0}
    assert average_rates(summary, 0.0) == {}
