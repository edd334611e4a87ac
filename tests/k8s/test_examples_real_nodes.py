"""The windowed and stateful examples as a user runs them on a cluster, on real nodes.

helm/squall is installed with its default values except a storage class for ZooKeeper's volume
(a static local PersistentVolume, as in test_chart_real_nodes.py); each example then runs from
its own image (examples/<name>/Dockerfile, built by scripts/k8s-images, named in the example's
`spec.worker.image`) in real containers:

- trending: `kubectl apply -f examples/trending/topology.yaml`, the file unchanged (live events);
  the report's windows, read from the worker's log, slide by the file's 5 s with the generator's
  most frequent words on top, and the late stream gets the events stamped a minute back;
  `kubectl delete -f` the same file removes it.
- stateful-wordcount: the Redis of examples/stateful-wordcount/redis.yaml, applied as the
  example's README says, and the example's file with its Redis host set to that Service (`redis`)
  and a finite input; a worker pod is deleted mid-run, and once the operator has replaced it the
  totals committed to Redis equal a recount of the input (`expected_counts`), read from this
  machine straight from the Redis pod; `kubectl delete` removes the topology, its state stays.
- kafka-clicks: `kubectl apply -f examples/kafka-clicks/k8s.yaml` unchanged: Apache Kafka from the
  squall-kafka image (tests/k8s/images/Dockerfile.kafka: non-root, read-only root filesystem) and
  the topology reading it by its Service name `kafka`; live clicks produced from this machine (to
  the broker's second listener, advertised by the pod's IP), and every closed window's count in
  `click-counts`, plus the clicks on `clicks-late`, equals a recount of the input topic.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from squall.plan import build_plan
from squall.statebackend import namespace, open_provider
from squall.topology_keys import KEY_CONF, topology_key
from squall.validation import parse_topology
from loadfile import load_file

from .conftest import chart_release, kget, wait_for
from .conftest import pod_ready as _ready
from .realnode import RealNodeCluster

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
TRENDING = REPO / "examples" / "trending"
STATEFUL = REPO / "examples" / "stateful-wordcount"
KAFKA_CLICKS = REPO / "examples" / "kafka-clicks"
NS = "squall-examples"


def _module(path: Path) -> ModuleType:
    """An example's module, imported from its file (for its pure functions and constants)."""
    return load_file(path, f"_example_{path.stem}")


class Examples:
    def __init__(self, c: RealNodeCluster) -> None:
        self.c = c

    def kubectl(self, *args: str, **kw: Any) -> Any:
        return self.c.kubectl("-n", NS, *args, **kw)

    def get(self, *args: str) -> Any:
        return kget(self.c, "-n", NS, *args)

    def running(self, name: str, workers: int) -> str | None:
        """`kubectl get topo NAME` when its STATUS is Running and WORKERS n/n."""
        line = self.kubectl("get", "topo", name, "--no-headers").stdout.split()
        return " ".join(line) if line[1:3] == ["Running", f"{workers}/{workers}"] else None

    def workers(self, name: str, live: bool = False) -> list[dict[str, Any]]:
        pods = self.get("pods", "-l", f"squall.io/topology={name}")["items"]
        return [p for p in pods if not (live and p["metadata"].get("deletionTimestamp"))]

    def logs(self, name: str) -> str:
        """Every worker container's log of topology `name`."""
        return "".join(self.kubectl("logs", p["metadata"]["name"], check=False).stdout for p in self.workers(name))

    def reasons(self, name: str) -> list[str]:
        items = self.get("events", "--field-selector", f"involvedObject.name={name}")["items"]
        return [e["reason"] for e in items]

    def no_kill_wait(self, topology: str) -> None:
        """Set the kill's wait to 0 (the `squall.io/kill-wait-secs` annotation `kubectl squall kill
        -w 0` writes): left at the examples' default (killWaitSecs unset: their messageTimeoutSecs,
        up to 60 s) the kill alone was a minute of each test. What these tests check is that a
        delete removes the topology and its pods; the kill's wait is
        test_kubectl_delete_waits_for_the_finalizer's (test_chart_real_nodes.py) and
        test_operator_e2e.py's."""
        self.kubectl("annotate", "topology", topology, "--overwrite", "squall.io/kill-wait-secs=0")

    def delete_file(self, file: Path, topology: str) -> None:
        """`kubectl delete -f FILE`, waiting for the Topology's finalizer (Storm's kill), with no
        kill wait (`no_kill_wait`)."""
        self.no_kill_wait(topology)
        self.kubectl("delete", "-f", str(file), "--timeout=150s", timeout=180)


