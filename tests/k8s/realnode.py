"""A Kubernetes cluster with real nodes, for tests: the control plane of
cluster.py plus, per node, the real kubelet over its own containerd (runc, CNI
bridge + host-local + loopback + portmap) and a NetworkPolicy agent
(kube-network-policies, tests/k8s/go/netpol), one kube-proxy (iptables) and
CoreDNS, running the images scripts/k8s-images built.

Everything runs in a network namespace of its own (`squall-k8s-<slot>`), so
that nothing it does to the network (bridges, veths, iptables chains,
sysctls, routes) touches the machine's, and two clusters on one machine do
not meet. Addresses, for slot k (0-15; one `flock` per slot in /run/squall-k8s):

    10.<200+k>.255.1        the control plane (etcd, kube-apiserver, ...)
    10.<200+k>.255.53       CoreDNS (Service kube-system/kube-dns 10.96.0.10)
    10.<200+k>.255.<10+i>   node-i's address (the kubelet refuses a loopback
                            node IP and the kernel has no dummy links: they
                            sit on the namespace's end of a veth pair)
    10.<200+k>.<i>.0/24     node-i's pods (bridge cni<i>, gateway .1)
    10.96.0.0/16            Services

The machine reaches the namespace through the veth pair (its end:
10.<200+k>.255.254, with a route to 10.<200+k>.0.0/16), so tests and kubectl
talk to the API server and to pod IPs as usual; nothing is reachable from
outside the machine.

All nodes share the namespace, so one kube-proxy serves them all (several
would fight over the same iptables chains), and a pod on node-1 reaches a
pod on node-2 directly over the namespace's routes. Each node has its own
kubelet root directory, containerd root/state, runc root, CNI bridge and
address range, pod-log directory and cgroup root (/squall-k<k>-node-<i>).

Stop (and `fail_node`) kill the kubelets, then every process in the nodes'
cgroups and their containerd shims; cleanup unmounts what the kubelets and
containerd mounted under the work folder, removes the pods' network
namespaces, the cgroups, the cluster's namespace (with its iptables chains)
and veth pair, and /var/lib/kubelet if the kubelets created it (they put
their device-plugin socket there whatever their root directory is).

    with RealNodeCluster(nodes=2) as c:
        c.kubectl("run", "x", "--image=squall-worker:0.1.0", ...)

Needs root, the binaries of scripts/k8s-build (kubelet, kube-proxy, coredns,
netpol included), the images of scripts/k8s-images and Debian's containerd, runc,
containernetworking-plugins, iptables and conntrack (scripts/k8s-images installs them).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cluster import Cluster, cli_args, free_port, make_pki, run_in_foreground, write_kubeconfig  # type: ignore[no-redef]
    from kubeapi import KubeConfig  # type: ignore[no-redef]
else:
    from .cluster import Cluster, cli_args, free_port, make_pki, run_in_foreground, write_kubeconfig
    from .kubeapi import KubeConfig

log = logging.getLogger("squall.k8s.realnode")

CNI_BIN = "/usr/lib/cni"
SLOTS_DIR = Path("/run/squall-k8s")
DNS_SERVICE_IP = "10.96.0.10"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
# what a kubelet started before its containerd's CRI plugin is up exits with
CRI_NOT_READY: Final = "server is not initialized yet"
NETPOL_QUEUE_BASE: Final = 100  # node-i's NetworkPolicy agent reads nfqueue 100 + i
NETPOL_CHAIN: Final = "SQUALL-NETPOL"
NODE_TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip", "nsenter")


def images_dir() -> Path:
    return Path(os.environ.get("SQUALL_K8S_CACHE") or Path.home() / ".cache" / "squall-k8s") / "images"


def missing_prerequisites(bin_dir: Path, images: Path) -> list[str]:
    """What the real-node cluster needs and this machine lacks (empty: all there)."""
    import shutil

    out = []
    if os.geteuid() != 0:
        out.append("root (the kubelet, containerd and network namespaces need it)")
    out += [f"{t} (scripts/k8s-images installs Debian's containerd, runc, iptables)"
            for t in NODE_TOOLS if shutil.which(t) is None]
    for b in ("kubelet", "kube-proxy", "coredns", "netpol"):
        if not os.access(bin_dir / b, os.X_OK):
            out.append(f"{bin_dir / b} (run scripts/k8s-build)")
    for f in ("bridge", "host-local", "loopback", "portmap"):
        if not os.access(Path(CNI_BIN) / f, os.X_OK):
            out.append(f"{CNI_BIN}/{f} (Debian's containernetworking-plugins)")
    if not (images / "containerd" / "root").is_dir() or not (images / "pause.key").exists():
        out.append(f"the nodes' image store {images}/containerd/root (run scripts/k8s-images)")
    return out


def _run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r


class _Slot:
    """An exclusive slot number 0-15 for this machine (a held flock)."""

    def __init__(self) -> None:
        SLOTS_DIR.mkdir(parents=True, exist_ok=True)
        for k in range(16):
            f = open(SLOTS_DIR / f"slot-{k}.lock", "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            self.k, self._f = k, f
            return
        raise RuntimeError(f"all 16 real-node cluster slots in {SLOTS_DIR} are taken")

    def release(self) -> None:
        self._f.close()


class RealNode:
    def __init__(self, cluster: "RealNodeCluster", i: int) -> None:
        self.i = i
        self.name = f"node-{i}"
        net = cluster.net
        self.ip = f"{net}.255.{10 + i}"
        self.cidr = f"{net}.{i}.0/24"
        self.gateway = f"{net}.{i}.1"
        self.bridge = f"cni{i}"
        self.dir = cluster.dir / "nodes" / self.name
        self.sock = self.dir / "containerd.sock"
        assert cluster.slot is not None
        self.cgroup_root = f"/squall-k{cluster.slot.k}-{self.name}"
        self.netpol_metrics = ""  # host:port of its NetworkPolicy agent's /metrics
        self.failed = False


DEVICE_PLUGIN_SOCKET: Final = Path("/var/lib/kubelet/device-plugins/kubelet.sock")


def _socket_id(path: Path) -> tuple[int, int] | None:
    """The file at `path` as (inode, change time), or None when there is none: a new socket
    bound at the same path has a new identity."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_ctime_ns


