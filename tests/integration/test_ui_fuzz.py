"""The web UI against hostile requests, over HTTP on loopback: one `squall run --ui-actions` of
the word count (real ZooKeeper, workers, zmq) shared by the module, as in test_ui_browser.py.

- the reported injection (`/topology/<img src=x onerror=...>`) and the ids that reached
  ZooKeeper's node-name check (`zookeeper`, `.`, `..`, `%2e%2e`, control characters, very long
  names): 404 for the JSON API, the HTML page and every POST, nothing raw in the page, and no
  traceback in the run's output;
- a hypothesis test that drives every route of the app (enumerated from the Starlette app, so a
  new route is covered without editing this file) with arbitrary path segments, query strings,
  methods, content types and bodies: never a 5xx, never a traceback in the run's output, never
  the probe markup raw in an HTML page, the security headers on every answer."""

from __future__ import annotations

import http.client
import json
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from starlette.routing import Mount, Route

from helpers import SquallRun, wait_for  # the integration tests' helpers (same directory)
from squall.zkserver import java_available
from squall_operator.ui import create_app
from squall_operator.verbs import MAX_WORKERS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not java_available(), reason="no java on PATH (squall run starts an embedded ZooKeeper)"),
]

TOPOLOGY = "wordcount"
PROBE = "<x-squall-probe>"
INJECTION = "<img src=x onerror=alert(document.domain)>"
CONTENT_TYPES = {"application/json", "text/html", "text/plain", "text/css", "text/javascript",
                 "application/javascript"}  # .js by the platform's mimetypes


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    @property
    def content_type(self) -> str:
        return self.headers.get_content_type()


