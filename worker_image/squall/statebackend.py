"""State providers of stateful components: Storm's `KeyValueState` and its state providers.

Not to be confused with `squall.state` (the cluster state in ZooKeeper). A stateful bolt (or a
stateful spout) gets one `KeyValueState` per task, namespace `<component>#<index>` (`namespace`:
the task's index within its component, 0-based, so that a graph upgrade that moves task ids
finds each task's state again, as a Flink savepoint maps state by operator; Storm's
`StateFactory` uses `<component>-<task>`, which Squall used too: `migrate` copies such a state
to its new name when a task first opens it); the checkpoint protocol (`squall.checkpoint`)
drives its transactions:

    prepare_commit(txid)  the changes since the last prepare are saved as txid's (persisted:
                          a COMMIT after a crash can still apply them, Storm's roll-forward)
    commit(txid)          the prepared changes of txid become the committed state, atomically
    rollback()            prepared and pending changes are dropped; the state is the last commit

`topology.state.provider` chooses where states live: `memory` (Storm's
InMemoryKeyValueStateProvider: in the worker process, lost with it; for tests and local runs)
or `redis` (Storm's RedisKeyValueStateProvider), configured by `topology.state.provider.config`
(`host`, `port`, `db`, `passwordEnv`: the name of an environment variable holding the password,
`keyPrefix`). Every state keeps its whole working view in memory (a task owns its namespace, so
nothing else writes it): `get` costs a dict lookup, the store is touched only by the protocol.
Keys and values are anything the wire format carries (`squall.serialization`); read back from
the store, a key's sequences are tuples and a value's are lists. `put` a value again after
changing it in place (the state records the change at `put`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final, Protocol

import msgpack

from squall.serialization import default, ext_hook
from squall.topology_keys import conf_scope

__all__ = [
    "KeyValueState",
    "PROVIDER_CONFIG_KEY",
    "PROVIDER_KEY",
    "StateBackendError",
    "StateProvider",
    "config_problems",
    "legacy_namespace",
    "namespace",
    "open_provider",
]

PROVIDER_KEY: Final = "topology.state.provider"
PROVIDER_CONFIG_KEY: Final = "topology.state.provider.config"
CHECKPOINT_INTERVAL_KEY: Final = "topology.state.checkpoint.interval.ms"
DEFAULT_CHECKPOINT_INTERVAL_MS: Final = 1000  # Storm's default
# provider names, Storm's class names accepted beside Squall's short ones
_ALIASES: Final = {
    "memory": "memory",
    "inmemory": "memory",
    "org.apache.storm.state.InMemoryKeyValueStateProvider": "memory",
    "redis": "redis",
    "org.apache.storm.redis.state.RedisKeyValueStateProvider": "redis",
}
_REDIS_FIELDS: Final[dict[str, type | tuple[type, ...]]] = {"host": str, "port": int, "db": int, "passwordEnv": str, "keyPrefix": str,
                        "timeoutSecs": (int, float)}
_TOMBSTONE: Final = b""  # a deleted key among prepared changes (a packed value is never empty)


class StateBackendError(RuntimeError):
    """A state provider that cannot be used: unknown, misconfigured or unreachable."""


def _pack(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True, default=default)
    return data


def _unpack(data: bytes, use_list: bool = True) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=use_list, ext_hook=ext_hook)


def _key(key: Any) -> bytes:
    if isinstance(key, list):
        raise TypeError("a state key must be hashable (a list is not; use a tuple)")
    return _pack(key)


def namespace(component: str, index: int) -> str:
    """The state of `component`'s task at `index` (0-based, its place among the component's
    tasks): stable across graph upgrades, which move task ids but not a component's count."""
    return f"{component}#{index}"


def legacy_namespace(component: str, task: int) -> str:
    """Where Squall kept a task's state before `namespace` (Storm's `<component>-<task>`)."""
    return f"{component}-{task}"


# -- stores: where one namespace's committed and prepared changes live ---------------------------
class Store(Protocol):
    def load(self) -> dict[bytes, bytes]: ...
    def prepare(self, txid: int, changes: Mapping[bytes, bytes]) -> None: ...
    def commit(self, txid: int) -> None: ...
    def discard(self) -> None: ...
    def committed_txid(self) -> int | None: ...


