"""Stand-in for the official `zookeeper` image under the process kubelet:
runs the ZooKeeper server from the jars that PySpark ships.

Reads the official image's variables: ZOO_MY_ID, ZOO_SERVERS ("server.1=host:
2888:3888;2181 server.2=..."), ZOO_TICK_TIME, ZOO_INIT_LIMIT, ZOO_SYNC_LIMIT,
ZOO_MAX_CLIENT_CNXNS, ZOO_4LW_COMMANDS_WHITELIST, ZOO_STANDALONE_ENABLED,
ZOO_ADMINSERVER_ENABLED, ZOO_DATA_DIR (default: ./data), JVMFLAGS; and
ZOO_CLIENT_PORT (default 2181). ZOO_DATA_LOG_DIR is ignored (the process
kubelet mounts no volumes, so such a path would be the machine's own). The client port is bound to the pod's address
(SQUALL_POD_IP), so ZooKeeper pods on different nodes do not collide.
Arguments (the image's CMD, "zkServer.sh start-foreground") are ignored.
"""

import glob
import os
import shlex
import shutil
from pathlib import Path

import pyspark

env = os.environ
jars = Path(pyspark.__file__).parent / "jars"
data = Path(env.get("ZOO_DATA_DIR") or Path.cwd() / "data")
data.mkdir(parents=True, exist_ok=True)
ip = env.get("SQUALL_POD_IP", "127.0.0.1")
port = env.get("ZOO_CLIENT_PORT", "2181")
cfg = [
    f"dataDir={data}",
    f"clientPort={port}",
    f"clientPortAddress={ip}",
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
conf = Path.cwd() / "zoo.cfg"
conf.write_text("\n".join(cfg) + "\n")
java = shutil.which("java") or "java"
cp = os.pathsep.join(sorted(glob.glob(str(jars / "*.jar"))))
jvm = shlex.split(env.get("JVMFLAGS", ""))
if not any(f.startswith("-Xmx") for f in jvm):
    jvm.insert(0, "-Xmx256m")
os.execvp(java, [java, *jvm, "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(conf)])
