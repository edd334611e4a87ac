"""A process kubelet: Kubernetes Nodes whose Pods run as local processes.

It registers N Nodes (node-1, node-2, ...; addresses 127.0.0.2, 127.0.0.3, ...)
with the API server, keeps them Ready (Lease renewals and status heartbeats),
and runs every Pod bound to them as local processes, one process group per
container:

* command/args with Kubernetes' rules (an image's entrypoint and cmd come
  from the image map), $(VAR) expansion, env (value, fieldRef, configMapKeyRef,
  secretKeyRef, resourceFieldRef, envFrom), workingDir;
* pod status: phase, podIP/hostIP (the node's address), container states,
  restartCount, the PodScheduled/Initialized/ContainersReady/Ready conditions;
* restartPolicy with a crash-loop back-off, init containers, exec/tcpSocket/
  httpGet readiness, liveness and startup probes;
* graceful deletion: SIGTERM to the process group, the grace period, SIGKILL,
  then the Pod object is removed;
* a service-account token (TokenRequest) and a kubeconfig per pod, in
  $KUBECONFIG, so in-pod clients use the pod's own RBAC;
* stdout/stderr in <root>/pods/<ns>_<pod>_<uid>/logs/<container>.log, also
  served to `kubectl logs` when the nodes have a serving certificate;
* Events (Started, Killing, Unhealthy, BackOff, Failed) for `kubectl describe`;
* fail_node(): the node stops its heartbeats and its processes are killed,
  as a failed machine would; restore_node() brings it back.

Every process is started in its own session with a parent-death signal
(SIGKILL), so none outlives the kubelet. It is a test tool: no isolation,
no volumes other than emptyDir/configMap/secret files in the pod folder (not
mounted at mountPath), no resource limits, no images.
"""

from __future__ import annotations

import base64
import copy
import ctypes
import datetime as dt
import http.client
import http.server
import json
import logging
import os
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from kubeapi import ApiError, KubeClient, load_kubeconfig  # type: ignore[no-redef]
else:
    from .kubeapi import ApiError, KubeClient, load_kubeconfig

log = logging.getLogger("squall.kubelet")

HERE = Path(__file__).resolve().parent
PY_BIN = str(Path(sys.executable).parent)

# image (repository without tag, or its last path component) -> how to run it.
#   entrypoint / cmd: the image's ENTRYPOINT and CMD (container.command
#     replaces entrypoint and drops cmd; container.args replaces cmd)
#   env: extra environment ($(VAR) expanded), path: folders put first on PATH
# Our own images (squall-operator, squall-worker) run the container's command
# with the venv's python first on PATH. Add entries with SQUALL_K8S_IMAGE_MAP
# (a JSON or YAML file) or the image_map argument.
DEFAULT_IMAGE_MAP: dict[str, dict[str, Any]] = {
    "python": {"cmd": ["python3"]},
    "busybox": {"cmd": ["sh"]},
    "alpine": {"cmd": ["sh"]},
    "debian": {"cmd": ["bash"]},
    "ubuntu": {"cmd": ["bash"]},
    "zookeeper": {"entrypoint": [sys.executable, str(HERE / "images" / "zookeeper.py")]},
    "squall-operator": {"cmd": ["squall", "operator"]},
    "squall-worker": {"cmd": ["python", "-m", "squall.worker"]},
}

