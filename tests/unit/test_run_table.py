"""squall run's table: full component names in an 80-column terminal, every column whole in a pipe
or a file and in a terminal too narrow for its figures, and a final rate that is the average over
the run rather than the last refresh's (which is 0 once the topology is killed)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from squall_operator.run import ComponentSummary, _table, average_rates, output_console, print_table

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


BIG = {
    "sentence-generator-from-kafka": ComponentSummary(kind="spout", executors=16, emitted=123_456_789,
                                                      acked=123_456_000, failed=1_234_567),
    "split-sentence-into-words": ComponentSummary(kind="bolt", executors=32, emitted=987_654_321,
                                                  acked=123_456_000),
    "count": ComponentSummary(kind="bolt", executors=8, acked=9_876_543_210),
}
BIG_RATES = {"sentence-generator-from-kafka": 2_468_000.0, "count": 197_530_864.0}
HEADERS = ["component", "execs", "emitted", "acked", "failed", "rate/s", "p50 ms", "p99 ms"]


def _rows(text: str) -> list[list[str]]:
    """The table's body rows as their cells (a folded name's second line left out)."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "execs" in line)
    return [line.split() for line in lines[header + 2:] if line.strip() and line.rstrip().endswith(".00")]


@pytest.mark.parametrize("columns", [None, "60", "200"])
def test_the_table_in_a_pipe_is_never_cut(columns: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """With stdout a pipe or a file (CI, `| tee`) the final table once kept 80
    columns and lost its p99 column. Now it takes the width it needs; COLUMNS, if set, folds
    long names but never cuts a figure or a header."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    out = io.StringIO()
    console = output_console(out)
    assert not console.is_terminal
    print_table(console, _table("wordcount", "KILLED", 42.0, BIG, BIG_RATES))
    text = out.getvalue()
    header = next(line for line in text.splitlines() if "execs" in line)
    assert header.split() == ["component", "execs", "emitted", "acked", "failed", "rate/s", "p50",
                              "ms", "p99", "ms"], text
    rows = _rows(text)
    assert len(rows) == 3, text
    for row in rows:
        assert row[-1] == "0.00" and row[-2] == "0.00", text  # p50 and p99, whole
    for figure in ("123,456,789", "123,456,000", "1,234,567", "2,468,000", "987,654,321",
                   "9,876,543,210", "197,530,864"):
        assert figure in text, (figure, text)
    if columns is None or columns == "200":
        assert "sentence-generator-from-kafka (spout)" in text, text  # no fold, no cut


def test_a_narrow_terminal_gets_every_figure_too() -> None:
    """A terminal narrower than the figures: the final table is printed wider than the terminal
    (the terminal wraps it) rather than cut."""
    out = io.StringIO()
    console = Console(file=out, width=60, force_terminal=True, color_system=None)
    print_table(console, _table("wordcount", "KILLED", 42.0, BIG, BIG_RATES))
    text = out.getvalue()
    assert "p99 ms" in text and "9,876,543,210" in text and "197,530,864" in text, text
    assert all(len(row) >= 8 for row in _rows(text)), text


def test_progress_lines_in_a_pipe_are_not_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    console = output_console(out)
    line = "  ".join(f"component-{i}: emitted={i * 1_000_003} acked={i * 999_999} failed=0" for i in range(12))
    console.print(line, markup=False)
    assert out.getvalue() == line + "\n"
