"""The Redis state provider against a real redis-server on loopback (the `redis_server`
fixture): Storm's KeyValueState transactions, persistence across providers, and a Redis that
cannot be reached named at open."""

from __future__ import annotations

import pytest

from squall.statebackend import StateBackendError, open_provider

pytestmark = pytest.mark.integration


def conf(server, **extra):  # type: ignore[no-untyped-def]
    return {"topology.name": "t1", "topology.state.provider": "redis",
            "topology.state.provider.config": {**server.provider_config(), **extra}}


def test_prepare_commit_rollback_persist_in_redis(redis_server) -> None:  # type: ignore[no-untyped-def]
    provider = open_provider(conf(redis_server))
    state = provider.state("count-3")
    assert len(state) == 0
    state.put("a", 1)
    state.put(("k", 2), {"nested": [1, 2]})
    state.prepare_commit(1)
    state.commit(1)
    state.put("a", 2)
    state.delete(("k", 2))
    state.prepare_commit(2)
    # a state opened afresh (a restarted worker) sees the last commit, not the prepared txid 2
    again = provider.state("count-3")
    assert dict(again) == {"a": 1, ("k", 2): {"nested": [1, 2]}}
    # ...and can roll txid 2 forward: its changes were persisted at prepare (Storm's COMMITTING)
    again.commit(2)
    assert dict(provider.state("count-3")) == {"a": 2}
    assert again.committed_txid() == 2
    state.commit(2)  # the same commit from the old instance: a no-op
    assert dict(provider.state("count-3")) == {"a": 2}
    # rollback drops prepared and pending changes and reads the commit again
    state.put("b", 5)
    state.prepare_commit(3)
    state.put("c", 6)
    state.rollback()
    assert dict(state) == {"a": 2}
    assert dict(provider.state("count-3")) == {"a": 2}
    # namespaces are separate
    assert dict(provider.state("count-4")) == {}
    with pytest.raises(StateBackendError, match="not prepared"):
        state.commit(7)


def test_keys_live_under_the_topology_prefix(redis_server) -> None:  # type: ignore[no-untyped-def]
    state = open_provider(conf(redis_server)).state("count-1")
    state.put("w", 3)
    state.prepare_commit(0)
    state.commit(0)
    keys = sorted(k.decode() for k in redis_server.client().keys("*"))
    assert keys == ["squall:t1:count-1", "squall:t1:count-1$txid"]


def test_two_namespaces_topologies_of_one_name_keep_their_states_apart(redis_server) -> None:  # type: ignore[no-untyped-def]
    """Both named `t1` (topology.name), keyed apart (squall.topology.key, the worker's key:
    NAMESPACE~NAME on Kubernetes): one Redis, two states; a bare key is the name's prefix."""
    a = open_provider({**conf(redis_server), "squall.topology.key": "team-a~t1"}).state("count#0")
    b = open_provider({**conf(redis_server), "squall.topology.key": "team-b~t1"}).state("count#0")
    a.put("w", 1)
    b.put("w", 2)
    for s, txid in ((a, 0), (b, 0)):
        s.prepare_commit(txid)
        s.commit(txid)
    assert dict(open_provider({**conf(redis_server), "squall.topology.key": "team-a~t1"}).state("count#0")) == {"w": 1}
    assert dict(open_provider({**conf(redis_server), "squall.topology.key": "team-b~t1"}).state("count#0")) == {"w": 2}
    keys = sorted(k.decode() for k in redis_server.client().keys("*"))
    assert keys == ["squall:team-a~t1:count#0", "squall:team-a~t1:count#0$txid",
                    "squall:team-b~t1:count#0", "squall:team-b~t1:count#0$txid"]
    # the local cluster's key is the name: the prefix it always had
    bare = open_provider({**conf(redis_server), "squall.topology.key": "t1"}).state("count#0")
    assert dict(bare) == {}
    bare.put("w", 3)
    bare.prepare_commit(0)
    bare.commit(0)
    assert {"squall:t1:count#0", "squall:t1:count#0$txid"} <= {k.decode() for k in redis_server.client().keys("*")}