INHERITED_ENV = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "JAVA_HOME", "TMPDIR",
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYTHONPATH",
)

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _child_setup() -> None:
    # runs in the child between fork and exec: die with the kubelet thread
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(s: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: $$ is a literal $, unknown names stay."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR.sub(sub, s)


def image_repo(image: str) -> str:
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref = ref[: len(ref) - len(last)] + last.split(":", 1)[0]
    return ref


def load_image_map(extra: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    m = copy.deepcopy(DEFAULT_IMAGE_MAP)
    path = os.environ.get("SQUALL_K8S_IMAGE_MAP")
    if path:
        import yaml

        with open(path) as f:
            m.update(yaml.safe_load(f) or {})
    if extra:
        m.update(extra)
    return m


def lookup_image(image_map: dict[str, dict[str, Any]], image: str) -> dict[str, Any] | None:
    repo = image_repo(image)
    candidates = [image, repo, repo.rsplit("/", 1)[-1]]
    if repo.startswith("docker.io/library/"):
        candidates.append(repo[len("docker.io/library/"):])
    for c in candidates:
        if c in image_map:
            return image_map[c]
    return None


def quantity(q: Any) -> str:
    return str(q)


class Node:
    def __init__(self, name: str, ip: str, labels: dict[str, str], capacity: dict[str, str]) -> None:
        self.name = name
        self.ip = ip
        self.labels = labels
        self.capacity = capacity
        self.failed = False
        self.uid = ""
        self.kubelet_port = 0
        self.server: http.server.ThreadingHTTPServer | None = None


class ContainerRun:
    """State of one container of a pod worker."""

    def __init__(self, spec: dict[str, Any], init: bool = False) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.init = init
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = ""
        self.restart_count = 0
        self.last_terminated: dict[str, Any] | None = None
        self.terminated: dict[str, Any] | None = None  # current state when not running
        self.waiting: tuple[str, str] | None = ("ContainerCreating", "")
        self.next_start = 0.0
        self.backoff = 0.0
        self.ready = False
        self.started = False  # startup probe passed (or none)
        self.probe_state: dict[str, dict[str, Any]] = {}
        self.env: dict[str, str] = {}
        self.argv: list[str] = []
        self.cwd = ""
        self.done = False  # will not run again

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class PodWorker(threading.Thread):
    def __init__(self, kubelet: "ProcessKubelet", node: Node, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.kl = kubelet
        self.node = node
        self.pod = pod
        self.ns: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stop_now = False  # kubelet shutting down or node failed: kill, no API
        self.deleted = False  # the object is gone: kill, no API
        self.dir = kubelet.root / "pods" / f"{self.ns}_{self.pod_name}_{self.uid[:8]}"
        self.log_dir = self.dir / "logs"
        spec = pod["spec"]
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        self.inits = [ContainerRun(c, init=True) for c in spec.get("initContainers") or []]
        self.containers = [ContainerRun(c) for c in spec.get("containers") or []]
        self.phase = "Pending"
        self.start_time = now()
        self.initialized = not self.inits
        self.last_status: Any = None
        self.base_env: dict[str, str] = {}
        # a pod that this kubelet ran before (node restored): carry restart counts
        prev = {s["name"]: s for s in (pod.get("status") or {}).get("containerStatuses") or []}
        for c in self.containers:
            if c.name in prev:
                c.restart_count = int(prev[c.name].get("restartCount", 0)) + (
                    1 if "running" in (prev[c.name].get("state") or {}) else 0
                )

    # -- called from the watch thread (and with API replies)
    def update(self, pod: dict[str, Any]) -> None:
        """Keeps the newest version of the object (resource versions are
        etcd revisions here, so they compare as numbers)."""
        with self.lock:
            try:
                older = int(pod["metadata"]["resourceVersion"]) < int(self.pod["metadata"]["resourceVersion"])
            except (KeyError, ValueError):
                older = False
            if not older:
                self.pod = pod
        self.wake.set()

    def deletion(self) -> tuple[bool, float]:
        with self.lock:
            meta = self.pod["metadata"]
            if not meta.get("deletionTimestamp"):
                return False, 0.0
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
            return True, float(grace)

    def kill(self) -> None:
        """Kill everything now, without API calls (node failure, shutdown)."""
        self.stop_now = True
        self.wake.set()

    # -- the worker thread
    def run(self) -> None:
        try:
            self._run()
        except Exception:  # pragma: no cover - logged for debugging
            log.exception("pod worker %s/%s failed", self.ns, self.pod_name)
            self._kill_all(signal.SIGKILL, 0)

    def _api(self, fn: Callable[[], Any]) -> Any:
        if self.stop_now or self.deleted or self.node.failed:
            return None
        try:
            return fn()
        except ApiError as e:
            if e.status == 404:
                self.deleted = True
            else:
                log.warning("pod %s/%s: %s", self.ns, self.pod_name, e)
        except OSError as e:
            log.warning("pod %s/%s: API unreachable: %s", self.ns, self.pod_name, e)
        return None

    def event(self, reason: str, message: str, typ: str = "Normal", container: str = "") -> None:
        """Posts a core/v1 Event about the pod, as the kubelet does (shown by
        `kubectl describe pod` and `kubectl get events`)."""
        ts = now()
        involved: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "namespace": self.ns,
                                    "name": self.pod_name, "uid": self.uid}
        if container:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{self.pod_name}.", "namespace": self.ns},
            "involvedObject": involved, "reason": reason, "message": message, "type": typ,
            "source": {"component": "kubelet", "host": self.node.name},
            "reportingComponent": "kubelet", "reportingInstance": self.node.name,
            "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
        }
        if self.stop_now or self.deleted or self.node.failed:
            return
        try:
            self.kl.client.create(f"/api/v1/namespaces/{self.ns}/events", body)
        except (ApiError, OSError) as e:  # e.g. the namespace is being deleted
            log.debug("event %s for %s/%s: %s", reason, self.ns, self.pod_name, e)

    def _run(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._prepare()
        self._report()
        while True:
            if self.stop_now or self.deleted or self.node.failed:
                self._kill_all(signal.SIGKILL, 0)
                return
            deleting, grace = self.deletion()
            if deleting:
                self._terminate(grace)
                return
            self._step()
            self._report()  # an API call only when the status changed
            if self.phase in ("Succeeded", "Failed"):
                self._report()
                # stay until the object is deleted, then remove it at once
                while not (self.stop_now or self.deleted or self.node.failed):
                    if self.deletion()[0]:
                        self._remove()
                        return
                    self.wake.wait(1.0)
                    self.wake.clear()
                return
            self.wake.wait(self.kl.tick)
            self.wake.clear()

    # preparation: folders, volumes, service account credentials
    def _prepare(self) -> None:
        spec = self.pod["spec"]
        vols = self.dir / "volumes"
        for v in spec.get("volumes") or []:
            d = vols / v["name"]
            d.mkdir(parents=True, exist_ok=True)
            try:
                if "configMap" in v:
                    cm = self.kl.client.get(f"/api/v1/namespaces/{self.ns}/configmaps/{v['configMap']['name']}")
                    for k, val in (cm.get("data") or {}).items():
                        (d / k).write_text(val)
                elif "secret" in v:
                    sec = self.kl.client.get(f"/api/v1/namespaces/{self.ns}/secrets/{v['secret']['secretName']}")
                    for k, val in (sec.get("data") or {}).items():
                        (d / k).write_bytes(base64.b64decode(val))
            except ApiError as e:
                log.warning("pod %s/%s volume %s: %s", self.ns, self.pod_name, v["name"], e)
        env = {k: os.environ[k] for k in self.kl.inherit_env if k in os.environ}
        env["PATH"] = os.pathsep.join([PY_BIN, *self.kl.extra_path, env.get("PATH", "/usr/local/bin:/usr/bin:/bin")])
        env.update(
            HOSTNAME=self.pod_name,
            HOME=str(self.dir),
            KUBERNETES_SERVICE_HOST=self.kl.client.cfg.host,
            KUBERNETES_SERVICE_PORT=str(self.kl.client.cfg.port),
            SQUALL_POD_IP=self.node.ip,
            SQUALL_NODE_NAME=self.node.name,
            SQUALL_POD_DIR=str(self.dir),
        )
        if spec.get("automountServiceAccountToken", True) and self.kl.ca_file:
            sa = spec.get("serviceAccountName") or "default"
            try:
                tr = self.kl.client.create(
                    f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token",
                    {
                        "apiVersion": "authentication.k8s.io/v1",
                        "kind": "TokenRequest",
                        "spec": {
                            "expirationSeconds": 86400,
                            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "uid": self.uid},
                        },
                    },
                )
                sadir = self.dir / "serviceaccount"
                sadir.mkdir(exist_ok=True)
                (sadir / "token").write_text(tr["status"]["token"])
                (sadir / "namespace").write_text(self.ns)
                (sadir / "ca.crt").write_bytes(Path(self.kl.ca_file).read_bytes())
                kc = {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {
                        "server": f"https://{self.kl.client.cfg.host}:{self.kl.client.cfg.port}",
                        "certificate-authority": str(sadir / "ca.crt")}}],
                    "users": [{"name": "u", "user": {"tokenFile": str(sadir / "token")}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": self.ns}}],
                    "current-context": "c",
                }
                (sadir / "kubeconfig").write_text(json.dumps(kc))
                env["KUBECONFIG"] = str(sadir / "kubeconfig")
                env["SQUALL_SERVICEACCOUNT_DIR"] = str(sadir)
            except ApiError as e:
                log.warning("pod %s/%s: no service account token: %s", self.ns, self.pod_name, e)
        self.base_env = env

    def _field(self, path: str) -> str:
        meta = self.pod["metadata"]
        simple = {
            "metadata.name": self.pod_name,
            "metadata.namespace": self.ns,
            "metadata.uid": self.uid,
            "spec.nodeName": self.node.name,
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": self.node.ip,
            "status.podIPs": self.node.ip,
            "status.hostIP": self.node.ip,
            "status.hostIPs": self.node.ip,
        }
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return (meta.get(m.group(1)) or {}).get(m.group(2), "")
        raise ValueError(f"unsupported fieldRef {path}")

    def _key_ref(self, kind: str, ref: dict[str, Any]) -> str | None:
        try:
            obj = self.kl.client.get(f"/api/v1/namespaces/{self.ns}/{kind}/{ref['name']}")
        except ApiError as e:
            if e.status == 404 and ref.get("optional"):
                return None
            raise
        if kind == "secrets":
            raw = (obj.get("data") or {}).get(ref["key"])
            if raw is None:
                if ref.get("optional"):
                    return None
                raise ValueError(f"key {ref['key']} not in secret {ref['name']}")
            return base64.b64decode(raw).decode()
        val = (obj.get("data") or {}).get(ref["key"])
        if val is None and not ref.get("optional"):
            raise ValueError(f"key {ref['key']} not in configmap {ref['name']}")
        return val

    def _container_env(self, c: dict[str, Any], entry: dict[str, Any] | None) -> dict[str, str]:
        env = dict(self.base_env)
        if entry:
            if entry.get("path"):
                env["PATH"] = os.pathsep.join([*entry["path"], env["PATH"]])
            for k, v in (entry.get("env") or {}).items():
                env[k] = expand(str(v), env)
        for src in c.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                ref = src["configMapRef"]
                try:
                    obj = self.kl.client.get(f"/api/v1/namespaces/{self.ns}/configmaps/{ref['name']}")
                except ApiError as e:
                    if e.status == 404 and ref.get("optional"):
                        continue
                    raise
                for k, v in (obj.get("data") or {}).items():
                    env[prefix + k] = v
            if "secretRef" in src:
                ref = src["secretRef"]
                try:
                    obj = self.kl.client.get(f"/api/v1/namespaces/{self.ns}/secrets/{ref['name']}")
                except ApiError as e:
                    if e.status == 404 and ref.get("optional"):
                        continue
                    raise
                for k, v in (obj.get("data") or {}).items():
                    env[prefix + k] = base64.b64decode(v).decode()
        defined: dict[str, str] = {}
        for ev in c.get("env") or []:
            name = ev["name"]
            if "valueFrom" in ev:
                vf = ev["valueFrom"]
                val: str | None
                if "fieldRef" in vf:
                    val = self._field(vf["fieldRef"]["fieldPath"])
                elif "configMapKeyRef" in vf:
                    val = self._key_ref("configmaps", vf["configMapKeyRef"])
                elif "secretKeyRef" in vf:
                    val = self._key_ref("secrets", vf["secretKeyRef"])
                elif "resourceFieldRef" in vf:
                    res = vf["resourceFieldRef"]["resource"]
                    kind, _, rname = res.partition(".")
                    val = quantity(
                        ((c.get("resources") or {}).get(kind) or {}).get(rname)
                        or self.node.capacity.get(rname, "0")
                    )
                else:
                    raise ValueError(f"unsupported valueFrom in env {name}")
                if val is None:
                    continue
            else:
                val = expand(ev.get("value", ""), {**env, **defined})
            defined[name] = val
        env.update(defined)
        return env

    def _resolve(self, cr: ContainerRun) -> None:
        c = cr.spec
        image = c.get("image", "")
        entry = lookup_image(self.kl.image_map, image)
        if entry is None:
            # as a registry would: an image nobody has cannot be pulled, even with a command
            raise LookupError(f"failed to pull image {image!r}: not in the process kubelet's image map")
        env = self._container_env(c, entry)
        command = c.get("command")
        args = c.get("args")
        if command:
            argv = list(command) + list(args or [])
        else:
            if entry is None:
                raise LookupError(f"image {image!r} has no entry in the process kubelet's image map and the container has no command")
            argv = list(entry.get("entrypoint") or []) + list(args if args is not None else entry.get("cmd") or [])
        if not argv:
            raise LookupError(f"nothing to run for container {cr.name} (image {image!r})")
        argv = [expand(a, env) for a in argv]
        cwd = c.get("workingDir") or (entry or {}).get("workingDir") or str(self.dir / "containers" / cr.name)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        cr.env, cr.argv, cr.cwd = env, argv, cwd

    def _start(self, cr: ContainerRun) -> None:
        try:
            self._resolve(cr)
        except (LookupError, ValueError, ApiError) as e:
            reason = "ErrImagePull" if isinstance(e, LookupError) else "CreateContainerConfigError"
            if cr.waiting is None or cr.waiting[0] != reason:
                self.event("Failed", f"Error: {e}", "Warning", cr.name)
            cr.waiting = (reason, str(e))
            cr.next_start = time.monotonic() + 5
            return
        logf = open(self.log_dir / f"{cr.name}.log", "ab")
        try:
            cr.proc = subprocess.Popen(
                cr.argv,
                cwd=cr.cwd,
                env=cr.env,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_child_setup,
            )
        except OSError as e:
            cr.proc = None
            cr.terminated = None
            cr.waiting = ("RunContainerError", f"{cr.argv[0]}: {e}")
            self._crashed(cr, exit_code=128, reason="StartError", message=str(e))
            return
        finally:
            logf.close()
        log.info("pod %s/%s container %s: pid %d: %s", self.ns, self.pod_name, cr.name, cr.proc.pid, shlex.join(cr.argv))
        self.event("Started", f"Started container {cr.name} (pid {cr.proc.pid})", container=cr.name)
        cr.started_at = now()
        cr.waiting = None
        cr.terminated = None
        cr.ready = False
        cr.started = "startupProbe" not in cr.spec
        t = time.monotonic()
        cr.probe_state = {}
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = cr.spec.get(kind)
            if p:
                cr.probe_state[kind] = {"due": t + p.get("initialDelaySeconds", 0), "ok": 0, "fail": 0}

    def _crashed(self, cr: ContainerRun, exit_code: int, reason: str, message: str = "") -> None:
        term = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": cr.started_at or now(),
            "finishedAt": now(),
            "containerID": f"process://{cr.proc.pid}" if cr.proc else "",
        }
        if message:
            term["message"] = message
        cr.proc = None
        cr.ready = False
        restart = self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and exit_code != 0)
        if cr.init and exit_code == 0:
            restart = False
        if restart and not self.stop_now:
            cr.last_terminated = term
            cr.terminated = None
            cr.restart_count += 1
            cr.backoff = min(self.kl.backoff_max, max(self.kl.backoff_base, cr.backoff * 2)) if cr.backoff else self.kl.backoff_base
            cr.next_start = time.monotonic() + cr.backoff
            cr.waiting = ("CrashLoopBackOff", f"back-off {cr.backoff:.0f}s restarting failed container={cr.name} pod={self.pod_name}")
            self.event("BackOff", f"Back-off restarting failed container {cr.name} (exit code {exit_code})", "Warning", cr.name)
        else:
            cr.terminated = term
            cr.waiting = None
            cr.done = True

    def _probe(self, cr: ContainerRun, p: dict[str, Any]) -> bool:
        timeout = float(p.get("timeoutSeconds", 1))

        def port_of(v: Any) -> int:
            if isinstance(v, int) or (isinstance(v, str) and v.isdigit()):
                return int(v)
            for cp in cr.spec.get("ports") or []:
                if cp.get("name") == v:
                    return int(cp["containerPort"])
            raise ValueError(f"no port named {v}")

        try:
            if "exec" in p:
                r = subprocess.run(
                    p["exec"]["command"], cwd=cr.cwd, env=cr.env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout,
                    start_new_session=True, preexec_fn=_child_setup,
                )
                return r.returncode == 0
            if "tcpSocket" in p:
                t = p["tcpSocket"]
                with socket.create_connection((t.get("host") or self.node.ip, port_of(t["port"])), timeout=timeout):
                    return True
            if "httpGet" in p:
                h = p["httpGet"]
                host = h.get("host") or self.node.ip
                cls = http.client.HTTPSConnection if h.get("scheme", "HTTP").upper() == "HTTPS" else http.client.HTTPConnection
                kw: dict[str, Any] = {"timeout": timeout}
                if cls is http.client.HTTPSConnection:
                    kw["context"] = ssl._create_unverified_context()
                conn = cls(host, port_of(h["port"]), **kw)
                try:
                    headers = {x["name"]: x["value"] for x in h.get("httpHeaders") or []}
                    conn.request("GET", h.get("path", "/"), headers=headers)
                    return 200 <= conn.getresponse().status < 400
                finally:
                    conn.close()
            if "grpc" in p:
                g = p["grpc"]
                with socket.create_connection((self.node.ip, int(g["port"])), timeout=timeout):
                    return True
        except (OSError, subprocess.TimeoutExpired, http.client.HTTPException, ValueError):
            return False
        return False

    def _run_probes(self, cr: ContainerRun) -> bool:
        changed = False
        t = time.monotonic()
        for kind, st in cr.probe_state.items():
            if not cr.running() or t < st["due"]:
                continue
            if kind != "startupProbe" and not cr.started:
                continue
            if kind == "startupProbe" and cr.started:
                continue
            p = cr.spec[kind]
            st["due"] = t + p.get("periodSeconds", 10)
            ok = self._probe(cr, p)
            if ok:
                st["ok"] += 1
                st["fail"] = 0
            else:
                st["fail"] += 1
                st["ok"] = 0
            succ, fail = p.get("successThreshold", 1), p.get("failureThreshold", 3)
            if kind == "startupProbe":
                if st["ok"] >= 1:
                    cr.started = True
                    changed = True
                elif st["fail"] >= fail:
                    self._restart_unhealthy(cr, "startup")
                    return True
            elif kind == "readinessProbe":
                if st["ok"] >= succ and not cr.ready:
                    cr.ready, changed = True, True
                elif st["fail"] >= fail and cr.ready:
                    cr.ready, changed = False, True
                    self.event("Unhealthy", "Readiness probe failed", "Warning", cr.name)
            elif kind == "livenessProbe" and st["fail"] >= fail:
                self._restart_unhealthy(cr, "liveness")
                return True
        if "readinessProbe" not in cr.probe_state and cr.running() and cr.started and not cr.ready:
            cr.ready, changed = True, True
        return changed

    def _restart_unhealthy(self, cr: ContainerRun, what: str) -> None:
        log.info("pod %s/%s container %s failed its %s probe: restarting", self.ns, self.pod_name, cr.name, what)
        self.event("Unhealthy", f"{what.capitalize()} probe failed", "Warning", cr.name)
        self.event("Killing", f"Container {cr.name} failed {what} probe, will be restarted", container=cr.name)
        grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        proc = cr.proc
        if proc is not None:
            self._signal(proc, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait()
            code = proc.returncode
            self._crashed(cr, exit_code=128 + (-code) if code < 0 else code, reason="Error", message=f"{what} probe failed")

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def _step(self) -> bool:
        """One round: start, reap, restart, probe. True if the status changed."""
        changed = False
        t = time.monotonic()
        if not self.initialized:
            for cr in self.inits:
                if cr.done and cr.terminated and cr.terminated["exitCode"] == 0:
                    continue
                if cr.done:  # failed for good
                    self.phase = "Failed"
                    return True
                if cr.proc is None:
                    if t >= cr.next_start:
                        self._start(cr)
                        changed = True
                    return changed
                code = cr.proc.poll()
                if code is None:
                    return changed
                self._crashed(cr, exit_code=128 - code if code < 0 else code, reason="Completed" if code == 0 else "Error")
                return True
            self.initialized = True
            changed = True
        for cr in self.containers:
            if cr.done:
                continue
            if cr.proc is None:
                if t >= cr.next_start:
                    self._start(cr)
                    changed = True
                continue
            code = cr.proc.poll()
            if code is not None:
                exit_code = 128 - code if code < 0 else code
                log.info("pod %s/%s container %s exited with %d", self.ns, self.pod_name, cr.name, exit_code)
                self._crashed(cr, exit_code, "Completed" if exit_code == 0 else "Error")
                changed = True
                continue
            changed |= self._run_probes(cr)
        phase = self._phase()
        if phase != self.phase:
            self.phase = phase
            changed = True
        return changed

    def _phase(self) -> str:
        if not self.initialized:
            return "Pending"
        if self.containers and all(c.done for c in self.containers):
            codes = [c.terminated["exitCode"] for c in self.containers if c.terminated]
            return "Succeeded" if all(x == 0 for x in codes) else "Failed"
        if any(c.running() or c.restart_count or c.done for c in self.containers):
            return "Running"
        return "Pending"

    def _state(self, cr: ContainerRun) -> dict[str, Any]:
        if cr.running():
            return {"running": {"startedAt": cr.started_at}}
        if cr.terminated:
            return {"terminated": cr.terminated}
        reason, msg = cr.waiting or ("ContainerCreating", "")
        w: dict[str, Any] = {"reason": reason}
        if msg:
            w["message"] = msg
        return {"waiting": w}

    def _cstatus(self, cr: ContainerRun) -> dict[str, Any]:
        s: dict[str, Any] = {
            "name": cr.name,
            "image": cr.spec.get("image", ""),
            "imageID": "process://" + image_repo(cr.spec.get("image", "")),
            "ready": cr.ready and cr.running(),
            "restartCount": cr.restart_count,
            "started": cr.running() and cr.started,
            "state": self._state(cr),
            "lastState": {"terminated": cr.last_terminated} if cr.last_terminated else {},
        }
        if cr.proc is not None:
            s["containerID"] = f"process://{cr.proc.pid}"
        elif cr.terminated and cr.terminated.get("containerID"):
            s["containerID"] = cr.terminated["containerID"]
        return s

    def _status(self) -> dict[str, Any]:
        ready = bool(self.containers) and all(c.ready and c.running() for c in self.containers)
        if self.phase == "Succeeded":
            ready = False

        def cond(t: str, ok: bool, reason: str = "") -> dict[str, Any]:
            c = {"type": t, "status": "True" if ok else "False", "lastProbeTime": None, "lastTransitionTime": now()}
            if reason and not ok:
                c["reason"] = reason
            return c

        conditions = [
            cond("PodReadyToStartContainers", True),
            cond("Initialized", self.initialized, "ContainersNotInitialized"),
            cond("ContainersReady", ready, "ContainersNotReady"),
            cond("Ready", ready, "ContainersNotReady"),
            cond("PodScheduled", True),
        ]
        # keep lastTransitionTime when the status is unchanged
        old = {c["type"]: c for c in (self.pod.get("status") or {}).get("conditions") or []}
        for c in conditions:
            o = old.get(c["type"])
            if o and o.get("status") == c["status"] and o.get("lastTransitionTime"):
                c["lastTransitionTime"] = o["lastTransitionTime"]
        return {
            "phase": self.phase,
            "hostIP": self.node.ip,
            "hostIPs": [{"ip": self.node.ip}],
            "podIP": self.node.ip,
            "podIPs": [{"ip": self.node.ip}],
            "startTime": self.start_time,
            "conditions": conditions,
            "initContainerStatuses": [self._cstatus(c) for c in self.inits],
            "containerStatuses": [self._cstatus(c) for c in self.containers],
        }

    def _report(self) -> None:
        status = self._status()
        key = json.dumps({k: v for k, v in status.items() if k != "conditions"}, sort_keys=True) + json.dumps(
            [(c["type"], c["status"]) for c in status["conditions"]]
        )
        if key == self.last_status:
            return
        if not status["initContainerStatuses"]:
            del status["initContainerStatuses"]
        r = self._api(
            lambda: self.kl.client.patch(
                f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}/status",
                {"metadata": {"uid": self.uid}, "status": status},
            )
        )
        if r is not None:
            self.last_status = key
            self.update(r)

    def _kill_all(self, sig: int, grace: float) -> None:
        procs = [c.proc for c in self.inits + self.containers if c.proc is not None]
        for p in procs:
            self._signal(p, sig)
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs:
            if p.poll() is None:
                self._signal(p, signal.SIGKILL)
                p.wait()
            else:  # a child of the container that kept the process group
                self._signal(p, signal.SIGKILL)

    def _terminate(self, grace: float) -> None:
        log.info("pod %s/%s: deleting, grace period %.0fs", self.ns, self.pod_name, grace)
        for cr in self.containers:
            if cr.running():
                self.event("Killing", f"Stopping container {cr.name}", container=cr.name)
        # preStop exec hooks, then SIGTERM, the grace period, SIGKILL
        for cr in self.containers:
            hook = ((cr.spec.get("lifecycle") or {}).get("preStop") or {}).get("exec")
            if hook and cr.running():
                try:
                    subprocess.run(hook["command"], cwd=cr.cwd, env=cr.env, timeout=max(1.0, grace),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True, preexec_fn=_child_setup)
                except (OSError, subprocess.TimeoutExpired):
                    pass
        self._kill_all(signal.SIGTERM, grace)
        for cr in self.inits + self.containers:
            if cr.proc is not None:
                code = cr.proc.returncode if cr.proc.returncode is not None else -9
                cr.terminated = {
                    "exitCode": 128 - code if code < 0 else code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": cr.started_at or now(),
                    "finishedAt": now(),
                    "containerID": f"process://{cr.proc.pid}",
                }
                cr.proc = None
                cr.done = True
            cr.ready = False
        if self.phase not in ("Succeeded", "Failed"):
            # kubelet reports the containers' end before removing the pod
            self._report()
        self._remove()

    def _remove(self) -> None:
        self._api(
            lambda: self.kl.client.delete(
                f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
            )
        )


