"""Start and stop a real Kubernetes control plane on loopback, for tests.

etcd (temp data dir), kube-apiserver (generated certificates, RBAC on,
service-account signing keys), kube-controller-manager, kube-scheduler and
the process kubelet (tests/k8s/kubelet.py), all on 127.0.0.0/8 with free
ports, from the binaries that scripts/k8s-build makes. Used by the pytest
fixtures in conftest.py and, in the foreground, by scripts/k8s-up.

    with Cluster(bin_dir, workdir, nodes=3) as c:
        c.kubectl("get", "nodes")
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from kubeapi import ApiError, KubeClient, KubeConfig  # type: ignore[no-redef]
    from kubelet import ProcessKubelet, _child_setup, serve_control  # type: ignore[no-redef]
else:
    from .kubeapi import ApiError, KubeClient, KubeConfig
    from .kubelet import ProcessKubelet, _child_setup, serve_control

log = logging.getLogger("squall.k8s")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUILD_HINT = "build them first with: scripts/k8s-build   (takes 15-25 minutes once, then cached)"


def versions() -> dict[str, str]:
    out = {}
    for line in (HERE / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


def default_bin_dir() -> Path:
    v = versions()["KUBE_VERSION"]
    cache = Path(os.environ.get("SQUALL_K8S_CACHE") or Path.home() / ".cache" / "squall-k8s")
    return cache / v / "bin"


def find_bin_dir() -> Path:
    """The binaries' folder ($SQUALL_K8S_BIN or the build cache); raises
    FileNotFoundError with how to build them when they are missing."""
    d = Path(os.environ["SQUALL_K8S_BIN"]) if os.environ.get("SQUALL_K8S_BIN") else default_bin_dir()
    missing = [n for n in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "helm")
               if not os.access(d / n, os.X_OK)]
    if missing:
        raise FileNotFoundError(f"Kubernetes test binaries missing in {d}: {', '.join(missing)}; {BUILD_HINT}")
    return d


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_pki(d: Path, node_ips: list[str], host: str = "127.0.0.1", node_names: tuple[str, ...] = ()) -> None:
    """CA, apiserver serving cert (for `host` too), client certs, kubelet
    serving cert, a client cert per name in `node_names` (system:node:NAME,
    for real kubelets) and the service-account key pair, with the openssl
    command line tool."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "30", "-subj", "/CN=squall-test-ca", cwd=d)

    def cert(name: str, subj: str, ext: str) -> None:
        (d / f"{name}.ext").write_text(ext)
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subj, cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "30", "-extfile", f"{name}.ext", cwd=d)

    server_ext = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    client_ext = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
    extra = "" if host == "127.0.0.1" else f"IP:{host},"
    cert("apiserver", "/CN=kube-apiserver", server_ext + f"subjectAltName=IP:127.0.0.1,{extra}IP:10.96.0.1,DNS:localhost,"
         "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n")
    cert("kubelet", "/CN=squall-process-kubelet",
         server_ext + "subjectAltName=" + ",".join(f"IP:{ip}" for ip in node_ips) + "\n")
    cert("admin", "/O=system:masters/CN=admin", client_ext)
    cert("controller-manager", "/CN=system:kube-controller-manager", client_ext)
    cert("scheduler", "/CN=system:kube-scheduler", client_ext)
    cert("front-proxy-client", "/CN=front-proxy-client", client_ext)
    cert("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", client_ext)
    cert("kube-proxy", "/CN=system:kube-proxy", client_ext)
    for name in node_names:
        cert(f"node-{name}", f"/O=system:nodes/CN=system:node:{name}", client_ext)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> None:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: squall-test
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {user}
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: squall-test
  context:
    cluster: squall-test
    user: {user}