@dataclass
class Served:
    run: SquallRun
    host: str
    port: int
    seen: int = 0  # how much of the run's output the checks have read

    def request(self, method: str, target: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Answer:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request(method, target, body=body, headers=headers or {})
            r = conn.getresponse()
            return Answer(r.status, r.headers, r.read())
        finally:
            conn.close()

    def new_output(self) -> str:
        text = self.run.text()
        new, self.seen = text[self.seen:], len(text)
        return new


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """`squall run` of the word count with the UI and its actions on (any free port)."""
    run = SquallRun("examples/wordcount/topology.yaml", "--duration", "600", "--no-progress", "--ui-actions",
                    "--ui-port", "0", "--kill-wait", "1")
    try:
        m = run.wait_line(r"UI: (http://127\.0\.0\.1:\d+/)", 120)
        assert m, "squall run did not print its UI address:\n" + run.text()
        url = urlsplit(m.group(1))
        assert url.hostname and url.port
        got = Served(run, url.hostname, url.port)
        wait_for(lambda: got.request("GET", f"/api/v1/topology/{TOPOLOGY}").status == 200, 120,
                 "the word count in the UI's API")
        yield got
    finally:
        run.stop(signal.SIGINT)  # Storm's kill, then exit


def check_answer(answer: Answer, what: str) -> None:
    """What every answer must hold, whatever was asked."""
    assert answer.status < 500, (what, answer.status, answer.text[:2000])
    assert answer.headers.get("X-Content-Type-Options") == "nosniff", (what, dict(answer.headers))
    csp = answer.headers.get("Content-Security-Policy", "")
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, (what, csp)
    assert "unsafe-inline" not in csp, (what, csp)
    assert answer.headers.get("X-Frame-Options") == "DENY", (what, dict(answer.headers))
    assert answer.headers.get("Referrer-Policy") == "no-referrer", (what, dict(answer.headers))
    if answer.status != 304 and answer.body:
        assert answer.content_type in CONTENT_TYPES, (what, answer.content_type)
    if answer.content_type == "text/html":
        assert "<x-squall-probe" not in answer.text.lower(), (what, answer.text[:2000])
        assert "<img src=x" not in answer.text.lower(), (what, answer.text[:2000])


def check_output(served: Served, what: str) -> None:
    out = served.new_output()
    assert "Traceback" not in out and "Exception in ASGI application" not in out, (what, out[-4000:])


# -- the reported cases --------------------------------------------------------------------------

BAD_IDS = ["zookeeper", ".", "..", "%2e%2e", "%2E%2E", "%2e", "%00", "a%00b", "%0a", "%1b%5b2J", "%7f",
           "a" * 64, "a" * 5000, "Wordcount", "word_count", "-x", "x-", "%ff", "%c0%ae%c0%ae",
           quote(INJECTION, safe=""), quote(PROBE, safe=""), "nosuch"]


def test_reported_injection_is_escaped_and_forbidden_by_csp(served: Served) -> None:
    """The 404 page once echoed the name raw; headless Chromium ran its handler."""
    for target in (f"/topology/{quote(INJECTION, safe='')}", f"/topology/{quote(INJECTION)}"):
        got = served.request("GET", target)
        assert got.status == 404, (target, got.status, got.text)
        assert got.content_type == "text/html"
        assert "<img" not in got.text and "&lt;img src=x onerror=" in got.text, got.text
        check_answer(got, target)
    page = served.request("GET", f"/topology/{TOPOLOGY}")
    assert page.status == 200
    check_answer(page, "the topology page")
    assert "<script>" not in page.text and " on" + "click=" not in page.text  # the script is a file
    check_output(served, "the injection")


@pytest.mark.parametrize("name", BAD_IDS)
def test_invalid_or_unknown_ids_are_404_before_zookeeper(served: Served, name: str) -> None:
    """`zookeeper`, `.`, `..` and `%2e%2e` were once 500 with a traceback in the run's
    output (ZooKeeper's node-name check); every invalid or unknown id is 404, on every route."""
    targets = [("GET", f"/api/v1/topology/{name}"), ("GET", f"/api/v1/topology/{name}?window=600"),
               ("GET", f"/topology/{name}")]
    targets += [("POST", f"/api/v1/topology/{name}/{op}") for op in ("activate", "deactivate", "rebalance/0",
                                                                        "kill/0", "rebalance", "kill")]
    for method, target in targets:
        got = served.request(method, target, b"{}" if method == "POST" else None,
                             {"Content-Type": "application/json"} if method == "POST" else None)
        assert got.status == 404, (method, target, got.status, got.text[:500])
        check_answer(got, target)
        if target.startswith("/api/"):
            assert got.content_type == "application/json" and json.loads(got.body)["error"], got.text[:500]
            assert len(got.body) < 1000, "the answer echoes a long name whole"
    check_output(served, name)


def test_cross_site_posts_are_refused(served: Served) -> None:
    """A browser says where a request comes from (Sec-Fetch-Site): an action from another site
    (or another port on this host) is 403; the UI's own page and non-browser clients pass."""
    api = f"/api/v1/topology/{TOPOLOGY}/activate"
    for site in ("cross-site", "same-site"):
        got = served.request("POST", api, b"{}", {"Content-Type": "application/json", "Sec-Fetch-Site": site})
        assert got.status == 403 and "Sec-Fetch-Site" in json.loads(got.body)["error"], got.text
    for site in ("same-origin", None):
        headers = {"Content-Type": "application/json"} | ({"Sec-Fetch-Site": site} if site else {})
        got = served.request("POST", api, b"{}", headers)
        assert got.status in (200, 409), got.text  # 409: a rebalance of the fuzz test under way
    check_output(served, "cross-site posts")


def test_dns_rebinding_host_is_refused(served: Served) -> None:
    """The UI listens on loopback: a request naming another host (a page whose name was rebound
    to 127.0.0.1) is refused, so that page cannot read the figures nor post an action."""
    for host in ("attacker.example", "attacker.example:80", f"127.0.0.1.attacker.example:{served.port}"):
        got = served.request("GET", "/api/v1/topology/summary", headers={"Host": host})
        assert got.status == 400, (host, got.status, got.text)
        check_answer(got, host)
    for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}", "localhost"):
        got = served.request("GET", "/api/v1/topology/summary", headers={"Host": host})
        assert got.status == 200, (host, got.status, got.text)


def test_a_large_or_deep_body_is_refused(served: Served) -> None:
    api = f"/api/v1/topology/{TOPOLOGY}/rebalance/0"
    got = served.request("POST", api, b"[" * 200_000, {"Content-Type": "application/json"})
    assert got.status == 413, (got.status, got.text[:300])
    got = served.request("POST", api, b"[" * 20_000, {"Content-Type": "application/json"})
    assert got.status == 400, (got.status, got.text[:300])
    check_output(served, "large bodies")


