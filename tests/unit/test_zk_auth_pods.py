"""ZooKeeper credentials on Kubernetes (docs/reliability.md "ZooKeeper ACLs"): the operator
writes each topology's credentials into a Secret of its own, owned by the Topology, before its
first worker pod, and the worker pods get its key as SQUALL_ZK_AUTH (secretKeyRef). Plain
values and the fake API of the operator's unit tests; the real API server and ZooKeeper are in
tests/k8s (every e2e test runs with the chart's default: ACLs on)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from test_operator_kube_nimbus import SPEC, Clock, FakeApi, FakeState

from squall.models.cluster import WorkerSlot
from squall.state import ZkCredentials
from squall_operator import pods
from squall_operator.kube_nimbus import KubeNimbus, OperatorConfig

pytestmark = pytest.mark.unit

CREDS = ZkCredentials("squall", "s3cret")


class SecretApi(FakeApi):
    def __init__(self) -> None:
        super().__init__()
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []

    def apply_secret(self, namespace: str, body: dict[str, Any]) -> None:
        self.calls.append("secret")
        self.secrets[(namespace, body["metadata"]["name"])] = body

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        self.calls.append("pod")
        super().create_pod(namespace, body)


def make(credentials: ZkCredentials | None) -> tuple[KubeNimbus, SecretApi]:
    api = SecretApi()
    config = OperatorConfig(
        zookeeper="zk:2181",
        worker=pods.WorkerPodConfig(image="squall-worker:t", zookeeper="zk:2181", zk_auth=credentials is not None),
        slots=pods.SlotConfig(default_slots=2),
        zk_credentials=credentials,
    )
    nimbus = KubeNimbus(FakeState(), api, config, clock=Clock())  # type: ignore[arg-type]
    nimbus.refresh_nodes()
    nimbus.startup()
    return nimbus, api


def test_the_secret_is_written_before_the_first_pod_and_mounted() -> None:
    nimbus, api = make(CREDS)
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    assert api.calls[0] == "secret" and api.calls.count("pod") == 2
    secret = api.secrets[("ns", "wc-zk-auth")]
    assert base64.b64decode(secret["data"]["credentials"]).decode() == "squall:s3cret"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    for pod in api.pods.values():
        (c,) = pod["spec"]["containers"]
        assert {"name": "SQUALL_ZK_AUTH", "valueFrom": {"secretKeyRef": {"name": "wc-zk-auth", "key": "credentials"}}} \
            in c["env"]
    # written once per topology, not every round
    nimbus.round()
    assert api.calls.count("secret") == 1


def test_without_credentials_no_secret_and_no_env() -> None:
    nimbus, api = make(None)
    nimbus.register("ns", "wc", "uid-1", 1, SPEC)
    nimbus.round()
    # no ZooKeeper credentials Secret (the Topology's CURVE pair has one of its own)
    assert list(api.secrets) == [("ns", pods.curve_secret_name("wc", "uid-1"))] and api.calls.count("pod") == 2
    assert all("zk-auth" not in str(p) and "SQUALL_ZK_AUTH" not in str(p) for p in api.pods.values())


def test_the_worker_pod_template_hash_changes_with_auth() -> None:
    on = pods.WorkerPodConfig(image="i", zookeeper="zk", zk_auth=True)
    off = pods.WorkerPodConfig(image="i", zookeeper="zk")
    slot = WorkerSlot("n1", 6700)
    assert pods.worker_pod("t", "u", "ns", slot, on)["metadata"]["annotations"][pods.ANNOTATION_TEMPLATE] != \
        pods.worker_pod("t", "u", "ns", slot, off)["metadata"]["annotations"][pods.ANNOTATION_TEMPLATE]


def test_operator_reads_its_credentials_file(tmp_path: Any) -> None:
    from squall_operator.operator_main import config_from_args, parser

    path = CREDS.write(tmp_path / "credentials")
    config = config_from_args(parser().parse_args(["--zookeeper", "zk:2181", "--zk-auth-file", str(path)]))
    assert config.zk_credentials == CREDS and config.worker.zk_auth
    (tmp_path / "bad").write_text("no-colon\n")
    with pytest.raises(SystemExit, match="--zk-auth-file: .*bad.*user:password"):
        config_from_args(parser().parse_args(["--zookeeper", "zk:2181", "--zk-auth-file", str(tmp_path / "bad")]))


def test_operator_reads_its_credentials_from_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from squall_operator.operator_main import config_from_args, parser

    monkeypatch.setenv("SQUALL_ZK_AUTH", "squall:s3cret")
    config = config_from_args(parser().parse_args(["--zookeeper", "zk:2181"]))
    assert config.zk_credentials == CREDS and config.worker.zk_auth
    monkeypatch.setenv("SQUALL_ZK_AUTH", "squall")
    with pytest.raises(SystemExit, match=r"\$SQUALL_ZK_AUTH.*user:password"):
        config_from_args(parser().parse_args(["--zookeeper", "zk:2181"]))