class RealNodeCluster(Cluster):
    """The control plane of Cluster with real nodes (see the module's doc).
    Every node's containerd starts with the images of scripts/k8s-images
    (a hard-linked copy of its store)."""

    def __init__(self, bin_dir: str | Path | None = None, workdir: str | Path | None = None, nodes: int = 2,
                 images_folder: str | Path | None = None, **kw: Any) -> None:
        super().__init__(bin_dir, workdir, nodes=nodes, **kw)
        self.images_folder = Path(images_folder) if images_folder else images_dir()
        self.slot: _Slot | None = None
        self.nodes: dict[str, RealNode] = {}
        self.endpoint_reconciler = "lease"
        self._made_var_lib_kubelet = False
        self._netns_paths: set[str] = set()

    # -- addresses
    @property
    def net(self) -> str:
        assert self.slot is not None
        return f"10.{200 + self.slot.k}"

    @property
    def netns(self) -> str:
        assert self.slot is not None
        return f"squall-k8s-{self.slot.k}"

    @property
    def veth(self) -> str:
        assert self.slot is not None
        return f"sqk{self.slot.k}"

    @property
    def dns_ip(self) -> str:
        return f"{self.net}.255.53"

    def in_netns(self, *argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Runs a command in the cluster's network namespace."""
        return _run("nsenter", f"--net=/run/netns/{self.netns}", "--", *argv, check=check, timeout=timeout)

    def ctr(self, node: str, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        n = self.nodes[node]
        return _run("ctr", "--address", str(n.sock), "--namespace", "k8s.io", *args, check=check, timeout=timeout)

    # -- set-up
    def _prepare(self, pki: Path) -> None:
        missing = missing_prerequisites(self.bin, self.images_folder)
        if missing:
            raise RuntimeError("the real-node cluster needs: " + "; ".join(missing))
        self.slot = _Slot()
        self.host = f"{self.net}.255.1"
        self.spawn_prefix = ["nsenter", f"--net=/run/netns/{self.netns}", "--"]
        self.nodes = {n.name: n for n in (RealNode(self, i) for i in range(1, self.node_count + 1))}
        self._cleanup_network()  # what a killed run on this slot may have left
        _run("ip", "netns", "add", self.netns)
        _run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        _run("ip", "addr", "add", f"{self.net}.255.254/24", "dev", self.veth)
        _run("ip", "link", "set", self.veth, "up")
        _run("ip", "route", "add", f"{self.net}.0.0/16", "via", self.host, "dev", self.veth)
        addrs = [self.host, self.dns_ip, *(n.ip for n in self.nodes.values())]
        for a in addrs:
            self.in_netns("ip", "addr", "add", f"{a}/24", "dev", "eth0")
        self.in_netns("ip", "link", "set", "lo", "up")
        self.in_netns("ip", "link", "set", "eth0", "up")
        self.in_netns("ip", "route", "add", "default", "via", f"{self.net}.255.254")
        # per network namespace: routing between the bridges and the node
        # addresses, and bridged pod traffic through kube-proxy's rules
        self.in_netns("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1")
        self._made_var_lib_kubelet = not Path("/var/lib/kubelet").exists()
        make_pki(pki, [n.ip for n in self.nodes.values()], self.host, tuple(self.nodes))

    def _start_nodes(self, cfg: KubeConfig, deadline: float) -> None:
        pki = self.dir / "pki"
        self._copy_image_store()
        for n in self.nodes.values():
            self._start_containerd(n)
        self._start_dns(pki)
        self._start_proxy(pki)
        self._netpol_chains()
        for n in self.nodes.values():
            self._start_netpol(n)  # before its kubelet: no pod of the node runs unguarded
        for n in self.nodes.values():
            self._wait_containerd(n, deadline)
            self._start_kubelet_on_cri(n, pki, deadline)

    def _start_kubelet_on_cri(self, n: RealNode, pki: Path, deadline: float) -> None:
        """Starts `n`'s kubelet and waits until it has bound its device-plugin socket. containerd
        answers its own API (`ctr version`) before its CRI plugin has loaded the image store, and a
        kubelet started in between exits at once ("validate CRI v1 runtime API ...: server is not
        initialized yet", seen in a full run once the images had grown): it is started again a
        second later, until the deadline."""
        while True:
            before = _socket_id(DEVICE_PLUGIN_SOCKET)
            self._start_kubelet(n, pki)
            try:
                self._wait_device_plugin_socket(n, before, deadline)
                return
            except RuntimeError as e:
                if CRI_NOT_READY not in str(e) or time.monotonic() > deadline:
                    raise
                log.info("kubelet of %s: containerd's CRI not serving yet, starting it again", n.name)
                time.sleep(1)

    def _wait_device_plugin_socket(self, n: RealNode, before: tuple[int, int] | None, deadline: float) -> None:
        """Wait until `n`'s kubelet has bound its device-plugin socket. Every kubelet binds the same
        path whatever its root directory, clearing the folder first: two starting together can
        both clear it and then race to bind, and the loser fails its ContainerManager ("listen unix
        /var/lib/kubelet/device-plugins/kubelet.sock: bind: address already in use", seen once in a
        full run). One at a time, each clears the previous one's socket and binds its own."""
        limit = min(deadline, time.monotonic() + 60)
        while _socket_id(DEVICE_PLUGIN_SOCKET) in (None, before):
            p = self.procs[f"kubelet-{n.name}"]
            if p.poll() is not None:
                raise RuntimeError(f"kubelet of {n.name} exited:\n{self.logs_of('kubelet-' + n.name)[-3000:]}")
            if time.monotonic() > limit:
                raise TimeoutError(f"kubelet of {n.name} did not bind {DEVICE_PLUGIN_SOCKET}:\n"
                                   f"{self.logs_of('kubelet-' + n.name)[-3000:]}")
            time.sleep(0.1)

    def _copy_image_store(self) -> None:
        """Each node's containerd root: a hard-linked copy of the image store
        (blobs and unpacked layers are never written in place), with its own
        copies of the bolt databases, which are."""
        src = self.images_folder / "containerd" / "root"
        with open(self.images_folder / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)  # not while scripts/k8s-images writes it
            for n in self.nodes.values():
                t0 = time.monotonic()
                dst = n.dir / "containerd" / "root"
                dst.parent.mkdir(parents=True, exist_ok=True)
                _run("cp", "-a", "--link", str(src), str(dst), timeout=600)
                for db in src.rglob("*.db"):
                    target = dst / db.relative_to(src)
                    target.unlink()
                    _run("cp", "-a", str(db), str(target))
                log.info("%s: image store copied in %.1fs", n.name, time.monotonic() - t0)

    def _start_containerd(self, n: RealNode) -> None:
        d = n.dir
        for sub in ("containerd/state", "runc", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "cni" / "net.d" / "10-squall.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0",
            "name": "squall",
            "plugins": [
                {"type": "bridge", "bridge": n.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(d / "cni" / "ipam"),
                          "ranges": [[{"subnet": n.cidr, "gateway": n.gateway}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=2))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        (d / "containerd.toml").write_text(f"""version = 2
root = "{d / 'containerd/root'}"
state = "{d / 'containerd/state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{n.sock}"
[ttrpc]
  address = "{n.sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # root here lacks CAP_SYS_RESOURCE: the default -998 for sandboxes fails every pod
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d / 'runc'}"
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{d / 'cni/net.d'}"
  max_conf_num = 1
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'containerd/opt'}"
""")
        self._spawn(f"containerd-{n.name}", ["containerd", "--config", str(d / "containerd.toml"), "--log-level", "warn"])

    def _wait_containerd(self, n: RealNode, deadline: float) -> None:
        while True:
            p = self.procs[f"containerd-{n.name}"]
            if p.poll() is not None:
                raise RuntimeError(f"containerd of {n.name} exited:\n{self.logs_of('containerd-' + n.name)[-3000:]}")
            if n.sock.exists() and self.ctr(n.name, "version", check=False, timeout=10).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"containerd of {n.name} did not start:\n{self.logs_of('containerd-' + n.name)[-3000:]}")
            time.sleep(0.2)

    def images(self, node: str = "node-1") -> list[str]:
        """The image names a node's containerd holds."""
        return self.ctr(node, "images", "ls", "-q").stdout.split()

    def _start_dns(self, pki: Path) -> None:
        assert self.client is not None
        kc = self.dir / "coredns.kubeconfig"
        write_kubeconfig(kc, self.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key", "coredns")
        health, ready = free_port(), free_port()
        (self.dir / "Corefile").write_text(f""".:53 {{
    bind {self.dns_ip}
    errors
    health {self.dns_ip}:{health}
    ready {self.dns_ip}:{ready}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kc} squall-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loadbalance
}}
""")
        self._spawn("coredns", [str(self.bin / "coredns"), "-conf", str(self.dir / "Corefile")])
        self.client.create("/api/v1/namespaces/kube-system/services", {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
            "spec": {"clusterIP": DNS_SERVICE_IP, "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]},
        })
        # CoreDNS runs on the node network, not in a pod: its endpoints by hand
        self.client.create("/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kube-dns-coredns", "namespace": "kube-system",
                         "labels": {"kubernetes.io/service-name": "kube-dns",
                                    "endpointslice.kubernetes.io/managed-by": "squall-test"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.dns_ip], "conditions": {"ready": True}}],
            "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}],
        })

    def _start_proxy(self, pki: Path) -> None:
        kc = self.dir / "kube-proxy.kubeconfig"
        write_kubeconfig(kc, self.server, pki / "ca.crt", pki / "kube-proxy.crt", pki / "kube-proxy.key", "system:kube-proxy")
        first = next(iter(self.nodes.values()))
        (self.dir / "kube-proxy.yaml").write_text(json.dumps({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kc)},
            "mode": "iptables",
            "hostnameOverride": first.name,
            "bindAddress": first.ip,
            "healthzBindAddress": f"{self.host}:{free_port()}",
            "metricsBindAddress": f"{self.host}:{free_port()}",
            "clusterCIDR": f"{self.net}.0.0/16",
            "nodePortAddresses": ["primary"],
            # pods on one bridge reach each other through a Service: the
            # replies must come back through the rules too
            "iptables": {"masqueradeAll": True, "syncPeriod": "10s", "minSyncPeriod": "0s"},
            # leave the machine-wide conntrack settings alone
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }, indent=2))
        self._spawn("kube-proxy", [str(self.bin / "kube-proxy"), f"--config={self.dir / 'kube-proxy.yaml'}", "--v=1"])

    # -- NetworkPolicy
    def _mangle(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.in_netns("iptables", "-w", "5", "-t", "mangle", *args, check=check)

    def _netpol_chains(self) -> None:
        """The rules that hand the first packet of a connection to a NetworkPolicy agent
        (tests/k8s/go/netpol: kube-network-policies' controller, one per node), which accepts or
        drops it. Upstream writes them in nftables with the `queue` expression, which this
        kernel lacks (CONFIG_NFT_QUEUE); the xtables NFQUEUE target does the same here.

        In mangle POSTROUTING, before kube-proxy's SNAT (the source is still the pod's) and after
        its DNAT (a Service's packets carry the chosen pod's address), the same place upstream
        uses. Established and related packets pass, as do packets of the namespace's own root
        processes (the kubelets' probes: upstream's `meta skuid 0 accept`). A new connection to a
        node's pods goes to that node's agent, else one from its pods does: each agent knows every
        pod and policy and judges both the sender's egress and the receiver's ingress, so one
        verdict per packet is enough (the nodes share this namespace, where separate machines
        would each ask their own agent). `--queue-bypass`: while a node's agent is not
        reading its queue (not started yet, or its node failed), its packets pass unjudged."""
        self._mangle("-N", NETPOL_CHAIN)
        for sub in ("TO", "FROM"):
            self._mangle("-N", f"{NETPOL_CHAIN}-{sub}")
        self._mangle("-A", NETPOL_CHAIN, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN")
        self._mangle("-A", NETPOL_CHAIN, "-m", "owner", "--uid-owner", "0", "-j", "RETURN")
        self._mangle("-A", NETPOL_CHAIN, "-j", f"{NETPOL_CHAIN}-TO")
        self._mangle("-A", NETPOL_CHAIN, "-j", f"{NETPOL_CHAIN}-FROM")
        self._mangle("-A", "POSTROUTING", "-j", NETPOL_CHAIN)

    def _start_netpol(self, n: RealNode) -> None:
        """Node `n`'s NetworkPolicy agent and the rules sending its pods' new connections to it."""
        q = str(NETPOL_QUEUE_BASE + n.i)
        for sub, side in (("TO", "-d"), ("FROM", "-s")):
            rule = (f"{NETPOL_CHAIN}-{sub}", side, n.cidr, "-j", "NFQUEUE", "--queue-num", q, "--queue-bypass")
            if self._mangle("-C", *rule, check=False).returncode != 0:  # kept across a node's failure
                self._mangle("-A", *rule)
        n.netpol_metrics = f"{n.ip}:{free_port()}"
        self._spawn(f"netpol-{n.name}", [
            str(self.bin / "netpol"), f"--kubeconfig={self.kubeconfig}", f"--hostname-override={n.name}",
            f"--nfqueue-id={q}", f"--metrics-bind-address={n.netpol_metrics}", f"--v={self.verbosity}",
        ])

    def netpol_verdicts(self, node: str) -> dict[str, int]:
        """How many packets node's NetworkPolicy agent accepted and dropped (its /metrics)."""
        import urllib.request

        with urllib.request.urlopen(f"http://{self.nodes[node].netpol_metrics}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {"accept": 0, "drop": 0}
        for line in text.splitlines():
            if line.startswith("kube_network_policies_packet_count{"):
                labels, value = line.rsplit(" ", 1)
                for verdict in out:
                    if f'verdict="{verdict}"' in labels:
                        out[verdict] += int(float(value))
        return out

    def _make_cgroup_root(self, n: RealNode) -> None:
        """The kubelet wants its cgroup root to exist, in every v1 hierarchy."""
        for ctl in Path("/sys/fs/cgroup").iterdir():
            if ctl.name == "unified" or not (ctl / "cgroup.procs").exists():
                continue
            d = ctl / n.cgroup_root.lstrip("/")
            d.mkdir(exist_ok=True)
            for f in ("cpuset.cpus", "cpuset.mems"):  # an empty cpuset takes no tasks
                if (d / f).exists() and not (d / f).read_text().strip():
                    (d / f).write_text((ctl / f).read_text())

    def _start_kubelet(self, n: RealNode, pki: Path) -> None:
        d = n.dir
        self._make_cgroup_root(n)
        kc = d / "kubelet.kubeconfig"
        write_kubeconfig(kc, self.server, pki / "ca.crt", pki / f"node-{n.name}.crt", pki / f"node-{n.name}.key",
                         f"system:node:{n.name}")
        (d / "resolv.conf").write_text("")  # pods get only the cluster's DNS
        (d / "kubelet.yaml").write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # this machine has cgroup v1 only; 1.35+ refuses it without this
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": n.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{n.sock}",
            "address": n.ip, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": n.ip, "healthzPort": free_port(),
            "tlsCertFile": str(pki / "kubelet.crt"), "tlsPrivateKeyFile": str(pki / "kubelet.key"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "clusterDomain": "cluster.local", "clusterDNS": [DNS_SERVICE_IP],
            "resolvConf": str(d / "resolv.conf"),
            "podLogsDir": str(d / "pod-logs"),
            "failSwapOn": False,
            "serializeImagePulls": False,
            # the control-plane's node grace period is 10 s: renew well within it
            "nodeLeaseDurationSeconds": 8, "nodeStatusUpdateFrequency": "2s", "nodeStatusReportFrequency": "10s",
            "syncFrequency": "10s", "fileCheckFrequency": "10s",
            # a shared test machine: no evictions for its disk or memory, no image GC
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%",
                             "nodefs.inodesFree": "0%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "enforceNodeAllocatable": ["pods"],
            "protectKernelDefaults": False,
            "registerNode": True,
            "maxPods": 110,
        }, indent=2))
        self._spawn(f"kubelet-{n.name}", [
            str(self.bin / "kubelet"), f"--config={d / 'kubelet.yaml'}", f"--kubeconfig={kc}",
            f"--root-dir={d / 'kubelet'}", f"--cert-dir={d / 'kubelet' / 'pki'}",
            f"--hostname-override={n.name}", f"--node-ip={n.ip}",
            f"--node-labels=topology.kubernetes.io/zone=zone-{n.i},squall.dev/real-node=true",
            f"--v={self.verbosity}",
        ])

    # -- node failure
    def fail_node(self, name: str) -> None:
        """The node dies: its kubelet, NetworkPolicy agent, every container on it and its
        containerd are killed; the control plane finds out by the missed heartbeats."""
        n = self.nodes[name]
        for proc in (f"kubelet-{name}", f"netpol-{name}"):
            p = self.procs.get(proc)
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self._kill_containers(n)
        p = self.procs.get(f"containerd-{name}")
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        n.failed = True

    def restore_node(self, name: str, timeout: float = 120) -> None:
        """The node comes back like a rebooted machine: its containerd, NetworkPolicy agent and
        kubelet start again on the same root directories, and the kubelet restarts the pods still
        bound to it."""
        n = self.nodes[name]
        p = self.procs.get(f"containerd-{name}")
        if p is None or p.poll() is not None:
            self._start_containerd(n)
            self._wait_containerd(n, time.monotonic() + timeout)
        p = self.procs.get(f"netpol-{name}")
        if p is None or p.poll() is not None:
            self._start_netpol(n)
        self._start_kubelet_on_cri(n, self.dir / "pki", time.monotonic() + timeout)
        n.failed = False

    # -- tear-down
    def _node_pids(self, n: RealNode) -> set[int]:
        """Every process in the node's cgroups, and its containerd shims."""
        pids: set[int] = set()
        base = Path("/sys/fs/cgroup/pids") / n.cgroup_root.lstrip("/")
        if base.is_dir():
            for procs in base.rglob("cgroup.procs"):
                try:
                    pids.update(int(x) for x in procs.read_text().split())
                except OSError:
                    pass
        needle = str(n.sock).encode()
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    cmd = (d / "cmdline").read_bytes()
                except OSError:
                    continue
                if cmd.startswith(b"/usr/bin/containerd-shim") and needle in cmd:
                    pids.add(int(d.name))
        return pids

    def _kill_containers(self, n: RealNode) -> None:
        self._remember_netns(n)
        for _ in range(20):
            pids = self._node_pids(n)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)

    def _remember_netns(self, n: RealNode) -> None:
        """The pods' network namespaces (bind mounts under /run/netns), from the sandboxes' specs."""
        if f"containerd-{n.name}" not in self.procs or not n.sock.exists():
            return
        r = self.ctr(n.name, "containers", "ls", "-q", "labels.\"io.cri-containerd.kind\"==sandbox", check=False, timeout=30)
        for cid in r.stdout.split():
            info = self.ctr(n.name, "containers", "info", cid, check=False, timeout=30)
            try:
                spec = json.loads(info.stdout)["Spec"]
            except (ValueError, KeyError):
                continue
            for ns in spec.get("linux", {}).get("namespaces", []):
                if ns.get("type") == "network" and ns.get("path"):
                    self._netns_paths.add(ns["path"])

    def _stop_nodes(self) -> None:
        for name in list(self.procs):
            if name.startswith("kubelet-"):
                p = self.procs.pop(name)
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
                    try:
                        p.wait(5)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
        for n in self.nodes.values():
            self._kill_containers(n)

    def _cleanup(self) -> None:
        # mounts under the work folder (kubelet volumes, containerd's rootfs and shm), deepest first
        mine = str(self.dir) + "/"
        for _ in range(3):
            mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                      if line.split()[4].startswith(mine)]
            if not mounts:
                break
            for m in sorted(mounts, key=len, reverse=True):
                _run("umount", "-l", m, check=False)
        for p in self._netns_paths:
            _run("umount", p, check=False)
            try:
                os.unlink(p)
            except OSError:
                pass
        for n in self.nodes.values():
            for ctl in Path("/sys/fs/cgroup").iterdir():
                base = ctl / n.cgroup_root.lstrip("/")
                if base.is_dir():
                    for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                        try:
                            d.rmdir()
                        except OSError:
                            pass
                    try:
                        base.rmdir()
                    except OSError:
                        pass
        if self.slot is not None:
            self._cleanup_network()
        if not os.environ.get("SQUALL_K8S_KEEP"):  # gigabytes of unpacked images; the logs stay
            import shutil

            for n in self.nodes.values():
                for sub in ("containerd", "runc", "kubelet"):
                    shutil.rmtree(n.dir / sub, ignore_errors=True)
        if self._made_var_lib_kubelet:
            import shutil

            shutil.rmtree("/var/lib/kubelet", ignore_errors=True)
        if self.slot is not None:
            self.slot.release()
            self.slot = None

    def _cleanup_network(self) -> None:
        _run("ip", "link", "del", self.veth, check=False)
        _run("ip", "netns", "del", self.netns, check=False)

    # -- helpers for tests
    def wait_service_routed(self, namespace: str, name: str, timeout: float = 60) -> str:
        """Waits until the Service has a ready endpoint and kube-proxy wrote
        its rules; returns its cluster IP."""
        assert self.client is not None
        deadline = time.monotonic() + timeout
        while True:
            svc = self.client.get(f"/api/v1/namespaces/{namespace}/services/{name}")
            ip = svc["spec"].get("clusterIP", "")
            slices = self.client.get(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
                                     f"?labelSelector=kubernetes.io/service-name={name}")["items"]
            ready = any((e.get("conditions") or {}).get("ready") for s in slices for e in s.get("endpoints") or [])
            rules = self.in_netns("iptables-save", "-t", "nat", check=False).stdout
            if ready and ip and f"{namespace}/{name}" in rules and ip in rules:
                return ip
            if time.monotonic() > deadline:
                raise TimeoutError(f"Service {namespace}/{name} not routed after {timeout}s (ready={ready})")
            time.sleep(0.3)


def main(argv: list[str] | None = None) -> int:
    """scripts/k8s-up --real: the real-node cluster in the foreground until Ctrl-C."""
    args = cli_args("Start the Squall test Kubernetes cluster with real nodes.", 2, argv)

    def banner(c: RealNodeCluster) -> str:
        return f"""
Squall test cluster {c.version} is up with real nodes ({', '.join(f'{n.name} {n.ip}' for n in c.nodes.values())}).
  export KUBECONFIG={c.kubeconfig}
  export PATH={c.bin}:$PATH
  kubectl get nodes -o wide
Network namespace: {c.netns}  (ip netns exec {c.netns} iptables-save)
Images:           {', '.join(i for i in c.images() if not i.startswith('sha256:'))}
Component logs:   {c.dir / 'logs'}
Ctrl-C stops everything."""

    return run_in_foreground(RealNodeCluster(args.bin, args.dir, nodes=args.nodes), banner, start_timeout=300)


if __name__ == "__main__":
    sys.exit(main())