@pytest.fixture(scope="module")
def examples(real_cluster: RealNodeCluster) -> Iterator[Examples]:
    with chart_release(real_cluster, NS, local_pv=True):
        yield Examples(real_cluster)


# "trending in (start, end]: storm 12, spout 7" (trending.Report's log line)
WINDOW_LINE = re.compile(r"trending in \(([\d.]+), ([\d.]+)\]: (.*)$", re.M)


def _windows(log: str) -> dict[float, list[tuple[str, int]]]:
    out: dict[float, list[tuple[str, int]]] = {}
    for start, end, top in WINDOW_LINE.findall(log):
        assert float(end) - float(start) == pytest.approx(20.0), (start, end)  # windowLength 20s
        out[float(end)] = [(w, int(n)) for w, n in (x.rsplit(" ", 1) for x in top.split(", "))]
    return out


def test_trending_from_the_example_file(examples: Examples) -> None:
    e = examples
    trending = _module(TRENDING / "trending.py")
    file = TRENDING / "topology.yaml"
    spec = yaml.safe_load(file.read_text())["spec"]
    e.kubectl("apply", "-f", str(file))
    t0 = time.monotonic()
    wait_for(lambda: e.running("trending", 2), 240, interval=2, what="trending Running 2/2")
    print(f"trending Running 2/2 in {time.monotonic() - t0:.1f}s")
    pods = e.workers("trending")
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {spec["worker"]["image"]}
    assert all(p["status"]["containerStatuses"][0]["containerID"].startswith("containerd://") for p in pods)
    # a topology with windows runs on jemalloc (squall.worker.allocator): the worker image has
    # it, and each worker re-executed itself with it preloaded in its locked-down container
    for p in pods:
        name = p["metadata"]["name"]
        log = e.kubectl("logs", name).stdout
        assert "allocator: jemalloc (re-executed with it preloaded)" in log, log[-3000:]
        mapped = e.kubectl("exec", name, "--", "sh", "-c",
                           "for p in /proc/[0-9]*; do grep -q libjemalloc $p/maps 2>/dev/null"
                           " && tr '\\0' ' ' < $p/cmdline && echo; done; true").stdout
        assert [line for line in mapped.splitlines() if "squall.worker" in line], f"{name}: {mapped!r}"

    # the generator draws the k-th word (from 1) with weight 1/k: in a window whose top word
    # counted c times, the k-th and the (k+1)-th are expected c/k and c/(k+1) times, apart by
    # c/(k(k+1)) with a standard deviation of about sqrt(c/k + c/(k+1)); they are in order at 4
    # standard deviations (a wrong order 3 in 100,000 windows) once c >= 16 k (k+1) (2k+1): the
    # first word ranks first from c = 96, the second second from 480, the third third from 1,344
    # (a window of c = 166 had the 4th word 58 times and the 3rd 57: chance, not a wrong count).
    # At the file's rate a full 20 s window holds rate x 20 events of 2.5 words on average, the
    # first word's share of them is 1 / (1 + 1/2 + ... + 1/n)
    expected_top = trending.WORDS[:3]

    def ranks_certain(c: int) -> int:
        return sum(1 for k in range(1, len(expected_top) + 1) if c >= 16 * k * (k + 1) * (2 * k + 1))
    share = 1 / sum(1 / (k + 1) for k in range(len(trending.WORDS)))
    full = spec["config"]["trending.rate"] * 20 * 2.5 * share

    def windows_now() -> dict[float, list[tuple[str, int]]] | None:
        got = _windows(e.logs("trending"))
        big = {end: top for end, top in got.items() if top[0][1] >= 100}
        # the spout keeps its rate: not held back by maxSpoutPending while its tuples sit in
        # the windows (with 2000 it stalled, and no window got past 60 % of a full one)
        return got if len(big) >= 3 and max(top[0][1] for top in big.values()) >= 0.7 * full else None

    got = wait_for(windows_now, 180, interval=3,
                   what=f"3 windows of live events, one with its top word {0.7 * full:.0f}+ times")
    ends = sorted(got)
    print(f"{len(ends)} windows reported (a full one: {full:.0f} x {expected_top[0]!r}): {got}")
    assert all(end % 5 == 0 for end in ends), ends  # slidingInterval 5s: ends are multiples of 5 s
    assert ranks_certain(int(0.7 * full)) == len(expected_top), full  # the wait gives one such window
    for end, top in got.items():
        k = ranks_certain(top[0][1])
        assert [w for w, _ in top[:k]] == expected_top[:k], (end, k, top)
        assert len(top) == spec["config"]["trending.top.n"] or top[0][1] < 100, (end, top)
        assert [n for _, n in top] == sorted((n for _, n in top), reverse=True), (end, top)
    # every 101st live event is stamped a minute back: behind the watermark, on the late stream
    late = re.findall(r"late \(late\): \[", e.logs("trending"))
    assert late, "no late tuple reached the late stream"

    e.delete_file(file, "trending")
    assert e.kubectl("get", "topology", "trending", check=False).returncode != 0
    wait_for(lambda: not e.workers("trending"), 120, what="the trending worker pods gone")