def test_a_rebalance_past_the_worker_limit_is_refused(served: Served) -> None:
    """Found while probing the actions: `numWorkers: 1000000000000` was accepted (200), and
    nimbus then failed every monitor round with a MemoryError traceback (an acker per worker).
    The UI refuses what `squall rebalance -n` refuses (verbs.MAX_WORKERS)."""
    api = f"/api/v1/topology/{TOPOLOGY}/rebalance/0"
    for workers in (MAX_WORKERS + 1, 10**12):
        body = json.dumps({"rebalanceOptions": {"numWorkers": workers}}).encode()
        got = served.request("POST", api, body, {"Content-Type": "application/json"})
        assert got.status == 400 and "numWorkers" in json.loads(got.body)["error"], (got.status, got.text)
        assert str(MAX_WORKERS) in json.loads(got.body)["error"], got.text
    time.sleep(1.5)  # a monitor round of nimbus
    check_output(served, "a rebalance past the worker limit")


# -- every route, hypothesis ---------------------------------------------------------------------

def _routes() -> list[tuple[str, list[str], frozenset[str]]]:
    """(path format, its parameters, methods) of every route of the app; a Mount as `path/{path}`."""
    app = create_app(None, None)  # type: ignore[arg-type]  # the routes only; nothing is served
    out = []
    for r in app.routes:
        if isinstance(r, Route):
            out.append((r.path, list(r.param_convertors), frozenset(r.methods or {"GET"})))
        elif isinstance(r, Mount):
            out.append((r.path + "/{path}", ["path"], frozenset({"GET", "HEAD"})))
    assert len(out) >= 7, out
    return out


ROUTES = _routes()
_TRICKY = [".", "..", "%2e%2e", "%2F", "%2f..%2f", "%00", "%0d%0a", "%ff", "%c0%ae", "%", "%zz", "~", "*",
           "zookeeper", TOPOLOGY, TOPOLOGY, TOPOLOGY, "activate", "deactivate", "rebalance", "kill", "0", "1",
           "-1", "1e309", "nan", "ui.js", "ui.css", "..%2fdata.py", "a" * 300, "a" * 7000]
_text = st.text(st.characters(codec="utf-8"), max_size=40)
_probe_text = st.builds(lambda a, b: a + PROBE + b, _text, _text)
segments = st.one_of(
    st.sampled_from(_TRICKY),
    _text.map(lambda s: quote(s, safe="")),
    _probe_text.map(lambda s: quote(s, safe="")),
    st.from_regex(r"[a-z0-9][-a-z0-9]{0,20}", fullmatch=True),
)
queries = st.one_of(
    st.just(""),
    st.lists(st.tuples(st.one_of(st.just("window"), _text, _probe_text),
                       st.one_of(st.sampled_from(["600", "10800", ":all-time", ""]), _text, _probe_text)),
             max_size=4).map(lambda kv: "?" + urlencode(kv)),
    st.sampled_from(["?", "?&&", "?window", "?window=%ff", "?=%00", "?" + "a=1&" * 500]),
)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _text, _probe_text),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(_text, children, max_size=4)),
    max_leaves=12,
)
_options = st.fixed_dictionaries({}, optional={
    # a few workers, or past the limit: a rebalance to hundreds of workers (and as many ackers)
    # is allowed, and would load the shared machine rather than test the UI
    "numWorkers": st.one_of(st.integers(-3, 4), st.integers(MAX_WORKERS + 1, 10**12), _json),
    "executors": st.one_of(st.dictionaries(st.sampled_from(["split", "count", "sentences", "nosuch", PROBE]),
                                           st.one_of(st.integers(-3, 10**12), _json), max_size=3), _json),
})
bodies = st.one_of(
    st.none(),
    st.binary(max_size=300),
    _json.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"rebalanceOptions": st.one_of(_options, _json)}).map(lambda v: json.dumps(v).encode()),
)
content_types = st.one_of(st.just("application/json"), st.sampled_from([
    None, "application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x"]))
