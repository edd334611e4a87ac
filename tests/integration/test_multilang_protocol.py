"""Storm's multilang protocol between ShellBolt / ShellSpout and real child processes, without
workers: a recording collector stands in for the executor's (the workers are
tests/integration/test_multilang.py's). The children are small Python scripts written here,
speaking JSON through Storm's own storm.py, or msgpack (Squall's framing) by hand."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from squall import usermetrics
from squall.multilang import ShellBolt, ShellSpout, adapters
from squall.tuples import Tuple

pytestmark = pytest.mark.integration


class Context:
    topology_id = "t"
    task_id = 7
    component_id = "comp"
    worker_port = 0

    def __init__(self) -> None:
        self.user_metrics = usermetrics.TaskMetrics("t", "comp", 7)

    def register_gauge(self, name: str, fn: Any) -> usermetrics.Gauge:
        return self.user_metrics.gauge(name, fn)

    def component_tasks(self, component: str) -> list[int]:
        return [7]

    def task_component(self, task: int) -> str:
        return "comp"

    def this_component_tasks(self) -> list[int]:
        return [7]

    def output_fields(self, stream: str = "default") -> list[str]:
        return ["word"]

    def task_to_component(self) -> dict[int, str]:
        return {7: "comp"}

    def this_streams(self) -> list[str]:
        return ["default"]


class Collector:
    def __init__(self, spout: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.spout = spout

    def emit(self, values: Any, stream: str = "default", anchors: Any = None) -> list[int]:
        if self.spout:  # a spout's emit: the third argument is its message id
            self.calls.append(("emit", values, stream, anchors))
        else:
            self.calls.append(("emit", values, stream, [a.values for a in anchors or ()]))
        return [11, 12]

    def emit_direct(self, task: int, values: Any, stream: str = "default", anchors: Any = None) -> None:
        self.calls.append(("direct", task, values, stream))

    def ack(self, tup: Tuple) -> None:
        self.calls.append(("ack", tup.values))

    def fail(self, tup: Tuple) -> None:
        self.calls.append(("fail", tup.values))

    def report_error(self, exc: BaseException) -> None:
        self.calls.append(("error", str(exc)))

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == kind]


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    adapters.require("storm.py")
    monkeypatch.syspath_prepend(str(tmp_path))  # where shell.files are looked up
    yield tmp_path


def script(where: Path, name: str, text: str) -> str:
    (where / name).write_text(textwrap.dedent(text))
    return name


def tup(values: list[Any], stream: str = "default") -> Tuple:
    return Tuple(values, 3, "src", stream, {}, None)


def bolt(name: str, conf: dict[str, Any] | None = None, context: Context | None = None) -> tuple[ShellBolt, Collector]:
    b, c = ShellBolt(), Collector()
    shell = {"command": [sys.executable, name], "files": [name]}
    b.prepare({"squall.multilang.shell": shell, "test.word": "hi", **(conf or {})}, context or Context(), c)  # type: ignore[arg-type]
    return b, c


def gauges(context: Context) -> dict[str, float | None]:
    """The task's registered gauges as /metrics reads them (None: left out)."""
    return {n: m.read("test") for n, m in context.user_metrics.metrics.items()
            if isinstance(m, usermetrics.Gauge)}


def test_handshake_emits_anchors_direct_and_task_ids(code: Path, caplog: pytest.LogCaptureFixture) -> None:
    name = script(code, "b1.py", """\
        import os, storm
        class B(storm.Bolt):
            def initialize(self, conf, context):
                storm.logInfo("hello %s %s" % (conf["test.word"], context["taskid"]))
                self.ctx = context
                self.pid_file = os.path.exists("%s/%d" % (".pids", os.getpid()))
            def process(self, tup):
                ids = storm.emit([tup.values[0], tup.stream, tup.task, tup.component], anchors=[tup])
                storm.emit([str(ids)], stream="ids", anchors=[tup])
                storm.emitDirect(5, ["direct"], stream="d")
                storm.emit([self.ctx["componentid"], self.pid_file])
                storm.rpcMetrics("count", 1)
                storm.rpcMetrics("count", 2.5)
                storm.rpcMetrics("bad name!", 1)
                storm.ack(tup)
        B().run()
        """)
    context = Context()
    caplog.set_level("INFO", logger="squall.multilang")
    b, c = bolt(name, context=context)
    try:
        b.execute(tup(["a"]))
        # the log command, sent from initialize with what the handshake gave it (conf, context)
        assert "comp task 7: hello hi 7" in caplog.text
        assert c.of("emit") == [
            ("emit", ["a", "default", 3, "src"], "default", [["a"]]),
            ("emit", ["[11, 12]"], "ids", [["a"]]),  # the task ids came back
            ("emit", ["comp", True], "default", []),  # the context; the pid file was written
        ]
        assert c.of("direct") == [("direct", 5, ["direct"], "d")]
        assert c.of("ack") == [("ack", ["a"])]
        # the metrics command: the task's gauge of that name holds the last value sent; a name
        # the metrics refuse is the component's error, once, and nothing else breaks
        assert gauges(context) == {"count": 2.5}
        (error,) = c.of("error")
        assert "metric from the subprocess refused: component comp task 7: metric name 'bad name!'" in error[1]
        b.execute(tup(["b"]))
        assert len(c.of("error")) == 1 and len(c.of("ack")) == 2
    finally:
        b.cleanup()
    assert not b.workdir.exists()


