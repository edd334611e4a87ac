"""The images scripts/k8s-images builds, run with buildah (real containers,
no network): what each carries and how it starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from childproc import die_with_this_process

pytestmark = pytest.mark.k8s

VERSION = "0.1.0"
OPERATOR = f"localhost/squall-operator:{VERSION}"
WORKER = f"localhost/squall-worker:{VERSION}"
WORKER_SPARK = f"localhost/squall-worker-spark:{VERSION}"
WORDCOUNT = f"localhost/squall-wordcount:{VERSION}"
ZOOKEEPER = "docker.io/library/zookeeper:3.9"
BASE = "docker.io/library/python:3.11-slim-bookworm"


def images_dir() -> Path:
    """Where scripts/k8s-images keeps its keys and the real nodes' image store."""
    return Path(os.environ.get("SQUALL_K8S_CACHE") or Path.home() / ".cache" / "squall-k8s") / "images"


def buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["buildah", *args], capture_output=True, text=True, check=check, timeout=300)


@pytest.fixture(scope="module")
def images() -> dict[str, dict[str, object]]:
    if shutil.which("buildah") is None:
        pytest.fail("buildah is missing: run scripts/k8s-images", pytrace=False)
    out = {}
    for name in (BASE, OPERATOR, WORKER, WORKER_SPARK, WORDCOUNT, ZOOKEEPER):
        r = buildah("inspect", "--type", "image", name, check=False)
        if r.returncode != 0:
            pytest.fail(f"image {name} is not built: run scripts/k8s-images", pytrace=False)
        out[name] = json.loads(r.stdout)
    return out


@pytest.fixture
def run(images: dict[str, dict[str, object]]) -> Iterator[object]:
    made: list[str] = []

    def run_in(image: str, *cmd: str, user: str = "") -> subprocess.CompletedProcess[str]:
        c = buildah("from", "--pull=never", image).stdout.strip()
        made.append(c)
        argv = ["run", "--network", "none"]
        if user:
            argv += ["--user", user]
        return buildah(*argv, c, "--", *cmd, check=False)

    yield run_in
    for c in made:
        buildah("rm", c, check=False)


def config(images: dict[str, dict[str, object]], name: str) -> dict[str, object]:
    return images[name]["OCIv1"]["config"]  # type: ignore[index, no-any-return]


def size(images: dict[str, dict[str, object]], name: str) -> int:
    """Bytes of an image's layers (uncompressed, as buildah stores them)."""
    return sum(layer["size"] for layer in json.loads(images[name]["Manifest"])["layers"])  # type: ignore[arg-type]


def test_images_run_as_non_root_with_their_entrypoints(images: dict[str, dict[str, object]]) -> None:
    assert config(images, OPERATOR)["User"] == "10001:10001"
    assert config(images, OPERATOR)["Entrypoint"] == ["squall"]
    assert config(images, OPERATOR)["Cmd"] == ["operator"]
    assert config(images, WORKER)["User"] == "10001:10001"
    for name in (WORKER, WORKER_SPARK):
        assert config(images, name)["User"] == "10001:10001"
        assert config(images, name)["Entrypoint"] == ["/usr/bin/tini", "--", "python", "-m", "squall.worker"]
    assert config(images, WORDCOUNT)["User"] == "10001:10001"
    assert config(images, ZOOKEEPER)["User"] == "1000:1000"
    for name in (OPERATOR, WORKER, WORKER_SPARK, WORDCOUNT, ZOOKEEPER):
        assert "PYTHONPATH=/app" in config(images, name)["Env"]  # type: ignore[operator]
    # each built from the inputs recorded in its key; those the nodes run in their image store
    for n in ("base", "pause", "operator", "worker", "worker-spark", "wordcount", "zookeeper"):
        assert (images_dir() / f"{n}.key").read_text().strip(), n
    assert (images_dir() / "containerd" / "root" / "io.containerd.metadata.v1.bolt" / "meta.db").exists()


def test_operator_image_has_no_spark(run) -> None:  # type: ignore[no-untyped-def]
    r = run(OPERATOR, "python", "-c", "import importlib.util as u; print(u.find_spec('pyspark'))", user="10001")
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stderr
    r = run(OPERATOR, "python", "-c", "import squall.spark", user="10001")
    assert r.returncode != 0 and "pip install 'squall[spark]'" in r.stderr, r.stderr
    r = run(OPERATOR, "squall", "--help", user="10001")
    assert r.returncode == 0 and "operator" in r.stdout, r.stderr


