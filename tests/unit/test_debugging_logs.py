"""The log reading of `squall logs` on a local cluster (squall_operator.verbs): the last lines of a
file, several files prefixed with their worker, and following new lines, from plain files with an
injected sleep."""

from __future__ import annotations

from pathlib import Path

import pytest

from squall_operator.verbs import follow_files, tail_offset

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text", ["a\nb\nc\n", "a\nb\nc"])
def test_tail_offset_finds_the_last_lines(tmp_path: Path, text: str) -> None:
    p = tmp_path / "w.log"
    p.write_bytes(text.encode())
    with open(p, "rb") as f:
        assert [text.encode()[tail_offset(f, n, block=2):] for n in (0, 1, 2, 3, 9)] == [
            b"", text.encode()[4:], text.encode()[2:], text.encode(), text.encode()]
        assert tail_offset(f, -1) == 0
    p.write_bytes(b"")
    with open(p, "rb") as f:
        assert tail_offset(f, 5) == 0


def test_several_files_are_prefixed_and_a_partial_last_line_is_shown(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("one\ntwo\nthree\n")
    (tmp_path / "b.log").write_text("uno\ndos")
    out: list[str] = []
    follow_files({"b-6700": str(tmp_path / "b.log"), "a-6700": str(tmp_path / "a.log")}, 2, False, out.append)
    assert out == ["[a-6700] two", "[a-6700] three", "[b-6700] uno", "[b-6700] dos"]
    out.clear()
    follow_files({"a-6700": str(tmp_path / "a.log")}, -1, False, out.append)
    assert out == ["one", "two", "three"]


def test_following_shows_whole_new_lines_until_the_topology_is_gone(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("old\n")
    out: list[str] = []
    writes = iter(["new 1\nnew", " 2\n", "", "last"])
    looks = 0

    def sleep(_secs: float) -> None:
        nonlocal looks
        looks += 1
        with open(log, "a") as f:
            f.write(next(writes, ""))

    follow_files({"a-6700": str(log)}, 0, True, out.append, alive=lambda: looks < 4, sleep=sleep, check_every=4)
    # a line is shown once whole; the last partial one when the follow ends
    assert out == ["new 1", "new 2", "last"]