# a parameter's values: half of them ones the app knows (the shared topology, the actions, waits),
# so that examples get past the first checks, and half anything
_known = {
    "id": st.just(TOPOLOGY),
    "op": st.sampled_from(["activate", "deactivate", "rebalance", "kill", "enable", "disable"]),
    # the debug switch's percentage and component (the shared topology's, and ones it has not)
    "pct": st.one_of(st.sampled_from(["0", "50", "100", "100.5", "-1", "nan", "inf", "1e309", "1_0"]),
                     st.floats().map(str)),
    "component": st.sampled_from(["sentences", "split", "count", "nosuch", "*", "%2e%2e"]),
    "wait": st.one_of(st.sampled_from(["0", "1", "0.5", "-1", "nan", "inf", "1e309", "86400", "86401", "1_0"]),
                      st.floats().map(str)),
}


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, bytes | None, dict[str, str]]:
    # the actions thrice as often: they read bodies and change things
    path, params, methods = draw(st.sampled_from(ROUTES + [r for r in ROUTES if "POST" in r[2]] * 2))
    for p in params:
        if p == "path":
            value = "/".join(draw(st.lists(segments, min_size=1, max_size=3)))
        else:
            value = draw(st.one_of(_known[p], segments) if p in _known else segments)
        path = re.sub(r"\{" + re.escape(p) + r"(:[^}]*)?\}", lambda _: value, path, count=1)
    method = draw(st.one_of(st.sampled_from(sorted(methods)), st.sampled_from(["GET", "POST", "PUT", "DELETE"])))
    body = draw(bodies) if method in ("POST", "PUT") else None
    headers = {}
    if (ctype := draw(content_types)) is not None:
        headers["Content-Type"] = ctype
    return method, path + draw(queries), body, headers


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req=requests())
def test_every_route_survives_arbitrary_requests(served: Served,
                                                 req: tuple[str, str, bytes | None, dict[str, str]]) -> None:
    method, target, body, headers = req
    # the shared topology stays: a kill of it would end the module's run
    if urlsplit(target).path.startswith(f"/api/v1/topology/{TOPOLOGY}/kill") and method == "POST":
        target = target.replace("/kill", "/deactivate", 1)
    got = served.request(method, target, body, headers)
    event(f"{method} {got.status}")  # --hypothesis-show-statistics: what the examples reached
    what = f"{method} {target[:300]} {headers} {body[:200] if body else body!r}"
    check_answer(got, what)
    check_output(served, what)


@st.composite
def actions(draw: st.DrawFn) -> tuple[str, bytes | None, dict[str, str]]:
    """POSTs to the shared topology's actions (every POST route of the app), with arbitrary
    options, waits and bodies: the examples above reach them too, but seldom."""
    path, params, _ = draw(st.sampled_from([r for r in ROUTES if "POST" in r[2]]))
    for p in params:
        value = draw(_known[p]) if p != "wait" else draw(st.one_of(_known[p], segments))
        path = re.sub(r"\{" + re.escape(p) + r"(:[^}]*)?\}", lambda _: value, path, count=1)
    headers = {"Content-Type": draw(content_types) or "application/json"}
    if draw(st.booleans()):
        headers["Sec-Fetch-Site"] = draw(st.sampled_from(["same-origin", "none", "cross-site", "same-site", PROBE]))
    return path + draw(queries), draw(bodies), headers


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req=actions())
def test_actions_survive_arbitrary_options(served: Served, req: tuple[str, bytes | None, dict[str, str]]) -> None:
    target, body, headers = req
    if "/kill" in target:  # the shared topology stays
        target = target.replace("/kill", "/deactivate", 1)
    got = served.request("POST", target, body, headers)
    event(f"POST {got.status}")
    what = f"POST {target[:300]} {headers} {body[:200] if body else body!r}"
    check_answer(got, what)
    check_output(served, what)


def test_no_traceback_in_the_whole_output(served: Served) -> None:
    """Last in the module: whatever the earlier requests left in the run's output, late."""
    time.sleep(1)
    assert "Traceback" not in served.run.text(), served.run.text()[-8000:]
    got = served.request("GET", "/api/v1/topology/summary")
    assert got.status == 200 and TOPOLOGY in got.text, "the word count did not survive the fuzzing"