def test_worker_image_has_no_spark_nor_java(run, images) -> None:  # type: ignore[no-untyped-def]
    """The default worker image: the worker and the Kafka client, no PySpark and no JRE (a node
    pulls those only for topologies with Spark components, on squall-worker-spark)."""
    r = run(WORKER, "python", "-c", "import squall.worker, confluent_kafka, importlib.util as u; "
            "print(u.find_spec('pyspark'), u.find_spec('pyarrow'))", user="10001")
    assert r.returncode == 0 and r.stdout.split() == ["None", "None"], r.stderr
    r = run(WORKER, "python", "-c", "import squall.spark", user="10001")
    assert r.returncode != 0 and "pip install 'squall[spark]'" in r.stderr, r.stderr
    r = run(WORKER, "sh", "-c", "command -v java; ls /opt/java 2>/dev/null; true", user="10001")
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout
    # and the smaller by the JRE and PySpark's jars: under half the Spark one
    assert 2 * size(images, WORKER) < size(images, WORKER_SPARK), (size(images, WORKER), size(images, WORKER_SPARK))


def test_worker_spark_image_has_spark_and_java(run) -> None:  # type: ignore[no-untyped-def]
    r = run(WORKER_SPARK, "python", "-c", "import squall.spark, squall.worker, pyspark; print(pyspark.__version__)",
            user="10001")
    assert r.returncode == 0 and r.stdout.strip().startswith("4."), r.stderr
    r = run(WORKER_SPARK, "/opt/java/bin/java", "-version", user="10001")
    assert r.returncode == 0 and "17." in r.stderr, r.stderr


def test_wordcount_image_carries_the_example(run) -> None:  # type: ignore[no-untyped-def]
    r = run(WORDCOUNT, "python", "-c", "import wordcount; print(wordcount.__file__, wordcount.SentenceSpout.__name__)",
            user="10001")
    assert r.returncode == 0 and r.stdout.split() == ["/app/wordcount.py", "SentenceSpout"], r.stderr


def test_runtime_images_are_lean(run) -> None:  # type: ignore[no-untyped-def]
    for image in (OPERATOR, WORKER, WORKER_SPARK):
        r = run(image, "sh", "-c", "command -v gcc cc make; ls /root/.cache /var/lib/apt/lists/*_Packages 2>/dev/null; "
                "ls /src 2>/dev/null; true")
        assert r.returncode == 0 and r.stdout.strip() == "", (image, r.stdout)


def test_base_is_debian_bookworm_python_311(run) -> None:  # type: ignore[no-untyped-def]
    r = run(BASE, "python", "-c", "import sys, platform; print(sys.version_info[:2], platform.freedesktop_os_release()['VERSION_CODENAME'])")
    assert r.returncode == 0 and r.stdout.strip() == "(3, 11) bookworm", r.stderr


REPO = Path(__file__).resolve().parents[2]


