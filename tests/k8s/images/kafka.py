"""Entrypoint of the `squall-kafka` image (Dockerfile.kafka): one Apache Kafka node in KRaft mode
(broker and controller), from the Maven Central jars that scripts/setup fetches for
`squall kafka up` (copied to /opt/kafka/libs by scripts/k8s-images), with the same
server.properties (and log4j2 configuration) as `squall.kafka.broker` except for its listeners:

- PLAINTEXT on KAFKA_LISTENER_PORT (9092) on every address, advertised as KAFKA_ADVERTISED_HOST (default:
  the pod's hostname; a Service name such as `kafka` for clients in the cluster);
- EXTERNAL on KAFKA_EXTERNAL_PORT (9094) when KAFKA_EXTERNAL_HOST is set (e.g. the pod's IP from
  the downward API), for clients that cannot resolve the Service name (the tests, on the nodes);
- CONTROLLER on 127.0.0.1:KAFKA_CONTROLLER_PORT (9093): the node is its own quorum;
- LOCAL on 127.0.0.1:KAFKA_LOCAL_PORT (9095), advertised as itself: this process creates the
  topics through it (the Service name may not lead back to its own pod: no hairpin traffic).

KAFKA_DATA_DIR (/var/lib/kafka/data) holds the log; the configuration goes to KAFKA_CONF_DIR
(/tmp/kafka): with a read-only root filesystem both are volumes (an emptyDir each, or one for
/var/lib/kafka and one for /tmp). KAFKA_CREATE_TOPICS ("clicks:3,click-counts") creates topics
once the broker answers (as the official images' KAFKA_CREATE_TOPICS); KAFKA_AUTO_CREATE_TOPICS
("true") turns automatic creation on; KAFKA_HEAP (512m) sizes the heap. The JVM is a child of this
process, which passes SIGTERM/SIGINT on (a clean shutdown) and exits with its status.
"""

from __future__ import annotations

import base64
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from squall.kafka.broker import LOG4J2_CONFIG, server_properties


def main() -> int:
    env = os.environ
    port = int(env.get("KAFKA_LISTENER_PORT", "9092"))  # not KAFKA_PORT: a Service `kafka` sets that
    cport = int(env.get("KAFKA_CONTROLLER_PORT", "9093"))
    host = env.get("KAFKA_ADVERTISED_HOST") or socket.gethostname()
    data = Path(env.get("KAFKA_DATA_DIR", "/var/lib/kafka/data"))
    conf = Path(env.get("KAFKA_CONF_DIR", "/tmp/kafka"))
    data.mkdir(parents=True, exist_ok=True)
    conf.mkdir(parents=True, exist_ok=True)
    listeners = [f"PLAINTEXT://0.0.0.0:{port}", f"CONTROLLER://127.0.0.1:{cport}"]
    advertised = [f"PLAINTEXT://{host}:{port}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    lport = int(env.get("KAFKA_LOCAL_PORT", "9095"))
    listeners.append(f"LOCAL://127.0.0.1:{lport}")
    advertised.append(f"LOCAL://127.0.0.1:{lport}")
    protocols.append("LOCAL:PLAINTEXT")
    if env.get("KAFKA_EXTERNAL_HOST"):
        eport = int(env.get("KAFKA_EXTERNAL_PORT", "9094"))
        listeners.append(f"EXTERNAL://0.0.0.0:{eport}")
        advertised.append(f"EXTERNAL://{env['KAFKA_EXTERNAL_HOST']}:{eport}")
        protocols.append("EXTERNAL:PLAINTEXT")
    props = server_properties(
        data_dir=str(data), port=port, controller_port=cport,
        auto_create_topics=env.get("KAFKA_AUTO_CREATE_TOPICS", "false") == "true",
        num_partitions=int(env.get("KAFKA_NUM_PARTITIONS", "1")),
        extra={"listeners": ",".join(listeners), "advertised.listeners": ",".join(advertised),
               "listener.security.protocol.map": ",".join(protocols)})
    (conf / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (conf / "log4j2.properties").write_text(LOG4J2_CONFIG)
    java = str(Path(env["JAVA_HOME"], "bin", "java")) if env.get("JAVA_HOME") else shutil.which("java") or "java"
    jars = sorted(glob.glob(env.get("KAFKA_LIBS", "/opt/kafka/libs") + "/*.jar"))
    # -XX:-UsePerfData: no hsperfdata file under /tmp; the heap as asked
    jvm = [java, f"-Xmx{env.get('KAFKA_HEAP', '512m')}", "-XX:+UseG1GC", "-XX:-UsePerfData",
           "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={conf / 'log4j2.properties'}",
           "-cp", os.pathsep.join(jars)]
    if not (data / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        subprocess.run([*jvm, "kafka.tools.StorageTool", "format", "--ignore-formatted", "-t", cluster_id,
                        "-c", str(conf / "server.properties")], check=True, stdout=subprocess.DEVNULL)
    proc = subprocess.Popen([*jvm, "kafka.Kafka", str(conf / "server.properties")])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: proc.send_signal(s))
    topics = {}
    for item in filter(None, (t.strip() for t in env.get("KAFKA_CREATE_TOPICS", "").split(","))):
        name, _, parts = item.partition(":")
        topics[name] = int(parts or 1)
    if topics:
        create(lport, topics, proc)
    return proc.wait()


def create(port: int, topics: dict[str, int], proc: subprocess.Popen[bytes]) -> None:
    """Create `topics` once the broker answers on 127.0.0.1:`port` (retried for two minutes)."""
    from squall.kafka.admin import create_topics

    deadline = time.monotonic() + 120
    while proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            made = create_topics(f"127.0.0.1:{port}", topics, timeout=10)
            print(f"kafka.py: topics {sorted(topics)} present (created {sorted(made)})", flush=True)
            return
        except Exception as exc:  # the broker is still starting
            if time.monotonic() > deadline:
                print(f"kafka.py: could not create {sorted(topics)}: {exc}", file=sys.stderr, flush=True)
                return
            time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