def test_a_tick_is_passed_on_and_an_error_reported(code: Path) -> None:
    name = script(code, "b2.py", """\
        import storm
        class B(storm.BasicBolt):
            def process(self, tup):
                if tup.stream == "__tick":
                    storm.reportError("tick from %s %s" % (tup.component, tup.task))
        B().run()
        """)
    b, c = bolt(name)
    try:
        b.execute(tup([1], stream="__tick"))
        assert c.of("error") == [("error", "tick from __system -1")]
        assert c.of("ack") == [("ack", [1])]  # as Storm's ShellBolt: the collector ignores it
    finally:
        b.cleanup()


def test_an_ack_of_an_unknown_id_restarts_the_child_and_fails_what_it_held(code: Path) -> None:
    name = script(code, "b3.py", """\
        import storm
        class B(storm.Bolt):
            def process(self, tup):
                storm.sendMsgToParent({"command": "ack", "id": "no-such-id"})
        B().run()
        """)
    b, c = bolt(name)
    try:
        first = b.proc.pid if b.proc else None
        b.execute(tup(["x"]))
        errors = c.of("error")
        assert len(errors) == 1 and "acked a non-existent or already acked/failed id: 'no-such-id'" in errors[0][1]
        assert c.of("fail") == [("fail", ["x"])]
        assert b.proc is not None and b.proc.pid != first  # started again
    finally:
        b.cleanup()


def test_a_child_that_cannot_start_says_so(code: Path) -> None:
    b, c = ShellBolt(), Collector()
    with pytest.raises(Exception, match="cannot start \\['/no/such/interpreter'"):
        b.prepare({"squall.multilang.shell": {"command": ["/no/such/interpreter"]}}, Context(), c)  # type: ignore[arg-type]
    assert not b.workdir.exists()  # no cleanup follows a failed prepare: nothing is left behind


MSGPACK_CHILD = """\
    import os, sys, msgpack
    out = sys.stdout.buffer
    def send(m):
        out.write(msgpack.packb(m, use_bin_type=True)); out.flush()
    unpacker = msgpack.Unpacker(raw=False)
    def messages():
        while True:
            data = os.read(0, 65536)
            if not data:
                return
            unpacker.feed(data)
            yield from unpacker
    it = messages()
    setup = next(it)
    open(os.path.join(setup["pidDir"], str(os.getpid())), "w").close()
    send({"pid": os.getpid()})
    for m in it:
        if isinstance(m, list):  # task ids: it emits with need_task_ids false, so none may come
            send({"command": "error", "msg": "task ids came though need_task_ids was false: %r" % (m,)})
            continue
        if m.get("stream") == "__heartbeat":
            send({"command": "sync"})
            continue
        send({"command": "emit", "anchors": [m["id"]], "tuple": [m["tuple"][0] * 2, b"\\x00bytes"],
              "need_task_ids": False})
        send({"command": "ack", "id": m["id"]})
    """


def test_msgpack_framing_with_a_child_of_its_own(code: Path) -> None:
    name = script(code, "mp.py", MSGPACK_CHILD)
    b, c = bolt(name, {"topology.multilang.serializer": "msgpack"})
    try:
        for i in range(100):
            b.execute(tup([i]))
        assert [e[1] for e in c.of("emit")] == [[2 * i, b"\x00bytes"] for i in range(100)]
        assert len(c.of("ack")) == 100
        assert not c.of("error")  # need_task_ids false: no task ids were sent back
    finally:
        b.cleanup()