class _LogHandler(http.server.BaseHTTPRequestHandler):
    """The part of the kubelet API that `kubectl logs` uses (through the API
    server's node proxy): GET /containerLogs/<ns>/<pod>/<container>."""

    kubelet: "ProcessKubelet"

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        parts = u.path.strip("/").split("/")
        if parts == ["healthz"]:
            self._reply(200, b"ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._reply(404, b"not found")
            return
        path = self.kubelet.log_path(parts[1], parts[2], parts[3])
        if path is None or not path.exists():
            self._reply(404, f"no logs for {'/'.join(parts[1:])}".encode())
            return
        data = path.read_bytes()
        if "tailLines" in q:
            n = int(q["tailLines"][0])
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-n:]) if n > 0 else b""
        if "limitBytes" in q:
            data = data[: int(q["limitBytes"][0])]
        follow = q.get("follow", ["false"])[0] == "true"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if not follow:
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.end_headers()
        self.wfile.write(data)
        pos = path.stat().st_size
        try:
            while not self.kubelet.stopping.is_set():
                time.sleep(0.5)
                running = self.kubelet.container_running(parts[1], parts[2], parts[3])
                if not path.exists():
                    break
                size = path.stat().st_size
                if size <= pos and not running:
                    break
                if size > pos:
                    with open(path, "rb") as f:
                        f.seek(pos)
                        self.wfile.write(f.read(size - pos))
                        self.wfile.flush()
                    pos = size
        except OSError:
            pass

    def _reply(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ProcessKubelet:
    """N Nodes whose Pods run as local processes (see the module's doc)."""

    def __init__(
        self,
        client: KubeClient,
        root: str | Path,
        nodes: int = 3,
        node_prefix: str = "node",
        first_ip: int = 2,
        labels: dict[str, str] | None = None,
        capacity: dict[str, str] | None = None,
        image_map: dict[str, Any] | None = None,
        kube_version: str = "v0.0.0",
        ca_file: str = "",
        serving_cert: tuple[str, str] | None = None,
        lease_seconds: int = 40,
        renew_interval: float = 2.0,
        status_interval: float = 10.0,
        backoff_base: float = 1.0,
        backoff_max: float = 20.0,
        tick: float = 0.3,
        inherit_env: tuple[str, ...] = INHERITED_ENV,
        extra_path: list[str] | None = None,
    ) -> None:
        self.client = client
        self.root = Path(root)
        self.image_map = load_image_map(image_map)
        self.kube_version = kube_version
        self.ca_file = ca_file
        self.serving_cert = serving_cert
        self.lease_seconds = lease_seconds
        self.renew_interval = renew_interval
        self.status_interval = status_interval
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.tick = tick
        self.inherit_env = inherit_env
        self.extra_path = list(extra_path or [])
        cap = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "50Gi"}
        cap.update(capacity or {})
        self.nodes: dict[str, Node] = {}
        for i in range(nodes):
            name = f"{node_prefix}-{i + 1}"
            ip = f"127.0.0.{first_ip + i}"
            nl = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "squall.dev/process-kubelet": "true",
                "topology.kubernetes.io/zone": f"zone-{i + 1}",
            }
            nl.update(labels or {})
            self.nodes[name] = Node(name, ip, nl, dict(cap))
        self.workers: dict[str, PodWorker] = {}
        self.workers_lock = threading.Lock()
        self.stopping = threading.Event()
        self.relist = threading.Event()
        self.threads: list[threading.Thread] = []
        self.boot_id = str(uuid.uuid4())

    # -- public API
    def start(self) -> "ProcessKubelet":
        (self.root / "pods").mkdir(parents=True, exist_ok=True)
        for node in self.nodes.values():
            self._serve(node)
            self._register(node)
        for target, name in ((self._heartbeats, "kubelet-heartbeats"), (self._watch_pods, "kubelet-pods")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self, grace: float = 2.0) -> None:
        """Kill every pod process (SIGTERM, `grace`, SIGKILL) and stop."""
        self.stopping.set()
        self.client.close_watches()
        with self.workers_lock:
            workers = list(self.workers.values())
        for w in workers:
            w.stop_now = True
        for w in workers:
            w._kill_all(signal.SIGTERM, grace)
            w.wake.set()
        for w in workers:
            w.join(5)
        for t in self.threads:
            t.join(5)
        for node in self.nodes.values():
            if node.server is not None:
                node.server.shutdown()
                node.server.server_close()

    def fail_node(self, name: str) -> None:
        """The node dies: no more Lease renewals or status, processes SIGKILLed."""
        node = self.nodes[name]
        node.failed = True
        with self.workers_lock:
            workers = [w for k, w in list(self.workers.items()) if w.node is node]
            for k in [k for k, w in self.workers.items() if w.node is node]:
                del self.workers[k]
        for w in workers:
            w.kill()
            w._kill_all(signal.SIGKILL, 0)
        for w in workers:
            w.join(5)
        log.warning("node %s failed: %d pods killed", name, len(workers))

    def restore_node(self, name: str) -> None:
        """The node comes back (like a rebooted machine): heartbeats resume
        and the pods still bound to it are started again."""
        node = self.nodes[name]
        node.failed = False
        self._register(node)
        self.relist.set()
        self.client.close_watches()

    def node_ip(self, name: str) -> str:
        return self.nodes[name].ip

    def pod_dir(self, namespace: str, pod: str) -> Path | None:
        with self.workers_lock:
            for w in self.workers.values():
                if w.ns == namespace and w.pod_name == pod:
                    return w.dir
        found = sorted((self.root / "pods").glob(f"{namespace}_{pod}_*"), key=lambda p: p.stat().st_mtime)
        return found[-1] if found else None

    def log_path(self, namespace: str, pod: str, container: str) -> Path | None:
        d = self.pod_dir(namespace, pod)
        return None if d is None else d / "logs" / f"{container}.log"

    def logs(self, namespace: str, pod: str, container: str) -> str:
        p = self.log_path(namespace, pod, container)
        return p.read_text(errors="replace") if p is not None and p.exists() else ""

    def container_running(self, namespace: str, pod: str, container: str) -> bool:
        with self.workers_lock:
            for w in self.workers.values():
                if w.ns == namespace and w.pod_name == pod:
                    return any(c.name == container and c.running() for c in w.inits + w.containers)
        return False

    def pids(self) -> list[int]:
        """The pids of every container process now running."""
        out = []
        with self.workers_lock:
            for w in self.workers.values():
                for c in w.inits + w.containers:
                    if c.proc is not None and c.proc.poll() is None:
                        out.append(c.proc.pid)
        return out

    # -- nodes
    def _serve(self, node: Node) -> None:
        if self.serving_cert is None:
            return
        handler = type("Handler", (_LogHandler,), {"kubelet": self})
        srv = http.server.ThreadingHTTPServer((node.ip, 0), handler)
        srv.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*self.serving_cert)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        node.server = srv
        node.kubelet_port = srv.server_address[1]
        t = threading.Thread(target=srv.serve_forever, name=f"kubelet-api-{node.name}", daemon=True)
        t.start()

    def _node_status(self, node: Node) -> dict[str, Any]:
        ts = now()

        def cond(t: str, status: str, reason: str, msg: str) -> dict[str, Any]:
            return {"type": t, "status": status, "reason": reason, "message": msg,
                    "lastHeartbeatTime": ts, "lastTransitionTime": ts}

        return {
            "capacity": node.capacity,
            "allocatable": node.capacity,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "process kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": node.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": node.kubelet_port}},
            "nodeInfo": {
                "machineID": node.name, "systemUUID": node.name, "bootID": self.boot_id,
                "kernelVersion": os.uname().release, "osImage": "squall process kubelet",
                "containerRuntimeVersion": "process://1", "kubeletVersion": self.kube_version,
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
            },
        }

    def _register(self, node: Node) -> None:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": node.labels}, "spec": {}}
        try:
            obj = self.client.create("/api/v1/nodes", body)
        except ApiError as e:
            if e.status != 409:
                raise
            obj = self.client.patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": node.labels}})
        node.uid = obj["metadata"]["uid"]
        self._post_status(node)
        self._renew(node)

    def _post_status(self, node: Node) -> None:
        # conditions keep their lastTransitionTime while unchanged
        status = self._node_status(node)
        self.client.patch(f"/api/v1/nodes/{node.name}/status", {"status": status}, kind="strategic")

    def _renew(self, node: Node) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node.name}"
        spec = {"holderIdentity": node.name, "leaseDurationSeconds": self.lease_seconds, "renewTime": now_micro()}
        try:
            self.client.patch(path, {"spec": spec}, kind="merge")
        except ApiError as e:
            if e.status != 404:
                raise
            self.client.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": node.name,
                        "namespace": "kube-node-lease",
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}],
                    },
                    "spec": spec,
                },
            )

    def _heartbeats(self) -> None:
        last_status = time.monotonic()
        while not self.stopping.wait(self.renew_interval):
            post = time.monotonic() - last_status >= self.status_interval
            if post:
                last_status = time.monotonic()
            for node in list(self.nodes.values()):
                if node.failed:
                    continue
                try:
                    self._renew(node)
                    if post:
                        self._post_status(node)
                except (ApiError, OSError) as e:
                    if not self.stopping.is_set():
                        log.warning("node %s heartbeat: %s", node.name, e)

    # -- pods
    def _watch_pods(self) -> None:
        rv = ""
        while not self.stopping.is_set():
            try:
                if not rv or self.relist.is_set():
                    self.relist.clear()
                    lst = self.client.get("/api/v1/pods")
                    rv = lst["metadata"]["resourceVersion"]
                    seen = set()
                    for pod in lst["items"]:
                        seen.add(pod["metadata"]["uid"])
                        self._sync(pod)
                    with self.workers_lock:
                        gone = [w for uid, w in self.workers.items() if uid not in seen]
                    for w in gone:
                        self._gone(w.pod)
                for ev in self.client.watch("/api/v1/pods", rv, timeout_seconds=30, stop=self.stopping):
                    typ, obj = ev["type"], ev["object"]
                    if typ == "ERROR":
                        rv = ""
                        break
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if typ in ("ADDED", "MODIFIED"):
                        self._sync(obj)
                    elif typ == "DELETED":
                        self._gone(obj)
                    if self.relist.is_set():
                        break
            except ApiError as e:
                if e.status == 410:
                    rv = ""
                    continue
                if not self.stopping.is_set():
                    log.warning("pod watch: %s", e)
                    time.sleep(1)
            except (OSError, http.client.HTTPException, ValueError) as e:
                if not self.stopping.is_set():
                    log.warning("pod watch: %s", e)
                    time.sleep(1)

    def _sync(self, pod: dict[str, Any]) -> None:
        node = self.nodes.get(pod["spec"].get("nodeName", ""))
        if node is None or node.failed or self.stopping.is_set():
            return
        uid = pod["metadata"]["uid"]
        with self.workers_lock:
            w = self.workers.get(uid)
            if w is not None:
                w.update(pod)
                return
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                if pod["metadata"].get("deletionTimestamp"):
                    self._delete_now(pod)
                return
            if pod["metadata"].get("deletionTimestamp"):
                # never started here (or the kubelet restarted): nothing to stop
                self._delete_now(pod)
                return
            w = PodWorker(self, node, pod)
            self.workers[uid] = w
        w.start()

    def _delete_now(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.client.delete(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                 "preconditions": {"uid": meta["uid"]}},
            )
        except ApiError as e:
            if e.status not in (404, 409):
                log.warning("delete pod %s/%s: %s", meta["namespace"], meta["name"], e)

    def _gone(self, pod: dict[str, Any]) -> None:
        with self.workers_lock:
            w = self.workers.pop(pod["metadata"]["uid"], None)
        if w is not None:
            w.deleted = True
            w.wake.set()


