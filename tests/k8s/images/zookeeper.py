"""Stand-in for the official `zookeeper` image: runs the ZooKeeper server from
the jars that PySpark ships. The process kubelet runs it as a host process
(image map); scripts/k8s-images builds it into the `zookeeper:3.9` image
(Dockerfile.zookeeper) that the real nodes run.

Reads the official image's variables: ZOO_MY_ID, ZOO_SERVERS ("server.1=host:
2888:3888;2181 server.2=..."), ZOO_TICK_TIME, ZOO_INIT_LIMIT, ZOO_SYNC_LIMIT,
ZOO_MAX_CLIENT_CNXNS, ZOO_4LW_COMMANDS_WHITELIST, ZOO_STANDALONE_ENABLED,
ZOO_ADMINSERVER_ENABLED, ZOO_DATA_DIR (default: ./data), ZOO_DATA_LOG_DIR,
ZOO_CONF_DIR (where zoo.cfg is written; default: the working directory),
JVMFLAGS; and ZOO_CLIENT_PORT (default 2181). Under the process kubelet
(SQUALL_POD_DIR set) ZOO_DATA_LOG_DIR is ignored, since it mounts no volumes
and such a path would be the machine's own, and the client port is bound to
the pod's address (SQUALL_POD_IP), so ZooKeeper pods on different nodes do
not collide; in a container it listens on every address of the pod.
Arguments (the image's CMD, "zkServer.sh start-foreground") are ignored.
"""

import glob
import importlib.util
import os
import shlex
import shutil
from pathlib import Path

env = os.environ
spec = importlib.util.find_spec("pyspark")  # its jars, without importing Spark
assert spec is not None and spec.submodule_search_locations, "pyspark is not installed"
jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
data = Path(env.get("ZOO_DATA_DIR") or Path.cwd() / "data")
data.mkdir(parents=True, exist_ok=True)
process_kubelet = bool(env.get("SQUALL_POD_DIR"))
port = env.get("ZOO_CLIENT_PORT", "2181")
cfg = [f"dataDir={data}", f"clientPort={port}"]
if process_kubelet:
    cfg.append(f"clientPortAddress={env.get('SQUALL_POD_IP', '127.0.0.1')}")
elif env.get("ZOO_DATA_LOG_DIR"):
    Path(env["ZOO_DATA_LOG_DIR"]).mkdir(parents=True, exist_ok=True)
    cfg.append(f"dataLogDir={env['ZOO_DATA_LOG_DIR']}")
cfg += [
    f"tickTime={env.get('ZOO_TICK_TIME', '2000')}",
    f"initLimit={env.get('ZOO_INIT_LIMIT', '5')}",
    f"syncLimit={env.get('ZOO_SYNC_LIMIT', '2')}",
    f"maxClientCnxns={env.get('ZOO_MAX_CLIENT_CNXNS', '60')}",
    f"4lw.commands.whitelist={env.get('ZOO_4LW_COMMANDS_WHITELIST', 'srvr,ruok,stat,mntr')}",
    f"admin.enableServer={env.get('ZOO_ADMINSERVER_ENABLED', 'false')}",
    f"standaloneEnabled={env.get('ZOO_STANDALONE_ENABLED', 'true')}",
    "quorumListenOnAllIPs=false",
]
servers = env.get("ZOO_SERVERS", "").split()
for s in servers:
    cfg.append(s)
if servers:
    (data / "myid").write_text(env.get("ZOO_MY_ID", "1") + "\n")
conf = Path(env.get("ZOO_CONF_DIR") or Path.cwd()) / "zoo.cfg"
conf.parent.mkdir(parents=True, exist_ok=True)
conf.write_text("\n".join(cfg) + "\n")
java = str(Path(env["JAVA_HOME"], "bin", "java")) if env.get("JAVA_HOME") else shutil.which("java") or "java"
cp = os.pathsep.join(sorted(glob.glob(str(jars / "*.jar"))))
jvm = shlex.split(env.get("JVMFLAGS", ""))
if not any(f.startswith("-Xmx") for f in jvm):
    jvm.insert(0, "-Xmx256m")
os.execvp(java, [java, *jvm, "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(conf)])