class Committed:
    """What the topology committed to Redis, read from this machine (the pod's address is routed
    here) with the state provider the workers use."""

    def __init__(self, doc: dict[str, Any], host: str) -> None:
        topo = parse_topology(doc, source="stateful-wordcount")
        # the workers name their state by the topology's key, NAMESPACE~NAME
        self.conf = {"topology.name": topo.name, **topo.spec.config, KEY_CONF: topology_key(topo.name, NS),
                     "topology.state.provider.config": {"host": host, "port": 6379}}
        self.tasks = build_plan(topo, {}).component_tasks

    def state(self, component: str, task: int) -> Any:
        return open_provider(self.conf).state(namespace(component, self.tasks[component].index(task)))

    def position(self) -> int:
        return min(int(self.state("sentences", t).get("position", 0)) for t in self.tasks["sentences"])

    def txids(self, component: str) -> list[int]:
        return [self.state(component, t).committed_txid() or -1 for t in self.tasks[component]]

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tasks["count"]:
            for word, n in self.state("count", t):
                assert word not in out, f"{word} in two count tasks"
                out[word] = n
        return out


def test_stateful_wordcount_with_redis_exact_after_a_worker_pod_is_deleted(examples: Examples) -> None:
    e = examples
    example = _module(STATEFUL / "stateful_wordcount.py")
    # Redis as the example's README says: its manifest applied in the topology's namespace
    e.kubectl("apply", "-f", str(STATEFUL / "redis.yaml"))
    (redis,) = wait_for(lambda: [p for p in e.get("pods", "-l", "app.kubernetes.io/name=redis")["items"]
                                 if _ready(p)], 120, what="Redis Ready")
    assert redis["spec"]["containers"][0]["image"] == "redis:7.0"
    limit = 3000
    doc = yaml.safe_load((STATEFUL / "topology.yaml").read_text())
    cfg = doc["spec"]["config"]
    assert cfg["topology.state.provider.config"]["host"] == "localhost"
    cfg["topology.state.provider.config"]["host"] = "redis"  # the Service of redis.yaml
    cfg.update({"wordcount.limit": limit, "wordcount.rate": 100})  # a finite input, about 30 s of it
    doc["spec"]["messageTimeoutSecs"] = 10  # a checkpoint lost with the worker fails within 10 s
    e.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    name = doc["metadata"]["name"]
    t0 = time.monotonic()
    wait_for(lambda: e.running(name, 2), 240, interval=2, what=f"{name} Running 2/2")
    print(f"{name} Running 2/2 in {time.monotonic() - t0:.1f}s")
    committed = Committed(doc, redis["status"]["podIP"])

    wait_for(lambda: committed.position() >= 500, 120, interval=0.5, what="a few committed checkpoints")
    before = committed.position()
    assert before < limit - 1000, "the input was read before the pod's deletion; slow the spout down"
    victim = sorted(e.workers(name), key=lambda p: p["spec"]["nodeName"])[-1]
    print(f"deleting {victim['metadata']['name']} on {victim['spec']['nodeName']} at position {before}")
    e.kubectl("delete", "pod", victim["metadata"]["name"], "--wait=false")

    def replaced() -> bool:
        live = e.workers(name, live=True)
        return (len(live) == 2 and victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in live}
                and all(_ready(p) for p in live) and e.running(name, 2) is not None)

    wait_for(replaced, 240, interval=1, what="the deleted worker pod replaced and Running 2/2")
    # the checkpoint holding the whole input, then every counter committed it
    wait_for(lambda: committed.position() >= limit, 240, interval=1,
             what=f"the spout's committed position to reach {limit}")
    final = min(committed.txids("sentences"))
    wait_for(lambda: min(committed.txids("count")) >= final, 120, interval=0.5,
             what=f"every counter to commit txid {final}")
    totals = committed.totals()
    expected = example.expected_counts(limit)
    assert totals == expected, {w: (totals.get(w), expected.get(w)) for w in set(totals) | set(expected)
                                if totals.get(w) != expected.get(w)}
    print(f"totals exact after the pod's replacement: {sum(totals.values())} words")

    # every counter committed the whole input above: no kill wait (messageTimeoutSecs 10 here)
    e.no_kill_wait(name)
    e.kubectl("delete", "topology", name, "--timeout=150s", timeout=180)
    wait_for(lambda: not e.workers(name), 120, what="the worker pods gone")
    assert committed.totals() == expected  # the state outlives the topology, in Redis
    e.kubectl("delete", "-f", str(STATEFUL / "redis.yaml"), "--wait=false")