class KeyValueState:
    """Storm's KeyValueState: `put`, `get`, `delete`, iteration over (key, value) pairs, plus the
    State transactions the checkpoint protocol calls (`prepare_commit`, `commit`, `rollback`)."""

    def __init__(self, namespace: str, store: Store) -> None:
        self.namespace = namespace
        self._store = store
        self._view: dict[Any, Any] = {}
        self._pending: dict[bytes, bytes] = {}
        self._prepared: dict[bytes, bytes] | None = None
        self._prepared_txid: int | None = None
        self._reload()

    def _reload(self) -> None:
        self._view = {_unpack(k, use_list=False): _unpack(v) for k, v in self._store.load().items()}

    # -- Storm's KeyValueState ---------------------------------------------------------------
    def put(self, key: Any, value: Any) -> None:
        packed = _pack(value)  # refused now, not at the checkpoint, if it cannot be stored
        self._pending[_key(key)] = packed
        self._view[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        return self._view.get(key, default)

    def delete(self, key: Any) -> Any:
        """Removes `key`; returns its value (None when it had none)."""
        self._pending[_key(key)] = _TOMBSTONE
        return self._view.pop(key, None)

    def __getitem__(self, key: Any) -> Any:
        return self._view[key]

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._view.items()))

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(self)

    def keys(self) -> list[Any]:
        return list(self._view)

    def __len__(self) -> int:
        return len(self._view)

    def __contains__(self, key: object) -> bool:
        return key in self._view

    # -- Storm's State ------------------------------------------------------------------------
    def prepare_commit(self, txid: int) -> None:
        """Saves the changes since the last prepare as `txid`'s. The same txid may be prepared
        again (its changes grow); a new one only once the previous one committed."""
        if self._prepared is not None and self._prepared_txid != txid:
            raise StateBackendError(
                f"state {self.namespace}: prepare of txid {txid} while txid {self._prepared_txid}"
                " is prepared and not committed")
        changes = dict(self._prepared or {})
        changes.update(self._pending)
        self._store.prepare(txid, changes)
        self._prepared, self._prepared_txid = changes, txid
        self._pending = {}

    def commit(self, txid: int) -> None:
        """Applies `txid`'s prepared changes (idempotent: a txid already committed is a no-op,
        which is what a COMMIT rolled forward after a crash needs)."""
        self._store.commit(txid)
        self._prepared, self._prepared_txid = None, None

    def rollback(self) -> None:
        """Back to the last committed state: prepared and pending changes are dropped and the
        view is read again from the store."""
        self._store.discard()
        self._prepared, self._prepared_txid = None, None
        self._pending = {}
        self._reload()

    def committed_txid(self) -> int | None:
        return self._store.committed_txid()


# -- memory ----------------------------------------------------------------------------------
class _MemoryNamespace:
    def __init__(self) -> None:
        self.committed: dict[bytes, bytes] = {}
        self.txid: int | None = None
        self.prepared: tuple[int, dict[bytes, bytes]] | None = None


class MemoryStore:
    """One namespace of the in-memory provider (shared by every state of this process)."""

    def __init__(self, ns: _MemoryNamespace, lock: threading.Lock) -> None:
        self._ns = ns
        self._lock = lock

    def load(self) -> dict[bytes, bytes]:
        with self._lock:
            return dict(self._ns.committed)

    def prepare(self, txid: int, changes: Mapping[bytes, bytes]) -> None:
        with self._lock:
            self._ns.prepared = (txid, dict(changes))

    def commit(self, txid: int) -> None:
        with self._lock:
            ns = self._ns
            if ns.prepared is None or ns.prepared[0] != txid:
                if ns.txid is not None and ns.txid >= txid:
                    return
                raise StateBackendError(f"commit of txid {txid}, which was not prepared")
            for k, v in ns.prepared[1].items():
                if v == _TOMBSTONE:
                    ns.committed.pop(k, None)
                else:
                    ns.committed[k] = v
            ns.txid = txid
            ns.prepared = None

    def discard(self) -> None:
        with self._lock:
            self._ns.prepared = None

    def committed_txid(self) -> int | None:
        with self._lock:
            return self._ns.txid


class MemoryProvider:
    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spaces: dict[str, _MemoryNamespace] = {}

    def store(self, namespace: str) -> Store:
        with self._lock:
            ns = self._spaces.setdefault(namespace, _MemoryNamespace())
        return MemoryStore(ns, self._lock)

    def state(self, namespace: str) -> KeyValueState:
        return KeyValueState(namespace, self.store(namespace))

    def migrate(self, namespace: str, legacy: str) -> bool:
        """Copies `legacy`'s committed and prepared state to `namespace` when `namespace` has
        none and `legacy` has some; True when it copied."""
        with self._lock:
            new, old = self._spaces.get(namespace), self._spaces.get(legacy)
            if old is None or (old.txid is None and old.prepared is None):
                return False
            if new is not None and (new.txid is not None or new.prepared is not None or new.committed):
                return False
            ns = self._spaces[namespace] = _MemoryNamespace()
            ns.committed, ns.txid = dict(old.committed), old.txid
            ns.prepared = (old.prepared[0], dict(old.prepared[1])) if old.prepared is not None else None
            return True

    def close(self) -> None:
        pass