def test_a_state_under_storm_s_task_name_is_copied_to_its_index_name_once(redis_server) -> None:  # type: ignore[no-untyped-def]
    """squall.statebackend.namespace migration in Redis (one script): committed hash, txid and a
    prepared transaction are copied when the new name has nothing; never over a new state."""
    provider = open_provider(conf(redis_server, keyPrefix="mig:"))
    old = provider.state("count-5")
    old.put("a", 1)
    old.prepare_commit(1)
    old.commit(1)
    old.put("a", 2)
    old.prepare_commit(2)  # prepared, not committed: a COMMIT after the upgrade rolls it forward
    assert not provider.migrate("count#1", "count-9")  # nothing there
    assert provider.migrate("count#1", "count-5")
    new = provider.state("count#1")
    assert dict(new) == {"a": 1} and new.committed_txid() == 1
    new.commit(2)
    assert dict(provider.state("count#1")) == {"a": 2}
    assert not provider.migrate("count#1", "count-5")  # the new state is never overwritten
    assert dict(provider.state("count#1")) == {"a": 2}
    assert dict(provider.state("count-5")) == {"a": 1}  # left for an older Squall
    client = redis_server.client()
    assert sorted(client.keys("mig:count#1*")) == [b"mig:count#1", b"mig:count#1$txid"]


def test_unreachable_redis_is_named_at_open(redis_server) -> None:  # type: ignore[no-untyped-def]
    port = redis_server.port
    redis_server.proc.kill()
    redis_server.proc.wait()
    with pytest.raises(StateBackendError) as got:
        open_provider({"topology.name": "gone", "topology.state.provider": "redis",
                       "topology.state.provider.config": {"host": "127.0.0.1", "port": port, "timeoutSecs": 2}})
    assert f"127.0.0.1:{port}" in str(got.value)
    assert "unreachable" in str(got.value)


def test_password_from_the_environment(redis_server) -> None:  # type: ignore[no-untyped-def]
    redis_server.client().config_set("requirepass", "s3cret")
    c = conf(redis_server, passwordEnv="REDIS_PW", keyPrefix="pw:")
    with pytest.raises(StateBackendError, match="REDIS_PW"):
        open_provider(c, env={})
    with pytest.raises(StateBackendError, match="unreachable"):
        open_provider(c, env={"REDIS_PW": "wrong"})
    state = open_provider(c, env={"REDIS_PW": "s3cret"}).state("x-1")
    state.put(1, 2)
    state.prepare_commit(0)
    state.commit(0)
    assert dict(open_provider(c, env={"REDIS_PW": "s3cret"}).state("x-1")) == {1: 2}


def test_a_worker_stops_at_start_naming_the_redis_it_cannot_reach(cluster_state, redis_server) -> None:  # type: ignore[no-untyped-def]
    """The worker checks the state provider before it runs anything: the error names the
    address and lands where the operator shows load errors (the Topology's status)."""
    from pathlib import Path

    from squall.errors import TopologyError
    from squall.models.cluster import LOAD_ERROR_COMPONENT, WorkerSlot
    from squall.models.v1alpha1 import Topology
    from squall.worker.runtime import Worker
    from squall_operator.nimbus import initial_storm_base

    port = redis_server.port
    redis_server.proc.kill()
    redis_server.proc.wait()
    example = Path(__file__).resolve().parents[2] / "examples" / "stateful-wordcount"
    topology = Topology.model_validate({"metadata": {"name": "noredis"}, "spec": {
        "config": {"topology.state.provider": "redis",
                   "topology.state.provider.config": {"host": "127.0.0.1", "port": port, "timeoutSecs": 2}},
        "spouts": [{"name": "s", "class": "stateful_wordcount:SentenceSpout", "stateful": True}],
        "bolts": [{"name": "c", "class": "stateful_wordcount:WordCount", "stateful": True,
                   "inputs": [{"component": "s"}]}]}})
    cluster_state.set_storm("noredis", initial_storm_base(topology, 100.0))
    worker = Worker(cluster_state, "noredis", WorkerSlot("node-a", 6798), host="127.0.0.1",
                    search_paths=(str(example),))
    try:
        with pytest.raises(TopologyError):
            worker.start()
    finally:
        worker.shutdown()
    error = cluster_state.last_error("noredis", LOAD_ERROR_COMPONENT)
    assert error is not None
    assert f"127.0.0.1:{port}" in error.error and "spec.config" in error.error, error.error