def test_a_spout_child_next_ack_fail_activate_deactivate_and_its_death(code: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    name = script(code, "s1.py", """\
        import os, storm
        class S(storm.Spout):
            def initialize(self, conf, context):
                self.n = 0
            def activate(self):
                storm.log("activated")
            def deactivate(self):
                storm.logWarn("deactivated after %d" % self.n)
            def nextTuple(self):
                self.n += 1
                if self.n == 3:
                    os._exit(5)
                storm.emit(["v%d" % self.n], id=self.n)
            def ack(self, id):
                storm.emit(["acked", id], stream="acks")
            def fail(self, id):
                storm.emitDirect(9, ["failed", id])
        S().run()
        """)
    s, c = ShellSpout(), Collector(spout=True)
    shell = {"command": [sys.executable, name], "files": [name]}
    caplog.set_level("INFO", logger="squall.multilang")
    s.open({"squall.multilang.shell": shell}, Context(), c)  # type: ignore[arg-type]
    try:
        s.activate()
        assert "comp task 7: activated" in caplog.text
        s.next_tuple()
        s.next_tuple()
        s.deactivate()
        (warned,) = [r for r in caplog.records if "deactivated" in r.getMessage()]
        assert warned.getMessage() == "comp task 7: deactivated after 2" and warned.levelname == "WARNING"
        s.activate()
        s.ack(1)
        s.fail(2)
        assert c.calls == [("emit", ["v1"], "default", 1), ("emit", ["v2"], "default", 2),
                           ("emit", ["acked", 1], "acks", None), ("direct", 9, ["failed", 2], "default")]
        pid = s.proc.pid if s.proc else None
        s.next_tuple()  # the child exits: reported, started again
        (error,) = c.of("error")
        assert "exited with code 5" in error[1]
        assert s.proc is not None and s.proc.pid != pid
        s.next_tuple()
        assert c.calls[-1] == ("emit", ["v1"], "default", 1)  # a fresh child
    finally:
        s.close()
    assert pid is not None
    time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


# A child speaking Storm's JSON framing by hand: it holds each tuple and acks it at the next
# heartbeat that comes alone (between tuples, as an async bolt acks later); with `test.hang` in
# its conf it hangs on that heartbeat instead.
IDLE_CHILD = """\
    import json, os, sys, time
    def read():
        lines = []
        while True:
            line = sys.stdin.readline()
            if not line:
                sys.exit(0)
            if line == "end\\n":
                return json.loads("".join(lines))
            lines.append(line)
    def send(m):
        sys.stdout.write(json.dumps(m) + "\\nend\\n"); sys.stdout.flush()
    setup = read()
    open(os.path.join(setup["pidDir"], str(os.getpid())), "w").close()
    send({"pid": os.getpid()})
    held, after_tuple = [], False
    while True:
        m = read()
        if isinstance(m, list):
            continue
        if m["stream"] != "__heartbeat":
            held.append(m["id"]); after_tuple = True
            continue
        if not after_tuple:
            if setup["conf"].get("test.hang"):
                time.sleep(3600)
            for i in held:
                send({"command": "ack", "id": i})
            held = []
        after_tuple = False
        send({"command": "sync"})
    """


def test_an_idle_child_is_heartbeated_and_its_late_acks_handled(code: Path) -> None:
    name = script(code, "idle.py", IDLE_CHILD)
    b, c = bolt(name)
    try:
        b.execute(tup(["a"]))
        assert not c.calls  # the child holds it
        start = b.last_sync
        assert b.idle_step(start + 0.25) == pytest.approx(0.75)  # not due: nothing sent
        assert not c.calls
        assert b.idle_step(start + 1.0) == 1.0  # due: a heartbeat, the late ack comes with it
        assert c.calls == [("ack", ["a"])]
        assert b.last_sync > start
    finally:
        b.cleanup()


def test_an_idle_child_that_hangs_is_killed_and_started_again(code: Path) -> None:
    """Storm's ShellBolt heartbeat timeout: no sync to an idle heartbeat within
    topology.subprocess.timeout.secs, and the child is reported, killed, replaced, and the
    tuple it held failed (its spout replays it)."""
    name = script(code, "hang.py", IDLE_CHILD)
    b, c = bolt(name, {"test.hang": True, "topology.subprocess.timeout.secs": 1})
    try:
        b.execute(tup(["held"]))
        assert b.proc is not None and b.proc.proc is not None
        hung = b.proc.proc
        t0 = time.monotonic()
        b.idle_step(b.last_sync + 1.0)
        waited = time.monotonic() - t0
        (error,) = c.of("error")
        assert "the subprocess sent nothing for 1 s (topology.subprocess.timeout.secs)" in error[1], error
        assert 1.0 <= waited < 5.0, waited
        assert c.of("fail") == [("fail", ["held"])]
        assert hung.poll() is not None  # killed, not left asleep
        assert b.proc is not None and b.proc.pid != hung.pid  # a new child
        b.execute(tup(["next"]))  # which takes tuples
        assert len(c.of("error")) == 1 and len(c.of("fail")) == 1
    finally:
        b.cleanup()
