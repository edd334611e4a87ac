"""Storm's multilang framing and the msgpack one, with plain values: the encoders, the decoders
fed any split of the bytes, a real pipe pair, and the errors for what is not a message."""

from __future__ import annotations

import os
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from squall.multilang import adapters
from squall.multilang.serializers import (
    FrameError,
    JsonSerializer,
    MsgpackSerializer,
    serializer_for,
)

pytestmark = pytest.mark.unit

MESSAGES: list[Any] = [
    {"pidDir": "/tmp/x", "conf": {"topology.name": "t"}, "context": {"taskid": 3, "task->component": {"3": "b"}}},
    {"command": "emit", "anchors": ["1"], "stream": "words", "tuple": ["snow white", 7, None, 1.5]},
    [4, 5],
    {"command": "log", "msg": "line one\nend\nline three", "level": 2},  # "end" inside a string
    {"command": "sync"},
    {"id": "9", "comp": "s", "stream": "default", "task": 1, "tuple": ["ünïcode ✓"]},
]


def test_json_is_storms_framing() -> None:
    assert JsonSerializer().encode({"command": "sync"}) == b'{"command":"sync"}\nend\n'
    assert JsonSerializer().encode([1, 2]) == b"[1,2]\nend\n"


def test_what_storm_py_writes_is_read() -> None:
    # storm.py prints the JSON and then "end", each with print(): "<json>\nend\n"
    data = b'{"pid": 42}\nend\n{"command": "emit", "tuple": ["a"]}\nend\n'
    assert JsonSerializer().decoder().feed(data) == [{"pid": 42}, {"command": "emit", "tuple": ["a"]}]


@pytest.mark.parametrize("serializer", [JsonSerializer(), MsgpackSerializer()], ids=["json", "msgpack"])
@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_any_split_of_the_bytes_gives_the_same_messages(serializer: Any, cuts: list[int]) -> None:
    data = b"".join(serializer.encode(m) for m in MESSAGES)
    points = sorted({c % (len(data) + 1) for c in cuts})
    decoder = serializer.decoder()
    got: list[Any] = []
    last = 0
    for p in [*points, len(data)]:
        got.extend(decoder.feed(data[last:p]))
        last = p
    assert got == MESSAGES


def test_one_byte_at_a_time() -> None:
    data = b"".join(JsonSerializer().encode(m) for m in MESSAGES)
    decoder = JsonSerializer().decoder()
    got = [m for i in range(len(data)) for m in decoder.feed(data[i:i + 1])]
    assert got == MESSAGES


def test_bad_json_names_what_it_read() -> None:
    with pytest.raises(FrameError, match="not JSON: b'hello world'"):
        JsonSerializer().decoder().feed(b"hello world\nend\n")


@pytest.mark.parametrize("serializer", [JsonSerializer(), MsgpackSerializer()], ids=["json", "msgpack"])
def test_an_oversize_message_is_refused_not_buffered(serializer: Any) -> None:
    decoder = serializer.decoder(max_bytes=1000)
    big = serializer.encode({"tuple": ["x" * 5000]})
    with pytest.raises(FrameError, match="over 1000 bytes"):
        for i in range(0, len(big), 100):
            decoder.feed(big[i:i + 100])


def test_the_serializer_setting_takes_storms_class_name_and_refuses_others() -> None:
    assert serializer_for("json").name == "json"
    assert serializer_for("org.apache.storm.multilang.JsonSerializer").name == "json"
    assert serializer_for("msgpack").name == "msgpack"
    with pytest.raises(ValueError, match="topology.multilang.serializer='yaml': expected one of json, msgpack"):
        serializer_for("yaml")


@pytest.mark.parametrize("serializer", [JsonSerializer(), MsgpackSerializer()], ids=["json", "msgpack"])
def test_through_a_real_pipe(serializer: Any) -> None:
    r, w = os.pipe()
    payload = MESSAGES * 200  # more than a pipe buffer holds: the writer waits for the reader

    def write() -> None:
        with os.fdopen(w, "wb", buffering=0) as out:
            for m in payload:
                out.write(serializer.encode(m))

    t = threading.Thread(target=write)
    t.start()
    decoder = serializer.decoder()
    got: list[Any] = []
    with os.fdopen(r, "rb", buffering=0) as inp:
        while chunk := inp.read(4096):
            got.extend(decoder.feed(chunk))
    t.join()
    assert got == payload


def test_adapters_are_extracted_from_the_jars(tmp_path: Path) -> None:
    m2 = tmp_path / "m2"
    for artifact, name in adapters.ADAPTERS.items():
        d = m2 / "org" / "apache" / "storm" / artifact / "9.9.9"
        d.mkdir(parents=True)
        with zipfile.ZipFile(d / f"{artifact}-9.9.9.jar", "w") as z:
            z.writestr(f"resources/{name}", f"// {name}\n")
    out = tmp_path / "out"
    written = adapters.extract(m2, out, "9.9.9")
    assert sorted(p.name for p in written) == ["storm.js", "storm.py", "storm.rb"]
    assert adapters.find(out)["storm.rb"].read_text() == "// storm.rb\n"


def test_a_missing_adapter_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="storm.js is not in .*run scripts/setup"):
        adapters.require("storm.js", tmp_path)
    with pytest.raises(FileNotFoundError, match="mvn -B dependency:get -Dartifact=org.apache.storm:multilang-javascript:1.0"):
        adapters.extract(tmp_path, tmp_path / "out", "1.0")


def test_adapters_are_fetched_over_http_and_checked_against_their_sha1(tmp_path: Path) -> None:
    """`fetch` (what the worker image's Dockerfile runs) against a loopback server laid out as
    Maven Central: the three files land in `out`; a jar whose SHA-1 differs from the published
    one is refused, naming both."""
    import functools
    import hashlib
    import http.server

    repo = tmp_path / "central"
    for artifact, name in adapters.ADAPTERS.items():
        d = repo / "org" / "apache" / "storm" / artifact / "9.9.9"
        d.mkdir(parents=True)
        jar = d / f"{artifact}-9.9.9.jar"
        with zipfile.ZipFile(jar, "w") as z:
            z.writestr(f"resources/{name}", f"// {name}\n")
        (d / f"{jar.name}.sha1").write_text(hashlib.sha1(jar.read_bytes()).hexdigest() + "\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(repo))
    handler.log_message = lambda *a: None  # type: ignore[method-assign, assignment]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        written = adapters.fetch(tmp_path / "out", "9.9.9", base=base, timeout=10)
        assert sorted(p.name for p in written) == ["storm.js", "storm.py", "storm.rb"]
        assert adapters.find(tmp_path / "out")["storm.js"].read_text() == "// storm.js\n"
        sha1 = repo / "org/apache/storm/multilang-python/9.9.9/multilang-python-9.9.9.jar.sha1"
        sha1.write_text("0" * 40)
        with pytest.raises(ValueError, match="multilang-python-9.9.9.jar has SHA-1 [0-9a-f]{40}, Maven Central publishes 0{40}"):
            adapters.fetch(tmp_path / "again", "9.9.9", base=base, timeout=10)
    finally:
        server.shutdown()
        server.server_close()
