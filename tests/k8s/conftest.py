"""Fixtures for the Kubernetes acceptance tests (marker `k8s`).

`k8s_cluster` starts one control plane and a 3-node process kubelet for the
whole session (only when a test asks for it) and, at the end, checks that no
process of it is left. `real_cluster` starts one with 2 real nodes (real
kubelets over containerd, kube-proxy, CoreDNS; realnode.py) running the
images of scripts/k8s-images, and checks at the end that no process, mount,
network namespace or cgroup of it is left. Before the first test, when a test
uses `real_cluster`, scripts/k8s-images runs (outside any test's timeout): it
rebuilds any image whose inputs (this checkout's sources, Dockerfiles, bases)
changed and takes seconds when none did, so a stale image is never tested. If
the binaries are not built the tests FAIL with
how to build them: run scripts/k8s-build first.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from childproc import die_with_this_process

from .cluster import REPO, Cluster, find_bin_dir
from .realnode import RealNodeCluster, images_dir, missing_prerequisites


def wait_for(fn: Callable[[], Any], timeout: float = 60, interval: float = 0.3, what: str = "condition") -> Any:
    """Calls fn until it returns something truthy; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
            if last:
                return last
        except (subprocess.CalledProcessError, KeyError, IndexError, OSError) as e:
            last = e
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def _descendants(pid: int) -> list[int]:
    """Every live process whose ancestry leads to pid."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z":
            continue
        parents[int(d.name)] = int(fields[1])
    out = []
    for p in parents:
        q = p
        while q > 1 and q in parents:
            q = parents[q]
            if q == pid:
                out.append(p)
                break
    return out


def _processes_mentioning(text: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


@pytest.fixture(scope="session")
def k8s_bin() -> Path:
    try:
        return find_bin_dir()
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def k8s_cluster(k8s_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    before = set(_descendants(os.getpid()))
    workdir = tmp_path_factory.mktemp("k8s")
    cluster = Cluster(k8s_bin, workdir, nodes=3)
    cluster.start(timeout=240)
    try:
        yield cluster
    finally:
        cluster.stop()
        time.sleep(0.5)
        stray = _left_behind(before, workdir)
        assert not stray, f"processes left after the cluster stopped: {stray}"


def _left_behind(before: set[int], workdir: Path) -> list[int]:
    """This session's processes that were not there when the cluster started, and any process
    naming its folder, still there a second later: the other cluster of the session (a session
    that starts the real nodes before the process kubelet) keeps starting short-lived processes of
    its own (its kubelets' exec probes, runc), which are not this cluster's leftovers."""
    def now() -> set[int]:
        return {p for p in _descendants(os.getpid()) if p not in before} | set(_processes_mentioning(str(workdir)))

    first = now()
    if not first:
        return []
    time.sleep(1.0)
    return sorted(first & now())


def refresh_images(log: Path) -> tuple[float, str]:
    """Runs scripts/k8s-images (images rebuilt only where their inputs changed; its own process
    group, killed with it if this is interrupted; the script itself dies with this process).
    Returns the seconds it took and, if it failed, why (the end of its log)."""
    t0 = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.Popen([str(REPO / "scripts" / "k8s-images")], stdout=subprocess.DEVNULL, stderr=f,
                             start_new_session=True, preexec_fn=die_with_this_process())
        try:
            rc = p.wait()
        except BaseException:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()
            raise
    took = time.monotonic() - t0
    return took, "" if rc == 0 else f"scripts/k8s-images failed ({rc}):\n{log.read_text()[-4000:]}"


_images: dict[str, Any] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    """scripts/k8s-images runs here, before the first test, when a collected test uses the
    real-node cluster: a cold build takes minutes, more than one test's timeout."""
    if session.config.option.collectonly or not any(
            "real_cluster" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    log = session.config._tmp_path_factory.mktemp("k8s-images") / "k8s-images.log"  # type: ignore[attr-defined]
    _images["took"], _images["error"] = refresh_images(log)
    print(f"\nscripts/k8s-images: {_images['took']:.1f}s (log: {log})")


@pytest.fixture(scope="session")
def real_cluster(k8s_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNodeCluster]:
    """The control plane with 2 real nodes (node-1, node-2), for the whole session, running the
    images of this checkout (scripts/k8s-images first)."""
    if _images.get("error"):
        pytest.fail(_images["error"], pytrace=False)
    missing = missing_prerequisites(k8s_bin, images_dir())
    if missing:
        pytest.fail("the real-node cluster needs: " + "; ".join(missing), pytrace=False)
    before = set(_descendants(os.getpid()))
    netns_before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    workdir = tmp_path_factory.mktemp("k8s-real")
    cluster = RealNodeCluster(k8s_bin, workdir, nodes=2)
    cluster.start(timeout=300)
    cgroups = [n.cgroup_root for n in cluster.nodes.values()]
    try:
        yield cluster
    finally:
        cluster.stop()
        time.sleep(0.5)
        stray = _left_behind(before, workdir)
        assert not stray, f"processes left after the cluster stopped: {stray}"
        mounts = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()
                  if ln.split()[4].startswith(str(workdir))]
        assert not mounts, f"mounts left after the cluster stopped: {mounts}"
        netns_after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        assert not netns_after - netns_before, f"network namespaces left: {netns_after - netns_before}"
        left = [str(p) for c in cgroups for p in Path("/sys/fs/cgroup").glob("*" + c) if p.exists()]
        assert not left, f"cgroups left: {left}"


# --- chart releases shared by several modules ------------------------------------------------------
#
# Installing the chart and waiting for its ZooKeeper and operator takes a minute or two on 2 cores,
# and as much again to tear it down; the modules that need the same release share one. `squall`
# (release `squall` in namespace squall-e2e, on the process-kubelet cluster: test_operator_e2e.py)
# and `release` (release `squall` in namespace squall-real, on the real nodes, the word count's
# image: test_chart_real_nodes.py) are session fixtures, installed by the first test that asks
# and uninstalled right after the last one: the tests that use one are run one after the other
# (at the first one's place, each module's order kept), so no release stays installed beside the
# next modules' own ones. Each user leaves no topology of its own behind.
SHARED_RELEASES = ("squall", "release")
_installed: dict[str, contextlib.ExitStack] = {}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for name in SHARED_RELEASES:
        users = [i for i in items if name in getattr(i, "fixturenames", ())]
        if not users:
            continue
        at = items.index(users[0])
        rest = [i for i in items if name not in getattr(i, "fixturenames", ())]
        items[:] = rest[:at] + users + rest[at:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    for name in SHARED_RELEASES:
        if name in _installed and (nextitem is None or name not in getattr(nextitem, "fixturenames", ())):
            _installed.pop(name).close()


def _shared(name: str, release: contextlib.AbstractContextManager[Any]) -> Iterator[Any]:
    stack = contextlib.ExitStack()
    _installed[name] = stack
    try:
        yield stack.enter_context(release)
    finally:  # after a failed setup, or an interrupted session
        if _installed.get(name) is stack:
            _installed.pop(name).close()


@pytest.fixture(scope="session")
def squall(k8s_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The chart installed as release `squall` in namespace squall-e2e (test_operator_e2e.e2e_release)."""
    from .test_operator_e2e import e2e_release

    yield from _shared("squall", e2e_release(k8s_cluster, tmp_path_factory.mktemp("squall-e2e")))


@pytest.fixture(scope="session")
def release(real_cluster: RealNodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The chart on the real nodes, namespace squall-real (test_chart_real_nodes.real_release)."""
    from .test_chart_real_nodes import real_release

    yield from _shared("release", real_release(real_cluster, tmp_path_factory.mktemp("chart-real")))


_ns_counter = itertools.count(1)


def _namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t{next(_ns_counter)}-{request.node.name.lower().replace('_', '-')}"[:50].rstrip("-")
    cluster.kubectl("create", "namespace", name)
    wait_for(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
             30, what=f"the default service account in {name}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def ns(k8s_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (not waited for)."""
    yield from _namespace(k8s_cluster, request)


@pytest.fixture
def real_ns(real_cluster: RealNodeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on the real-node cluster, deleted afterwards (not waited for)."""
    yield from _namespace(real_cluster, request)


def kget(cluster: Cluster, *args: str) -> Any:
    """kubectl get ... -o json, parsed."""
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def apply(cluster: Cluster, manifest: str, namespace: str) -> str:
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=manifest).stdout


CHART = REPO / "helm" / "squall"


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(x["type"] == "Ready" and x["status"] == "True" for x in pod["status"].get("conditions", []))


def _local_pv(cluster: RealNodeCluster, namespace: str) -> str:
    """A StorageClass `<namespace>-local` with one static local PersistentVolume `<namespace>-zk`
    (1 Gi, a folder of node-1 owned by the zookeeper image's user) for ZooKeeper's claim."""
    sc = f"{namespace}-local"
    pvdir = cluster.nodes["node-1"].dir / f"pv-{namespace}"
    pvdir.mkdir(parents=True)
    os.chown(pvdir, 1000, 1000)  # the zookeeper image's user
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": sc},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}))
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-zk"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                 "local": {"path": str(pvdir)},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}}}))
    return sc


@contextlib.contextmanager
def chart_release(cluster: Cluster, namespace: str, *sets: str, values: Path | None = None,
                  local_pv: bool = False, before_install: Callable[[], object] | None = None,
                  helm_wait: bool = False, operator_log: Callable[[], str] | None = None) -> Iterator[str]:
    """helm/squall installed as release `squall` in a new `namespace`, torn down on leaving the
    block, whether it ends normally or by an error (the install's included).

    `sets` are `--set` arguments and `values` a values file (worker pods request no CPU here,
    as before the chart's default of one CPU each: the test nodes have 2). `local_pv` (real nodes only) serves
    ZooKeeper's volume from a static local PersistentVolume on node-1 (its StorageClass is set as
    `zookeeper.persistence.storageClass`). `before_install` runs once the namespace exists (e.g.
    to create ConfigMaps). With `helm_wait` the install waits (`helm --wait`, 180 s) for the
    release's resources; without it, for the ZooKeeper and operator pods to be Ready (180 s each).
    Yields the namespace.

    Teardown, in order: prints the end of the operator's log (`operator_log`, by default
    `kubectl logs deploy/squall-operator`), deletes the topologies left with no kill wait (the
    `squall.io/kill-wait-secs` annotation of `kubectl squall kill -w 0`) and waits up to 90 s for
    their finalizers, `helm uninstall --wait`, drops the finalizers of any topology still there
    (they would block the namespace), deletes the namespace (not waited for) and the volume."""
    cluster.kubectl("create", "namespace", namespace)
    sc = ""

    def kubectl(*args: str, **kw: Any) -> Any:
        return cluster.kubectl("-n", namespace, *args, **kw)

    def topologies(crd: bool) -> list[dict[str, Any]]:
        return kget(cluster, "topologies", "-n", namespace).get("items", []) if crd else []

    try:
        if local_pv:
            assert isinstance(cluster, RealNodeCluster), "a local PersistentVolume needs the real nodes"
            sc = _local_pv(cluster, namespace)
        if before_install is not None:
            before_install()
        # the test nodes have 2 CPUs and run several workers each: no CPU request per worker
        # (the chart's default is one CPU, docs/operator.md "Sizing workers"); a test's own
        # worker.resources in `sets` comes later and wins
        args = [a for s in ("worker.resources=null", *sets) for a in ("--set", s)]
        if sc:
            args += ["--set", f"zookeeper.persistence.storageClass={sc}"]
        if values is not None:
            args += ["-f", str(values)]
        t0 = time.monotonic()
        if helm_wait:
            out = cluster.helm("install", "squall", str(CHART), "-n", namespace, *args,
                               "--wait", "--timeout", "180s", timeout=200)
            assert "STATUS: deployed" in out.stdout, out.stdout + out.stderr
        else:
            cluster.helm("install", "squall", str(CHART), "-n", namespace, *args, timeout=180)
            def ready(component: str) -> list[dict[str, Any]]:
                pods = kget(cluster, "pods", "-n", namespace, "-l", f"app.kubernetes.io/component={component}")
                return [p for p in pods["items"] if pod_ready(p)]

            wait_for(lambda: ready("zookeeper"), 180, what="ZooKeeper Ready")
            wait_for(lambda: ready("operator"), 180, what="the operator Ready")
        print(f"release installed and Ready in {time.monotonic() - t0:.1f}s")
        yield namespace
    finally:
        crd = cluster.kubectl("get", "crd", "topologies.squall.io", check=False).returncode == 0
        try:
            text = operator_log() if operator_log is not None else kubectl(
                "logs", "deploy/squall-operator", "--tail=80", check=False).stdout
            print("---- operator log (tail) ----\n" + text[-8000:])
        except Exception as exc:  # diagnostics only
            print(f"no operator log: {exc}")
        for t in topologies(crd):
            # the tests are over: killed with no wait (what `kubectl squall kill -w 0` asks), not
            # after each topology's killWaitSecs (30 s by default), which every teardown paid
            kubectl("annotate", "topology", t["metadata"]["name"], "--overwrite", "squall.io/kill-wait-secs=0",
                    check=False)
            kubectl("delete", "topology", t["metadata"]["name"], "--wait=false", check=False)
        deadline = time.monotonic() + 90
        while crd and time.monotonic() < deadline and topologies(crd):
            time.sleep(1)
        cluster.helm("uninstall", "squall", "-n", namespace, "--wait", "--timeout", "60s", check=False, timeout=90)
        for t in topologies(crd):  # finalizers would block the namespace
            kubectl("patch", "topology", t["metadata"]["name"], "--type=merge",
                    "-p", '{"metadata":{"finalizers":[]}}', check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        if sc:
            cluster.kubectl("delete", "pv", f"{namespace}-zk", "--wait=false", check=False)
            cluster.kubectl("delete", "storageclass", sc, "--wait=false", check=False)


def container_pid(pod: dict[str, Any], index: int = 0) -> int:
    cid = pod["status"]["containerStatuses"][index].get("containerID", "")
    assert cid.startswith("process://"), cid
    return int(cid[len("process://"):])


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def assert_refused_alike(c: Cluster, ns: str, doc: dict[str, Any], path: str, what: str) -> None:
    """One file, one meaning: the API server (`kubectl apply --dry-run=server`) and `squall
    validate`'s parser both refuse `doc`, each naming `path`."""
    import yaml

    from squall.errors import TopologyError
    from squall.validation import parse_topology

    wrong = yaml.safe_dump(doc)
    r = c.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=wrong, check=False)
    assert r.returncode != 0, f"the API server accepted {what}"
    assert path in r.stderr, (path, r.stderr)
    with pytest.raises(TopologyError) as info:
        parse_topology(wrong)
    assert path in {p.path for p in info.value.problems}, str(info.value)