_OPEN_LOCK = threading.Lock()
_OPEN: dict[str, StateProvider] = {}
# the process's in-memory states (a worker is one process: its tasks' states live here)
_MEMORY = MemoryProvider()


# -- redis -----------------------------------------------------------------------------------
# Committing is one Lua script, so it is atomic in Redis: the prepared changes move into the
# committed hash and the committed txid is set, or nothing happens.
_COMMIT_LUA: Final = """
local ptx = redis.call('GET', KEYS[4])
if (not ptx) or tonumber(ptx) ~= tonumber(ARGV[1]) then
  local ctx = redis.call('GET', KEYS[3])
  if ctx and tonumber(ctx) >= tonumber(ARGV[1]) then return 0 end
  return -1
end
local kv = redis.call('HGETALL', KEYS[2])
local sets, dels = {}, {}
for i = 1, #kv, 2 do
  if kv[i + 1] == '' then dels[#dels + 1] = kv[i]
  else sets[#sets + 1] = kv[i]; sets[#sets + 1] = kv[i + 1] end
  if #sets >= 1000 then redis.call('HSET', KEYS[1], unpack(sets)); sets = {} end
  if #dels >= 1000 then redis.call('HDEL', KEYS[1], unpack(dels)); dels = {} end
end
if #sets > 0 then redis.call('HSET', KEYS[1], unpack(sets)) end
if #dels > 0 then redis.call('HDEL', KEYS[1], unpack(dels)) end
redis.call('DEL', KEYS[2], KEYS[4])
redis.call('SET', KEYS[3], ARGV[1])
return 1
"""
# a legacy namespace's four keys copied to the new one, atomically, only when the new one has
# none of them and the legacy one committed or prepared something (the legacy keys stay: an
# older Squall can still read them)
_MIGRATE_LUA: Final = """
for i = 1, 4 do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
if redis.call('EXISTS', KEYS[7]) == 0 and redis.call('EXISTS', KEYS[8]) == 0 then return 0 end
for i = 1, 4 do
  if redis.call('EXISTS', KEYS[i + 4]) == 1 then redis.call('COPY', KEYS[i + 4], KEYS[i]) end
end
return 1
"""
_CHUNK: Final = 10000  # fields per HSET, so that a 100k-key prepare is not one huge command


class RedisStore:
    """One namespace in Redis: `<prefix><namespace>` (the committed hash), `...$prepare` (the
    prepared changes, an empty value marks a deleted key), `...$txid` and `...$preparetxid`."""

    def __init__(self, provider: RedisProvider, namespace: str) -> None:
        self._p = provider
        base = provider.key_prefix + namespace
        self.keys = [base, base + "$prepare", base + "$txid", base + "$preparetxid"]

    def load(self) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = self._p.call(lambda r: r.hgetall(self.keys[0]))
        return out

    def prepare(self, txid: int, changes: Mapping[bytes, bytes]) -> None:
        def run(r: Any) -> None:
            pipe = r.pipeline(transaction=True)
            pipe.delete(self.keys[1])
            items = list(changes.items())
            for i in range(0, len(items), _CHUNK):
                pipe.hset(self.keys[1], mapping=dict(items[i:i + _CHUNK]))
            pipe.set(self.keys[3], txid)
            pipe.execute()

        self._p.call(run)

    def commit(self, txid: int) -> None:
        got = self._p.call(lambda r: self._p.commit_script(keys=self.keys, args=[txid], client=r))
        if got == -1:
            raise StateBackendError(f"commit of txid {txid} in {self.keys[0]}, which was not prepared")

    def discard(self) -> None:
        self._p.call(lambda r: r.delete(self.keys[1], self.keys[3]))

    def committed_txid(self) -> int | None:
        got = self._p.call(lambda r: r.get(self.keys[2]))
        return int(got) if got is not None else None


class RedisProvider:
    name = "redis"

    def __init__(self, host: str, port: int, db: int, password: str | None, key_prefix: str,
                 timeout: float) -> None:
        import redis  # only a topology that uses Redis needs the client

        self.address = f"{host}:{port}"
        self.db = db
        self.key_prefix = key_prefix
        self._redis = redis
        self.client = redis.Redis(host=host, port=port, db=db, password=password,
                                  socket_timeout=timeout, socket_connect_timeout=timeout,
                                  health_check_interval=30)
        self.commit_script = self.client.register_script(_COMMIT_LUA)
        self.migrate_script = self.client.register_script(_MIGRATE_LUA)

    def ping(self) -> None:
        self.call(lambda r: r.ping())

    def call(self, fn: Any) -> Any:
        try:
            return fn(self.client)
        except self._redis.exceptions.RedisError as exc:
            raise StateBackendError(
                f"Redis at {self.address} (db {self.db}): {type(exc).__name__}: {exc}") from exc

    def store(self, namespace: str) -> Store:
        return RedisStore(self, namespace)

    def state(self, namespace: str) -> KeyValueState:
        return KeyValueState(namespace, self.store(namespace))

    def migrate(self, namespace: str, legacy: str) -> bool:
        """As MemoryProvider.migrate, in one script (atomic in Redis)."""
        keys = RedisStore(self, namespace).keys + RedisStore(self, legacy).keys
        return bool(self.call(lambda r: self.migrate_script(keys=keys, client=r)))

    def close(self) -> None:
        self.client.close()