current-context: squall-test
"""
    )


class Cluster:
    """The control plane and the process kubelet (see the module's doc)."""

    def __init__(
        self,
        bin_dir: str | Path | None = None,
        workdir: str | Path | None = None,
        nodes: int = 3,
        node_grace_seconds: int = 10,
        eviction_seconds: int = 30,
        image_map: dict[str, Any] | None = None,
        verbosity: int = 1,
    ) -> None:
        self.bin = Path(bin_dir) if bin_dir else find_bin_dir()
        self._own_workdir = workdir is None
        self.dir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="squall-k8s-"))
        self.node_count = nodes
        self.node_grace_seconds = node_grace_seconds
        self.eviction_seconds = eviction_seconds
        self.image_map = image_map
        self.verbosity = verbosity
        self.version = versions()["KUBE_VERSION"]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kubelet: ProcessKubelet | None = None
        self.client: KubeClient | None = None
        self.api_port = 0
        self.kubeconfig = self.dir / "admin.kubeconfig"
        # where the control plane listens, what every process is started
        # under, and how the `kubernetes` Service gets its endpoints: the
        # real-node cluster (realnode.py) changes these
        self.host = "127.0.0.1"
        self.spawn_prefix: list[str] = []
        self.endpoint_reconciler = "none"

    # -- public
    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.api_port}"

    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG and the binaries first on PATH."""
        e = dict(os.environ)
        e["KUBECONFIG"] = str(self.kubeconfig)
        e["PATH"] = f"{self.bin}{os.pathsep}{e.get('PATH', '')}"
        e["HELM_CACHE_HOME"] = str(self.dir / "helm" / "cache")
        e["HELM_CONFIG_HOME"] = str(self.dir / "helm" / "config")
        e["HELM_DATA_HOME"] = str(self.dir / "helm" / "data")
        return e

    def run(self, *args: str, check: bool = True, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(list(args), env=self.env(), capture_output=True, text=True, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise subprocess.CalledProcessError(r.returncode, list(args), r.stdout, r.stderr)
        return r

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.bin / "kubectl"), *args, **kw)

    def helm(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.bin / "helm"), *args, **kw)

    def start(self, timeout: float = 120) -> "Cluster":
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the kubelet (killing every pod process), then the control
        plane, newest first; each gets SIGTERM, 10 s, SIGKILL."""
        self._stop_nodes()
        for name in reversed(list(self.procs)):
            p = self.procs[name]
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            try:  # anything left in its process group
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.procs.clear()
        self._cleanup()
        if not os.environ.get("SQUALL_K8S_KEEP"):
            if self._own_workdir:
                shutil.rmtree(self.dir, ignore_errors=True)
            else:  # keep the logs, drop etcd's 120 MB of preallocated WAL
                shutil.rmtree(self.dir / "etcd", ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def logs_of(self, component: str) -> str:
        p = self.dir / "logs" / f"{component}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    # -- internals
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "ab") as f:
            p = subprocess.Popen([*self.spawn_prefix, *argv], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, preexec_fn=_child_setup, cwd=self.dir)
        self.procs[name] = p
        log.info("started %s (pid %d)", name, p.pid)
        return p

    def _wait_healthy(self, name: str, url_path: str, port: int, deadline: float, cert: str = "admin") -> None:
        import http.client
        import ssl

        pki = self.dir / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt")) if name == "kube-apiserver" else ssl._create_unverified_context()
        ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
        last = ""
        while time.monotonic() < deadline:
            p = self.procs[name]
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}:\n{self.logs_of(name)[-4000:]}")
            try:
                c = http.client.HTTPSConnection(self.host, port, context=ctx, timeout=5)
                c.request("GET", url_path)
                r = c.getresponse()
                body = r.read().decode(errors="replace")
                c.close()
                if r.status == 200:
                    return
                last = f"HTTP {r.status}: {body[-500:]}"
            except OSError as e:
                last = str(e)
            time.sleep(0.3)
        raise TimeoutError(f"{name} not healthy on port {port}: {last}\n{self.logs_of(name)[-4000:]}")

    def _wait_etcd(self, port: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.procs["etcd"].poll() is not None:
                raise RuntimeError(f"etcd exited:\n{self.logs_of('etcd')[-4000:]}")
            try:
                import urllib.request

                with urllib.request.urlopen(f"http://{self.host}:{port}/health", timeout=2) as r:
                    if b'"true"' in r.read():
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"etcd not healthy:\n{self.logs_of('etcd')[-4000:]}")

    def _start(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pki = self.dir / "pki"
        self._prepare(pki)
        h = self.host

        # etcd
        ec, ep = free_port(), free_port()
        self._spawn("etcd", [
            str(self.bin / "etcd"), "--name", "default", "--data-dir", str(self.dir / "etcd"),
            "--listen-client-urls", f"http://{h}:{ec}", "--advertise-client-urls", f"http://{h}:{ec}",
            "--listen-peer-urls", f"http://{h}:{ep}", "--initial-advertise-peer-urls", f"http://{h}:{ep}",
            "--initial-cluster", f"default=http://{h}:{ep}", "--unsafe-no-fsync",
            "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn",
        ])
        self._wait_etcd(ec, deadline)

        # kube-apiserver
        self.api_port = free_port()
        v = str(self.verbosity)
        self._spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers=http://{h}:{ec}",
            f"--bind-address={h}", f"--advertise-address={h}", f"--secure-port={self.api_port}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            f"--endpoint-reconciler-type={self.endpoint_reconciler}",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--default-not-ready-toleration-seconds={self.eviction_seconds}",
            f"--default-unreachable-toleration-seconds={self.eviction_seconds}",
            # the aggregation layer's front proxy, as kubeadm sets it up
            f"--requestheader-client-ca-file={pki / 'ca.crt'}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--allow-privileged=true", "--profiling=false", f"--v={v}",
        ])
        self._wait_healthy("kube-apiserver", "/readyz", self.api_port, deadline)
        write_kubeconfig(self.kubeconfig, self.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key", "admin")
        for comp in ("controller-manager", "scheduler"):
            write_kubeconfig(self.dir / f"{comp}.kubeconfig", self.server, pki / "ca.crt",
                             pki / f"{comp}.crt", pki / f"{comp}.key", f"system:kube-{comp}")

        # kube-controller-manager and kube-scheduler
        cm_port, sch_port = free_port(), free_port()
        cmk = str(self.dir / "controller-manager.kubeconfig")
        self._spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"),
            f"--kubeconfig={cmk}", f"--authentication-kubeconfig={cmk}", f"--authorization-kubeconfig={cmk}",
            f"--bind-address={h}", f"--secure-port={cm_port}", f"--cert-dir={self.dir / 'cm-certs'}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--controllers=*,bootstrapsigner,tokencleaner",
            "--node-monitor-period=2s", f"--node-monitor-grace-period={self.node_grace_seconds}s",
            "--concurrent-gc-syncs=5", "--profiling=false", f"--v={v}",
        ])
        sck = str(self.dir / "scheduler.kubeconfig")
        self._spawn("kube-scheduler", [
            str(self.bin / "kube-scheduler"),
            f"--kubeconfig={sck}", f"--authentication-kubeconfig={sck}", f"--authorization-kubeconfig={sck}",
            f"--bind-address={h}", f"--secure-port={sch_port}", f"--cert-dir={self.dir / 'sched-certs'}",
            "--leader-elect=false", "--profiling=false", f"--v={v}",
        ])
        self._wait_healthy("kube-controller-manager", "/healthz", cm_port, deadline)
        self._wait_healthy("kube-scheduler", "/healthz", sch_port, deadline)

        cfg = KubeConfig(h, self.api_port, str(pki / "ca.crt"), str(pki / "admin.crt"), str(pki / "admin.key"))
        self.client = KubeClient(cfg)
        self._wait_for_namespace("kube-node-lease", deadline)
        self._start_nodes(cfg, deadline)
        self._wait_nodes_ready(deadline)
        self._wait_for_service_account("default", deadline)

    # -- the nodes: the process kubelet here; realnode.py overrides these
    def _prepare(self, pki: Path) -> None:
        """Before anything starts: the certificates."""
        make_pki(pki, [f"127.0.0.{2 + i}" for i in range(self.node_count)], self.host)

    def _start_nodes(self, cfg: KubeConfig, deadline: float) -> None:
        pki = self.dir / "pki"
        self.kubelet = ProcessKubelet(
            KubeClient(cfg), self.dir / "kubelet", nodes=self.node_count, image_map=self.image_map,
            kube_version=self.version, ca_file=str(pki / "ca.crt"),
            serving_cert=(str(pki / "kubelet.crt"), str(pki / "kubelet.key")),
            extra_path=[str(self.bin)],  # kubectl and helm inside pods
        ).start()

    def _stop_nodes(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None

    def _cleanup(self) -> None:
        """After every process stopped: undo what the nodes did outside the work folder."""

    def _wait_for_namespace(self, ns: str, deadline: float) -> None:
        assert self.client is not None
        while True:
            try:
                self.client.get(f"/api/v1/namespaces/{ns}")
                return
            except ApiError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _wait_for_service_account(self, ns: str, deadline: float) -> None:
        assert self.client is not None
        while True:
            try:
                self.client.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default")
                return
            except ApiError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no default service account in {ns}:\n{self.logs_of('kube-controller-manager')[-3000:]}")
                time.sleep(0.2)

    def _wait_nodes_ready(self, deadline: float) -> None:
        assert self.client is not None
        while True:
            nodes = self.client.get("/api/v1/nodes")["items"]
            ready = [n for n in nodes if any(
                c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
                and not any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints") or [])]
            if len(ready) >= self.node_count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not ready: {[n['metadata']['name'] for n in nodes]}")
            time.sleep(0.3)


def cli_args(description: str, nodes: int, argv: list[str] | None) -> Any:
    """The options scripts/k8s-up passes to either cluster's program."""
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--nodes", type=int, default=nodes)
    ap.add_argument("--dir", help="work folder (default: a new temp folder, removed at exit)")
    ap.add_argument("--bin", help="binaries folder (default: the scripts/k8s-build cache)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return args


def run_in_foreground(c: "Cluster", banner: Any, start_timeout: float = 120) -> int:
    """Starts `c`, prints `banner(c)` and runs until Ctrl-C, SIGTERM or the exit of any of its
    processes; then stops it. `banner` may return (text, cleanup) to have cleanup() called first."""
    stop = {"now": False}

    def on_signal(*_: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    c.start(timeout=start_timeout)
    try:
        shown = banner(c)
        text, cleanup = shown if isinstance(shown, tuple) else (shown, None)
        print(text, flush=True)
        while not stop["now"]:
            for name, p in list(c.procs.items()):
                if p.poll() is not None:
                    print(f"{name} exited with {p.returncode}; see {c.dir / 'logs' / (name + '.log')}", flush=True)
                    stop["now"] = True
            time.sleep(0.5)
        if cleanup is not None:
            cleanup()
    finally:
        print("stopping...", flush=True)
        c.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """scripts/k8s-up: run the cluster in the foreground until Ctrl-C."""
    args = cli_args("Start the Squall test Kubernetes cluster in the foreground.", 3, argv)

    def banner(c: Cluster) -> tuple[str, Any]:
        assert c.kubelet is not None
        ctl = serve_control(c.kubelet)
        return f"""
Squall test cluster {c.version} is up ({args.nodes} nodes: {', '.join(c.kubelet.nodes)}).
  export KUBECONFIG={c.kubeconfig}
  export PATH={c.bin}:$PATH
  kubectl get nodes
Pod logs:        {c.dir / 'kubelet' / 'pods'}/<ns>_<pod>_<uid>/logs/
Component logs:  {c.dir / 'logs'}
Fail a node:     curl -X POST http://127.0.0.1:{ctl.server_address[1]}/nodes/node-1/fail   (/restore to bring it back)
Ctrl-C stops everything.""", ctl.shutdown

    return run_in_foreground(Cluster(args.bin, args.dir, nodes=args.nodes), banner)


if __name__ == "__main__":
    sys.exit(main())