# -- a control endpoint, for a kubelet started by scripts/k8s-up
def serve_control(kubelet: ProcessKubelet, port: int = 0) -> http.server.ThreadingHTTPServer:
    """POST /nodes/<name>/fail or /restore, GET /nodes on 127.0.0.1:port."""

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:
            pass

        def _send(self, code: int, obj: Any) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            self._send(200, {n.name: {"ip": n.ip, "failed": n.failed} for n in kubelet.nodes.values()})

        def do_POST(self) -> None:  # noqa: N802
            m = re.fullmatch(r"/nodes/([^/]+)/(fail|restore)", self.path)
            if not m or m.group(1) not in kubelet.nodes:
                self._send(404, {"error": "POST /nodes/<name>/fail or /nodes/<name>/restore"})
                return
            (kubelet.fail_node if m.group(2) == "fail" else kubelet.restore_node)(m.group(1))
            self._send(200, {"node": m.group(1), "done": m.group(2)})

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, name="kubelet-control", daemon=True).start()
    return srv


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Run Pods of N Kubernetes Nodes as local processes.")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--root", required=True, help="folder for pod folders and logs")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--control-port", type=int, default=0)
    ap.add_argument("--kube-version", default="v0.0.0")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = load_kubeconfig(args.kubeconfig)
    kl = ProcessKubelet(KubeClient(cfg), args.root, nodes=args.nodes, kube_version=args.kube_version, ca_file=cfg.ca_file)
    kl.start()
    ctl = serve_control(kl, args.control_port)
    print(f"process kubelet: nodes {', '.join(kl.nodes)}; control http://127.0.0.1:{ctl.server_address[1]}", flush=True)
    done = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: done.set())
    done.wait()
    kl.stop()
    ctl.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
