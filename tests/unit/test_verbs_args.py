"""The verbs' argument parsing and `squall list`'s table (pure; no cluster)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from squall_operator.cli import app
from squall_operator.verbs import TopologyRow, VerbError, format_list, parse_executors, parse_zookeeper
from squall_operator.verbs_cli import kubectl_app

pytestmark = pytest.mark.unit


def test_parse_executors() -> None:
    assert parse_executors(["split=3", " count = 4 "]) == {"split": 3, "count": 4}
    assert parse_executors([]) == {}


@pytest.mark.parametrize("bad", ["split", "=3", "split=", "split=0", "split=-1", "split=x", "split=1.5"])
def test_parse_executors_refuses(bad: str) -> None:
    with pytest.raises(VerbError) as err:
        parse_executors([bad])
    assert err.value.code == 2 and repr(bad) in str(err.value)


def test_parse_zookeeper() -> None:
    assert parse_zookeeper("127.0.0.1:2181") == ("127.0.0.1:2181", "/squall")
    assert parse_zookeeper("a:1,b:2/squall-local-1-2") == ("a:1,b:2", "/squall-local-1-2")
    assert parse_zookeeper("zk:2181/x/y/") == ("zk:2181", "/x/y")


@pytest.mark.parametrize("bad", ["", "zk", "zk:", "zk:port", ":2181", "zk:2181/", "zk:99999", "a:1,b/x"])
def test_parse_zookeeper_refuses(bad: str) -> None:
    with pytest.raises(VerbError) as err:
        parse_zookeeper(bad)
    assert err.value.code == 2


def test_format_list_like_storm() -> None:
    assert format_list([]) == "No topologies running."
    text = format_list([TopologyRow("wordcount", "ACTIVE", 28, 3, 1234),
                        TopologyRow("a-much-longer-name", "INACTIVE", 5, 1, 7)])
    lines = text.splitlines()
    assert lines[0].split() == ["Topology_name", "Status", "Num_tasks", "Num_workers", "Uptime_secs"]
    assert set(lines[1]) == {"-"}
    assert lines[2].split() == ["wordcount", "ACTIVE", "28", "3", "1234"]
    assert lines[3].split() == ["a-much-longer-name", "INACTIVE", "5", "1", "7"]
    # columns line up
    assert lines[2].index("ACTIVE") == lines[3].index("INACTIVE") == lines[0].index("Status")


def test_verb_without_target_is_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(app, ["deactivate", "wordcount"], env={"SQUALL_ZOOKEEPER": ""})
    assert result.exit_code == 2
    assert "give --zookeeper" in result.output and "Traceback" not in result.output


def test_zookeeper_and_kubernetes_together_are_refused() -> None:
    result = CliRunner().invoke(app, ["list", "--zookeeper", "zk:2181", "--kubernetes"])
    assert result.exit_code == 2 and "not both" in result.output


def test_kubectl_plugin_has_the_verbs_and_no_local_target() -> None:
    result = CliRunner().invoke(kubectl_app, ["rebalance", "--help"])
    assert result.exit_code == 0
    assert "--num-workers" in result.output and "--namespace" in result.output
    assert "--zookeeper" not in result.output
    for verb in ("list", "activate", "deactivate", "rebalance", "kill"):
        assert CliRunner().invoke(kubectl_app, [verb, "--help"]).exit_code == 0


def test_format_list_of_every_namespace_has_a_namespace_column() -> None:
    text = format_list([TopologyRow("wordcount", "ACTIVE", 28, 3, 1234, "team-a"),
                        TopologyRow("ids", "INACTIVE", 5, 1, 7, "b")], namespaces=True)
    lines = text.splitlines()
    assert lines[0].split() == ["Namespace", "Topology_name", "Status", "Num_tasks", "Num_workers",
                                "Uptime_secs"]
    assert lines[2].split() == ["team-a", "wordcount", "ACTIVE", "28", "3", "1234"]
    assert lines[3].split() == ["b", "ids", "INACTIVE", "5", "1", "7"]
    assert lines[2].index("wordcount") == lines[3].index("ids") == lines[0].index("Topology_name")


def test_all_namespaces_on_a_local_cluster_is_refused() -> None:
    for flag in ("--all-namespaces", "-A"):
        result = CliRunner().invoke(app, ["list", "--zookeeper", "zk:2181", flag])
        assert result.exit_code == 2, result.output
        assert "--all-namespaces goes with --kubernetes" in result.output and "Traceback" not in result.output
    assert "--all-namespaces" in CliRunner().invoke(kubectl_app, ["list", "--help"]).output