def test_an_image_rebuilt_on_a_shared_layer_is_imported_every_time() -> None:
    """An image rebuilt on layers its old build shares (the base, a cached pip
    layer) is imported into the nodes' store every time. Imported straight
    under its name, the shared layers lose their last reference when the name
    moves, and containerd's collector can take one in the middle of the unpack
    ("parent snapshot ... does not exist": a CI run failed so, and about one
    import in 25 of these two images did). Two small images on one shared
    layer, imported alternately under one name, 150 times, in one store."""
    work = Path(tempfile.mkdtemp(prefix="sq-imp-", dir="/tmp"))  # a short path: unix sockets
    made: list[str] = []
    try:
        for n, size in (("shared", 300_000), ("a", 100_000), ("b", 100_000)):
            (work / n).write_bytes(os.urandom(size))
        c = buildah("from", "scratch").stdout.strip()
        buildah("copy", "--quiet", c, str(work / "shared"), "/shared")
        base = buildah("commit", "--quiet", "--rm", c).stdout.strip()
        made.append(base)
        ids = []
        for top in ("a", "b"):
            c = buildah("from", "--pull=never", base).stdout.strip()
            buildah("copy", "--quiet", c, str(work / top), "/top")
            ids.append(buildah("commit", "--quiet", "--rm", c).stdout.strip())
            made.append(ids[-1])
        pairs = [arg for i in range(150) for arg in (ids[i % 2], "squall-race:1")]
        env = {**os.environ, "SQUALL_K8S_CACHE": str(work / "cache")}
        r = subprocess.run([str(REPO / "scripts" / "k8s-images"), "--import", *pairs], env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        # not even the retry was needed
        assert "import failed" not in r.stderr, r.stderr[-3000:]

        store = work / "cache" / "images" / "containerd"
        d = subprocess.Popen(["containerd", "--config", str(store / "config.toml"), "--log-level", "error"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_this_process())
        try:
            ctr = ["ctr", "--address", str(store / "containerd.sock"), "--namespace", "k8s.io"]
            for _ in range(150):
                if subprocess.run([*ctr, "version"], capture_output=True, timeout=10).returncode == 0:
                    break
                time.sleep(0.2)
            check = subprocess.run([*ctr, "images", "check"], capture_output=True, text=True, timeout=60,
                                   check=True).stdout.splitlines()[1:]
            # only the real name (no temporary one left), complete and unpacked, the last image imported
            assert [(line.split()[0], line.split()[-1]) for line in check] == [("docker.io/library/squall-race:1", "true")]
            manifest = json.loads(subprocess.run([*ctr, "content", "get", check[0].split()[2]], capture_output=True,
                                                 check=True, timeout=60).stdout)
            assert manifest["config"]["digest"] == "sha256:" + buildah(
                "inspect", "--type", "image", "--format", "{{.FromImageID}}", ids[1]).stdout.strip()
        finally:
            d.terminate()
            d.wait(timeout=30)
    finally:
        for image in reversed(made):
            buildah("rmi", image, check=False)
        shutil.rmtree(work, ignore_errors=True)


NODE_BOLT = """\
var storm = require('./storm');
function Upper() { storm.BasicBolt.call(this); }
Upper.prototype = Object.create(storm.BasicBolt.prototype);
Upper.prototype.constructor = Upper;
Upper.prototype.process = function(tup, done) {
    this.emit({tuple: [tup.values[0].toUpperCase(), process.version], anchorTupleId: tup.id}, function(ids) {});
    done();
};
new Upper().run();
"""

# A ShellBolt of the image's squall on `node` and the image's storm.js, driven as the protocol
# tests drive one (tests/integration/test_multilang_protocol.py): a tuple in, the child's emit
# and ack back
NODE_DRIVER = """\
import json, os, sys, tempfile
from squall.multilang import ShellBolt
from squall.tuples import Tuple
d = tempfile.mkdtemp()
with open(os.path.join(d, "upper.js"), "w") as f:
    f.write(sys.argv[1])
sys.path.insert(0, d)
class Context:
    topology_id, task_id, component_id, worker_port = "t", 7, "upper", 0
    def task_to_component(self): return {7: "upper"}
    def this_streams(self): return ["default"]
    def output_fields(self, stream="default"): return ["word", "node"]
calls = []
class Collector:
    def emit(self, values, stream="default", anchors=None):
        calls.append(["emit", values, [a.values for a in anchors or ()]]); return [9]
    def ack(self, tup): calls.append(["ack", tup.values])
    def fail(self, tup): calls.append(["fail", tup.values])
    def report_error(self, exc): calls.append(["error", str(exc)])
b = ShellBolt()
b.prepare({"squall.multilang.shell": {"command": ["node", "upper.js"], "files": ["upper.js"]}}, Context(), Collector())
try:
    b.execute(Tuple(["hi"], 3, "src", "default", {}, None))
finally:
    b.cleanup()
print(json.dumps(calls))
"""


def test_worker_image_runs_a_node_shell_bolt_on_storm_js(run, images) -> None:  # type: ignore[no-untyped-def]
    """The default worker image runs a JavaScript bolt as it is: Bookworm's Node.js and Storm's
    adapters (from Maven Central, at SQUALL_MULTILANG_DIR) are in it."""
    r = run(WORKER, "python", "-m", "squall.multilang.adapters", user="10001")
    assert r.returncode == 0 and r.stdout.split() == [f"/opt/squall-multilang/storm.{e}" for e in ("js", "py", "rb")], \
        r.stdout + r.stderr
    r = run(WORKER, "python", "-c", NODE_DRIVER, NODE_BOLT, user="10001")
    assert r.returncode == 0, r.stderr[-3000:]
    (emit, ack) = json.loads(r.stdout.strip().splitlines()[-1])
    assert emit[0] == "emit" and emit[1][0] == "HI" and emit[1][1].startswith("v18.") and emit[2] == [["hi"]], emit
    assert ack == ["ack", ["hi"]]