class StateProvider(Protocol):
    name: str

    def state(self, namespace: str) -> KeyValueState: ...
    def store(self, namespace: str) -> Store: ...
    def migrate(self, namespace: str, legacy: str) -> bool: ...
    def close(self) -> None: ...


# -- configuration ---------------------------------------------------------------------------
def _provider_config(conf: Mapping[str, Any]) -> Any:
    raw = conf.get(PROVIDER_CONFIG_KEY)
    if isinstance(raw, str):  # Storm's form: a JSON string
        return json.loads(raw)
    return raw


def config_problems(conf: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config key, message) for each problem of the provider settings in `conf`; pure."""
    out: list[tuple[str, str]] = []
    name = conf.get(PROVIDER_KEY, "memory")
    if not isinstance(name, str) or name not in _ALIASES:
        out.append((PROVIDER_KEY, f"unknown state provider {name!r} (known: memory, redis)"))
        return out
    interval = conf.get(CHECKPOINT_INTERVAL_KEY, DEFAULT_CHECKPOINT_INTERVAL_MS)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0:
        out.append((CHECKPOINT_INTERVAL_KEY, f"{interval!r} is not a positive number of milliseconds"))
    try:
        cfg = _provider_config(conf)
    except ValueError as exc:
        out.append((PROVIDER_CONFIG_KEY, f"not valid JSON: {exc}"))
        return out
    if cfg is None:
        return out
    if not isinstance(cfg, dict):
        out.append((PROVIDER_CONFIG_KEY, f"must be a mapping, not {type(cfg).__name__}"))
        return out
    if _ALIASES[name] == "redis":
        for key, value in cfg.items():
            want = _REDIS_FIELDS.get(key)
            if want is None:
                out.append((f"{PROVIDER_CONFIG_KEY}.{key}",
                            f"unknown field (known: {', '.join(_REDIS_FIELDS)})"))
            elif isinstance(value, bool) or not isinstance(value, want):
                out.append((f"{PROVIDER_CONFIG_KEY}.{key}", f"{value!r} has the wrong type"))
    return out


def provider_name(conf: Mapping[str, Any]) -> str:
    return _ALIASES.get(str(conf.get(PROVIDER_KEY, "memory")), "?")


def open_provider(conf: Mapping[str, Any], env: Mapping[str, str] | None = None) -> StateProvider:
    """The provider `conf` names, connected: a Redis that cannot be reached is an error naming
    its address, raised here (at the worker's start), not at the first checkpoint."""
    problems = config_problems(conf)
    if problems:
        raise StateBackendError("; ".join(f"{k}: {m}" for k, m in problems))
    if provider_name(conf) == "memory":
        return _MEMORY
    cfg = dict(_provider_config(conf) or {})
    env = os.environ if env is None else env
    password = None
    if "passwordEnv" in cfg:
        password = env.get(cfg["passwordEnv"])
        if password is None:
            raise StateBackendError(
                f"{PROVIDER_CONFIG_KEY}.passwordEnv: environment variable {cfg['passwordEnv']!r} is not set")
    topology = conf_scope(conf, "topology")  # its key: two namespaces' topologies of one name never share
    key = json.dumps([cfg, topology], sort_keys=True, default=str)
    with _OPEN_LOCK:
        cached = _OPEN.get(key)
    if cached is not None:
        return cached
    provider = RedisProvider(
        host=cfg.get("host", "localhost"), port=int(cfg.get("port", 6379)), db=int(cfg.get("db", 0)),
        password=password, key_prefix=cfg.get("keyPrefix", f"squall:{topology}:"),
        timeout=float(cfg.get("timeoutSecs", 5.0)),
    )
    try:
        provider.ping()
    except StateBackendError as exc:
        provider.close()
        raise StateBackendError(f"state provider redis is unreachable: {exc}") from exc
    with _OPEN_LOCK:
        # one client (a thread-safe connection pool) for every task of this worker
        return _OPEN.setdefault(key, provider)


def checkpoint_interval_secs(conf: Mapping[str, Any]) -> float:
    """`topology.state.checkpoint.interval.ms`, at least 100 ms as in Storm."""
    ms = float(conf.get(CHECKPOINT_INTERVAL_KEY, DEFAULT_CHECKPOINT_INTERVAL_MS))
    return max(100.0, ms) / 1000.0