def _read_topic(bootstrap: str, topic: str, timeout: float = 30) -> list[Any]:
    """Every record of `topic` up to its end as of now."""
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        todo = {p for p, end in ends.items() if end > 0}
        c.assign([TopicPartition(topic, p, -2) for p in todo])  # -2: from the beginning
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    out.append(m)
                    if m.offset() + 1 >= ends[m.partition()]:
                        todo.discard(m.partition())
        assert not todo, f"could not read {topic} to its end in {timeout}s"
        return out
    finally:
        c.close()


def test_kafka_clicks_from_the_example_manifest(examples: Examples) -> None:
    import json

    e = examples
    clicks_mod = _module(KAFKA_CLICKS / "kafka_clicks.py")
    file = KAFKA_CLICKS / "k8s.yaml"
    docs = list(yaml.safe_load_all(file.read_text()))
    topo = next(d for d in docs if d["kind"] == "Topology")
    # the manifest's topology is the local one's with the broker's Service name
    local = yaml.safe_load((KAFKA_CLICKS / "topology.yaml").read_text())
    assert yaml.safe_dump(topo).replace("kafka:9092", "127.0.0.1:9092") == yaml.safe_dump(local)
    window = next(b for b in topo["spec"]["bolts"] if b["name"] == "count")["window"]
    length, lag = (float(window[k].rstrip("s")) for k in ("windowLength", "lag"))
    name = topo["metadata"]["name"]

    e.kubectl("apply", "-f", str(file))
    t0 = time.monotonic()
    try:
        (kafka,) = wait_for(lambda: [p for p in e.get("pods", "-l", "app.kubernetes.io/name=kafka")["items"]
                                     if _ready(p)], 300, interval=2, what="Kafka Ready")
    except BaseException:
        for args in (("describe", "pods", "-l", "app.kubernetes.io/name=kafka"),
                     ("logs", "-l", "app.kubernetes.io/name=kafka", "--tail=60"),
                     ("logs", "-l", "app.kubernetes.io/name=kafka", "--previous", "--tail=60")):
            print(f"--- kubectl {' '.join(args)}\n" + e.kubectl(*args, check=False).stdout[-5000:])
        raise
    print(f"Kafka Ready in {time.monotonic() - t0:.1f}s")
    container = kafka["spec"]["containers"][0]
    assert container["image"] == "squall-kafka:4.1.1"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    uid = e.kubectl("exec", kafka["metadata"]["name"], "--", "id", "-u").stdout.strip()
    assert uid == "1000", uid
    # this machine reaches the pod's address: the broker's second listener, advertised by it
    bootstrap = f"{kafka['status']['podIP']}:9094"

    def topics() -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        except KafkaException:  # not answering yet
            return False
        return {"clicks", "click-counts", "clicks-late", "clicks-dlq"} <= set(md.topics) \
            and len(md.topics["clicks"].partitions) == 3

    wait_for(topics, 120, interval=1, what="the example's topics on the broker")
    wait_for(lambda: e.running(name, 2), 240, interval=2, what=f"{name} Running 2/2")
    print(f"{name} Running 2/2 in {time.monotonic() - t0:.1f}s")

    sys.path.insert(0, str(KAFKA_CLICKS))  # produce.py imports kafka_clicks from its folder
    try:
        produce = _module(KAFKA_CLICKS / "produce.py")
    finally:
        sys.path.remove(str(KAFKA_CLICKS))
    sent = produce.produce(bootstrap, "clicks", rate=100, seconds=32, seed=26)
    clicks = [json.loads(m.value()) for m in _read_topic(bootstrap, "clicks")]
    assert len(clicks) == len(sent)
    sections = clicks_mod.load_sections()
    expected = produce.recount(clicks, length, sections)
    last_ts = max(c["ts"] for c in clicks)
    closed = {end for _, end in expected if end <= last_ts - lag - 1}
    assert len(closed) >= 2, sorted(closed)
    want = {k: n for k, n in expected.items() if k[1] in closed}

    def counted() -> dict[tuple[str, float], int]:
        total: dict[tuple[str, float], int] = {}
        seen: dict[tuple[str, float], dict[str, Any]] = {}
        for m in _read_topic(bootstrap, "click-counts"):
            v = json.loads(m.value())
            key = (v["section"], v["window_end"])
            assert seen.setdefault(key, v) == v, (seen[key], v)  # a record written twice is the same
            total[key] = v["clicks"]
        for m in _read_topic(bootstrap, "clicks-late"):
            section, _user, _page, ts = json.loads(m.value())
            key = (section, clicks_mod.window_of(ts, length)[1])
            total[key] = total.get(key, 0) + 1
        return {k: n for k, n in total.items() if k[1] in closed}

    try:
        wait_for(lambda: counted() == want, 120, interval=2, what=f"the counts of {len(closed)} closed windows")
    except BaseException:
        print(f"expected {want}\ngot {counted()}\n--- workers ---\n{e.logs(name)[-6000:]}")
        raise
    late = len(_read_topic(bootstrap, "clicks-late"))
    # every closed window was counted by the window bolt (how many clicks come behind the lag
    # depends on the nodes' load, not on the code: they are counted above, in clicks-late)
    emitted = {json.loads(m.value())["window_end"] for m in _read_topic(bootstrap, "click-counts")}
    assert closed <= emitted, (sorted(closed), sorted(emitted))
    print(f"{len(clicks)} clicks, {len(want)} (section, window) counts exact over {len(closed)} windows, {late} late")

    e.delete_file(file, name)
    wait_for(lambda: not e.workers(name), 120, what="the kafka-clicks worker pods gone")
