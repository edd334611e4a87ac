"""`squall operator` arguments -> OperatorConfig."""

from __future__ import annotations

import pytest

from squall_operator.operator_main import config_from_args, parser

pytestmark = pytest.mark.unit


def test_arguments_become_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SQUALL_NAMESPACES", raising=False)
    args = parser().parse_args([
        "--zookeeper=zk:2181", "--zk-root=/s", "--namespace=a", "--namespace=b",
        "--worker-image=w:1", "--worker-command=python -m squall.worker",
        '--worker-resources={"requests": {"cpu": "1"}}', "--worker-env=A=1",
        "--search-path=/app", "--node-selector=pool=stream", "--slots-per-node=2",
        "--base-port=7000", "--monitor-freq-secs=1", "--task-timeout-secs=5", "--lease-name=l",
        "--lease-namespace=ops", "--worker-metrics-port-offset=500", "--worker-scrape-annotations=false",
    ])
    config = config_from_args(args)
    assert config.zookeeper == "zk:2181" and config.zk_root == "/s"
    assert config.namespaces == ("a", "b")
    assert config.worker.image == "w:1" and config.worker.command == ("python", "-m", "squall.worker")
    assert config.worker.resources == {"requests": {"cpu": "1"}} and config.worker.env == {"A": "1"}
    assert config.worker.zookeeper == "zk:2181" and config.worker.search_paths == ("/app",)
    assert config.slots.node_selector == {"pool": "stream"} and config.slots.default_slots == 2
    assert config.slots.base_port == 7000 and config.monitor_freq_secs == 1
    assert config.task_timeout_secs == 5 and config.lease_name == "l" and config.lease_namespace == "ops"
    assert config.worker.metrics_port_offset == 500 and config.worker.scrape_annotations is False


def test_environment_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQUALL_ZOOKEEPER", "zk:1")
    monkeypatch.setenv("SQUALL_NAMESPACES", "x, y")
    monkeypatch.setenv("SQUALL_SEARCH_PATHS", "/a:/b")
    config = config_from_args(parser().parse_args([]))
    assert config.zookeeper == "zk:1" and config.namespaces == ("x", "y")
    assert config.worker.search_paths == ("/a", "/b") and config.worker.command == ()
    monkeypatch.delenv("SQUALL_ZOOKEEPER")
    with pytest.raises(SystemExit, match="--zookeeper"):
        config_from_args(parser().parse_args([]))
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        config_from_args(parser().parse_args(["--zookeeper=z", "--worker-env=oops"]))
