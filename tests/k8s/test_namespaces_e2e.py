"""Two namespaces each run a Topology of one name at once.

The operator keys a topology in ZooKeeper by namespace and name (`NAMESPACE~NAME`,
squall.topology_keys), so the same small word count applied as `twin` in squall-e2e and in
squall-e2e-b runs twice, each with its own workers acking; deleting one leaves the other running
and acking. The release is the session's `squall` (conftest.py), whose operator watches both
namespaces (test_operator_e2e.e2e_release).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from .cluster import Cluster
from .conftest import kget, wait_for
from .test_operator_e2e import NS, NS_B, WORDCOUNT

pytestmark = pytest.mark.k8s

NAME = "twin"


def _status(c: Cluster, ns: str) -> dict[str, Any]:
    return dict(kget(c, "topology", NAME, "-n", ns).get("status") or {})


def _acked(c: Cluster, ns: str) -> int:
    return int((_status(c, ns).get("components") or {}).get("sentences", {}).get("acked", 0))


def _running_and_acking(c: Cluster, ns: str) -> dict[str, Any] | None:
    st = _status(c, ns)
    ok = st.get("phase") == "Running" and st.get("workers") == "1/1" and _acked(c, ns) > 0
    return st if ok else None


def _worker_keys(c: Cluster, ns: str) -> set[str]:
    """The --topology each worker pod of `twin` in `ns` was given: its key in ZooKeeper."""
    keys = set()
    for pod in kget(c, "pods", "-n", ns, "-l", f"squall.io/topology={NAME}")["items"]:
        args = pod["spec"]["containers"][0]["args"]
        keys.add(args[args.index("--topology") + 1])
    return keys


def test_a_topology_of_one_name_runs_in_two_namespaces_and_one_delete_leaves_the_other(squall: Cluster) -> None:
    c = squall
    doc = yaml.safe_load(WORDCOUNT.read_text())
    doc["metadata"]["name"] = NAME
    doc["spec"]["numWorkers"] = 1
    doc["spec"]["killWaitSecs"] = 1
    body = yaml.safe_dump(doc)
    try:
        for ns in (NS, NS_B):
            c.kubectl("apply", "-n", ns, "-f", "-", input=body)
        for ns in (NS, NS_B):
            wait_for(lambda ns=ns: _running_and_acking(c, ns), 90, what=f"{ns}/{NAME} Running 1/1 and acking")
            assert _worker_keys(c, ns) == {f"{ns}~{NAME}"}
            assert not _status(c, ns).get("message", "").startswith("a topology named"), _status(c, ns)

        c.kubectl("delete", "topology", NAME, "-n", NS_B, "--wait=false")
        wait_for(lambda: c.kubectl("get", "topology", NAME, "-n", NS_B, check=False).returncode != 0, 60,
                 what=f"{NS_B}/{NAME} to be removed")
        # the other one is unaffected: still Running, its acks still growing
        st = _status(c, NS)
        assert st["phase"] == "Running" and st["workers"] == "1/1", st
        before = _acked(c, NS)
        wait_for(lambda: _acked(c, NS) > before, 30, interval=1, what=f"{NS}/{NAME} acking after the delete")
        assert _worker_keys(c, NS) == {f"{NS}~{NAME}"}
    finally:
        for ns in (NS_B, NS):
            c.kubectl("delete", "topology", NAME, "-n", ns, "--wait=false", check=False)
        for ns in (NS_B, NS):
            wait_for(lambda ns=ns: c.kubectl("get", "topology", NAME, "-n", ns, check=False).returncode != 0, 60,
                     what=f"{ns}/{NAME} to be removed")
