"""The cluster state in ZooKeeper (Storm's ``StormClusterState``), over kazoo.

Nimbus, supervisors and workers never talk to each other directly about placement: nimbus writes
what should run, workers write what is running, and each side reads and watches the other's
nodes. This module is the one place that knows the node layout and the payload encoding, so the
rest of Squall deals only in the pydantic models of ``squall.models.cluster``.

Layout (``root`` defaults to ``/squall``; see docs/design.md, which is the contract)::

    <root>/storms/<topo>                         StormBase          persistent (<topo>: topology_key)
    <root>/assignments/<topo>                    Assignment         persistent
    <root>/workerbeats/<topo>/<node>-<port>      WorkerHeartbeat    persistent
    <root>/endpoints/<topo>/<node>-<port>        Endpoint           ephemeral
    <root>/errors/<topo>/<component>/e<seq>      ErrorInfo          persistent, sequential, last 10
    <root>/supervisors/<node>                    SupervisorInfo     ephemeral
    <root>/requests/r<seq>                       NimbusRequest      persistent, sequential
    <root>/logconfigs/<topo>                     LogConfig          persistent
    <root>/debug/<topo>                          DebugRequest       persistent
    <root>/debug/<topo>/<node>-<port>            WorkerDebug        persistent
    <root>/sampling/<topo>                       SamplingConfig     persistent
    <root>/samples/<topo>/<node>-<port>          SampledTuples      persistent

Payloads are ``model_dump_json()`` bytes. A reader checks ``v`` first and raises
``PayloadVersionError`` on a version it does not know rather than misreading it.

Watches: every ``watch=`` argument takes a zero-argument callable. It is called once, on kazoo's
event thread, after the next change of what the call read (data changed, node created or deleted,
children added or removed), like Storm's state callbacks. It is a hint to read again (and pass the
callback again to keep watching), never the new value; it may occasionally fire without a visible
change, and it is lost if the ZooKeeper session expires, so callers also re-read periodically.
Keep callbacks short (set an event, enqueue): they run on the thread that delivers all watches.
A watch on a node that does not exist yet fires when it is created.

Access: with ``ZkCredentials`` (``connect(..., credentials=...)``) the client authenticates with
ZooKeeper's digest scheme and every node it creates (the root and subtrees included) carries a
digest ACL granting everything to that user and nothing to anyone else: a client without the
credentials can neither read assignments nor write heartbeats (``NoAuthError``). Credentials are
one line ``user:password`` in a file (mode 0600 when Squall writes it) named by
``--zk-auth-file`` or ``$SQUALL_ZK_AUTH_FILE``, or in ``$SQUALL_ZK_AUTH`` itself (on Kubernetes,
from a Secret's key). Nodes made before ACLs were turned on keep their open ACL when written
again; ``close_open_nodes`` (nimbus runs it at start-up) gives them the digest ACL.

Sessions: ephemeral nodes (endpoints, supervisors) live as long as the session that made them.
When a session expires (a partition or a pause longer than the session timeout) kazoo connects
again with a new one; this object remembers every ephemeral node it registered and creates them
again in the new session before it reports itself ``ready`` again and calls the session
listeners (``add_session_listener``), on a thread of its own, never on kazoo's. While ZooKeeper
is unreachable, calls block until the connection is back, or fail with one of
``CONNECTION_ERRORS`` (those in flight when it dropped, all of them when the session expired).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.security import make_digest_acl
from pydantic import BaseModel, ValidationError

# the topology keys of the layout (<topo>), re-exported: squall.topology_keys
from squall.topology_keys import KEY_SEPARATOR, TopologyKey, not_found, split_topology_key, topology_key
from squall.models.cluster import (
    PAYLOAD_VERSION,
    Assignment,
    Endpoint,
    ErrorInfo,
    LogConfig,
    NimbusRequest,
    StormBase,
    SupervisorInfo,
    WorkerHeartbeat,
    WorkerSlot,
)
from squall.models.debugging import DebugRequest, WorkerDebug
from squall.models.sampling import SampledTuples, SamplingConfig
from squall.stateviews import ForNimbus, ForViewers, ForWorker, SessionListener, Watch

__all__ = [
    "ACCESS_ERRORS",
    "CONNECTION_ERRORS",
    "ClusterState",
    "NotConnected",
    "PayloadVersionError",
    "SessionListener",
    "StateError",
    "Watch",
    "ZK_AUTH_ENV",
    "ZK_AUTH_FILE_ENV",
    "ZkCredentials",
    "connect",
    "MAX_ERRORS",
    "KEY_SEPARATOR",
    "not_found",
    "split_topology_key",
    "topology_key",
    "TopologyKey",
]

log = logging.getLogger(__name__)
# kazoo logs every failed reconnection attempt as a warning (one per second or two while
# ZooKeeper is away); the loops above this layer say once that it is away. Its errors still show.
_kazoo_log = logging.getLogger(f"{__name__}.kazoo")
if _kazoo_log.level == logging.NOTSET:
    _kazoo_log.setLevel(logging.ERROR)

M = TypeVar("M", bound=BaseModel)

MAX_ERRORS = 10
REQUESTS = "requests"
LOGCONFIGS = "logconfigs"
DEBUG = "debug"
SAMPLING = "sampling"
SAMPLES = "samples"
STORMS, ASSIGNMENTS, WORKERBEATS, ENDPOINTS, ERRORS, SUPERVISORS = (
    "storms",
    "assignments",
    "workerbeats",
    "endpoints",
    "errors",
    "supervisors",
)
_SUBTREES = (STORMS, ASSIGNMENTS, WORKERBEATS, ENDPOINTS, ERRORS, SUPERVISORS)


class StateError(Exception):
    """A node holds something this version of Squall cannot read, or ZooKeeper is unreachable."""


class NotConnected(StateError):
    """ZooKeeper is unreachable now; raised by callers that would rather not block on it."""


class PayloadVersionError(StateError):
    """A payload carries a ``v`` this version of Squall does not know."""

    def __init__(self, path: str, version: object) -> None:
        super().__init__(
            f"{path}: payload version {version!r} is not supported (this Squall reads "
            f"v={PAYLOAD_VERSION}); was it written by a different Squall version?"
        )
        self.path = path
        self.version = version


# what a call raises when ZooKeeper is unreachable or the session ended: a transient condition
# callers wait out (catch these without importing kazoo)
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    NotConnected,
    ConnectionLoss,
    SessionExpiredError,
    ConnectionClosedError,
    OperationTimeoutError,
)

# ZooKeeper answered but refused the call: the node's ACL does not admit this client's
# credentials (a worker started before the ACLs-on upgrade, until it is rolled onto them), or the
# credentials themselves were refused. Not worth a traceback: callers that retry say it once.
ACCESS_ERRORS: tuple[type[Exception], ...] = (NoAuthError, AuthFailedError)


ZK_AUTH_FILE_ENV = "SQUALL_ZK_AUTH_FILE"
ZK_AUTH_ENV = "SQUALL_ZK_AUTH"
MAX_CREDENTIALS_BYTES = 4096


@dataclass(frozen=True)
class ZkCredentials:
    """A ZooKeeper digest user: Squall's nodes are readable and writable by it alone."""

    user: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.user or ":" in self.user or any(c.isspace() for c in self.user):
            raise ValueError(f"ZooKeeper user must be non-empty, without ':' or spaces: {self.user!r}")
        if not self.password or any(c.isspace() for c in self.password):
            raise ValueError(f"ZooKeeper password of user {self.user!r} must be non-empty, without spaces")

    @classmethod
    def generate(cls, user: str = "squall") -> ZkCredentials:
        return cls(user, secrets.token_urlsafe(32))

    @classmethod
    def parse(cls, text: str, source: str = "credentials") -> ZkCredentials:
        """One line ``user:password`` (a trailing newline is fine)."""
        line = text.strip()
        user, sep, password = line.partition(":")
        if not sep or "\n" in line:
            raise ValueError(f"{source}: ZooKeeper credentials must be one line 'user:password'")
        try:
            return cls(user, password)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ZkCredentials:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_CREDENTIALS_BYTES + 1)
        except OSError as exc:
            raise ValueError(f"{path}: cannot read ZooKeeper credentials: {exc.strerror}") from None
        if len(data) > MAX_CREDENTIALS_BYTES:
            raise ValueError(f"{path}: ZooKeeper credentials file is larger than {MAX_CREDENTIALS_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{path}: ZooKeeper credentials are not UTF-8 text") from None
        return cls.parse(text, str(path))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ZkCredentials | None:
        """From ``$SQUALL_ZK_AUTH`` (the line itself: a Kubernetes Secret's key as env), else
        from the file ``$SQUALL_ZK_AUTH_FILE`` names; None when neither is set."""
        env = os.environ if environ is None else environ
        if env.get(ZK_AUTH_ENV):
            return cls.parse(env[ZK_AUTH_ENV], f"${ZK_AUTH_ENV}")
        path = env.get(ZK_AUTH_FILE_ENV)
        return cls.from_file(path) if path else None

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write to a new file only its owner can read (0600); refuses to overwrite one."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{self.user}:{self.password}\n")
        return Path(path)

    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.user}:{self.password}")]

    def acl(self) -> list[Any]:
        return [make_digest_acl(self.user, self.password, all=True)]


def _name(kind: str, value: str) -> str:
    # ZooKeeper reserves only the root's /zookeeper: a node of that name under Squall's root is
    # allowed (checked on a real server), so a topology may be called `zookeeper`
    if not value or "/" in value or value in (".", ".."):
        raise ValueError(f"invalid {kind} for a ZooKeeper node name: {value!r}")
    return value


def _keys(names: list[str]) -> list[TopologyKey]:
    """The topology keys a layout directory's children are named by (<topo>)."""
    return [TopologyKey(n) for n in names]


def _encode(payload: BaseModel) -> bytes:
    return payload.model_dump_json().encode("utf-8")


def _decode(model: type[M], data: bytes, path: str) -> M:
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise StateError(f"{path}: not a JSON payload: {exc}") from None
    if not isinstance(obj, dict):
        raise StateError(f"{path}: payload is not a JSON object")
    if obj.get("v") != PAYLOAD_VERSION:
        raise PayloadVersionError(path, obj.get("v"))
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise StateError(f"{path}: invalid {model.__name__}: {exc}") from None


# node path -> the unreadable payload last logged about it: one line per process for each
# unreadable content (nimbus, the supervisors and the verbs in one process read it many times)
_told_unreadable: dict[str, int] = {}


def _tell_unreadable(path: str, data: bytes, why: str) -> None:
    key = hash(data)
    if _told_unreadable.get(path) != key:
        _told_unreadable[path] = key
        log.warning("%s; nimbus rewrites it from its own state (meanwhile the last assignment read here is used)",
                    why.splitlines()[0])


def _wrap(watch: Watch | None) -> Callable[[WatchedEvent], None] | None:
    if watch is None:
        return None

    def fire(_event: WatchedEvent) -> None:
        try:
            watch()
        except Exception:
            log.exception("cluster-state watch callback %r failed", watch)

    return fire


class ClusterState:
    """Typed reads, writes and watches of Squall's ZooKeeper nodes.

    ``client`` must be started; the object does not own it (``close()`` leaves it alone) unless
    it was made by ``connect()``. The subtree roots are created on construction.
    """

    def __init__(self, client: KazooClient, root: str = "/squall", *, _owns_client: bool = False,
                 credentials: ZkCredentials | None = None):
        if not root.startswith("/") or root.endswith("/"):
            raise ValueError(f"root must be an absolute ZooKeeper path, no trailing '/': {root!r}")
        self.client = client
        self.root = root
        # the digest user this client authenticated as (None: no ACLs); see close_open_nodes
        self.credentials = credentials
        self._owns_client = _owns_client
        # ephemeral path -> data, created again in every new session
        self._ephemerals: dict[str, bytes] = {}
        self._session_listeners: list[SessionListener] = []
        self._resume_lock = threading.Lock()
        # set while connected with every ephemeral registered in the current session
        self._ready = threading.Event()
        # the session ended and the ephemerals are not yet back in a new one
        self._stale = False
        # sessions this object has seen begin (1 at start)
        self.sessions = 1
        # topology -> the last assignment this object read or wrote: what an unreadable node is
        # read as (`read_assignment`)
        self._assignments: dict[str, Assignment] = {}
        for sub in _SUBTREES:
            client.ensure_path(self._path(sub))
        if client.connected:
            self._ready.set()
        client.add_listener(self._on_connection_state)

    # --- sessions -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Connected, and every ephemeral node of this object exists in the current session."""
        return self._ready.is_set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def add_session_listener(self, listener: SessionListener) -> None:
        """Call ``listener(new_session)`` after every reconnection, once the ephemerals are back
        and just before ``ready`` is set (on a thread of this object, never kazoo's). Watches do
        not survive a new session: listeners make their owners read (and so watch) again."""
        self._session_listeners.append(listener)

    def _on_connection_state(self, state: KazooState) -> None:
        # kazoo's connection thread: no ZooKeeper calls, no blocking here
        if state == KazooState.LOST:
            self._stale = True
            self._ready.clear()
        elif state == KazooState.SUSPENDED:
            self._ready.clear()
            log.info("ZooKeeper connection lost; reconnecting")
        elif state == KazooState.CONNECTED:
            threading.Thread(target=self._resume, name="zk-session", daemon=True).start()

    def _resume(self) -> None:
        with self._resume_lock:
            if not self.client.connected or self._ready.is_set():
                return
            new_session = self._stale
            if new_session:
                try:
                    for path, data in list(self._ephemerals.items()):
                        self._create_ephemeral(path, data)
                except CONNECTION_ERRORS as exc:
                    # lost again: the next CONNECTED tries again
                    log.warning("ZooKeeper: could not re-register ephemeral nodes yet: %r", exc)
                    return
                self._stale = False
                self.sessions += 1
                log.info(
                    "ZooKeeper session expired; new session 0x%x, %d ephemeral node(s) registered "
                    "again", self.client.client_id[0] if self.client.client_id else 0,
                    len(self._ephemerals),
                )
            else:
                log.info("ZooKeeper connection is back (same session)")
            # listeners first: whoever waits for `ready` then sees what they set
            for listener in list(self._session_listeners):
                try:
                    listener(new_session)
                except Exception:
                    log.exception("ZooKeeper session listener %r failed", listener)
            self._ready.set()

    @classmethod
    def connect(
        cls,
        hosts: str,
        timeout: float = 15.0,
        session_timeout: float = 10.0,
        *,
        root: str = "/squall",
        credentials: ZkCredentials | None = None,
    ) -> ClusterState:
        """Make and start a kazoo client for ``hosts`` ("h1:p1,h2:p2") and wrap it.

        ``timeout``: seconds to wait for the first connection; ``session_timeout``: the session
        timeout asked of the server (which clamps it to its min/max), after which ephemeral nodes
        vanish. The client reconnects on its own after connection loss. ``credentials``: digest
        authentication, and the ACL of every node this client creates (see the module's doc).
        """
        client = KazooClient(
            hosts=hosts,
            timeout=session_timeout,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 2.0},
            logger=_kazoo_log,
            auth_data=credentials.auth_data() if credentials else None,
            default_acl=credentials.acl() if credentials else None,
        )
        try:
            client.start(timeout=timeout)
        except Exception as exc:
            client.stop()
            client.close()
            raise StateError(f"cannot connect to ZooKeeper at {hosts} within {timeout}s") from exc
        try:
            return cls(client, root, _owns_client=True, credentials=credentials)
        except BaseException:
            client.stop()
            client.close()
            raise

    def close(self) -> None:
        """Stop and close the client if ``connect()`` made it (its ephemeral nodes go away)."""
        self.client.remove_listener(self._on_connection_state)
        self._ready.clear()
        if self._owns_client:
            self._owns_client = False
            self.client.stop()
            self.client.close()

    def __enter__(self) -> ClusterState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- ACLs ----------------------------------------------------------------------------

    def close_open_nodes(self) -> tuple[int, int]:
        """Give every node under the root (the root included) whose ACL is not this client's
        digest ACL that ACL; return (nodes closed, nodes left as they were because ZooKeeper
        refused: another user's ACL without ADMIN for this one).

        For a cluster that ran without ACLs and now runs with them: ZooKeeper keeps a node's ACL
        when the node is written again, so the nodes made before (open to anyone) would stay
        open. Setting an ACL needs the ADMIN permission, which an open ACL grants to every
        client, whoever created the node: a worker's ephemeral endpoint is closed as well (it
        stays that worker's, and a worker with the credentials that makes it again in a new
        session makes it closed). The ACL is set against the ACL version just read, so a
        concurrent change is read again, not overwritten; nodes that vanish meanwhile are
        skipped. A client without credentials closes nothing: (0, 0)."""
        if self.credentials is None:
            return 0, 0
        wanted = self.credentials.acl()
        closed = refused = 0
        stack = [self.root]
        while stack:
            path = stack.pop()
            try:
                while True:
                    acls, stat = self.client.get_acls(path)
                    if list(acls) == wanted:
                        break
                    try:
                        self.client.set_acls(path, wanted, version=stat.aversion)
                        closed += 1
                        break
                    except BadVersionError:  # its ACL changed since read: look again
                        continue
                stack.extend(f"{path}/{child}" for child in self.client.get_children(path))
            except NoNodeError:  # deleted meanwhile: nothing to close
                continue
            except NoAuthError:
                refused += 1
                log.warning("ZooKeeper ACLs: %s has an ACL that %r may not change; left as it is",
                            path, self.credentials.user)
        return closed, refused

    # --- paths and generic node access ----------------------------------------------------

    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def _get(self, path: str, watch: Watch | None) -> bytes | None:
        w = _wrap(watch)  # one function object, so kazoo registers it once per path
        while True:
            try:
                data, _ = self.client.get(path, watch=w)
                return bytes(data)
            except NoNodeError:
                if w is None or self.client.exists(path, watch=w) is None:
                    return None
                # created between get and exists: read it

    def _children(self, path: str, watch: Watch | None) -> list[str]:
        w = _wrap(watch)
        while True:
            try:
                return sorted(self.client.get_children(path, watch=w))
            except NoNodeError:
                if w is None or self.client.exists(path, watch=w) is None:
                    return []

    def _read(self, model: type[M], path: str, watch: Watch | None = None) -> M | None:
        data = self._get(path, watch)
        return None if data is None else _decode(model, data, path)

    def _read_children(self, model: type[M], path: str, watch: Watch | None) -> dict[str, M]:
        out: dict[str, M] = {}
        for child in self._children(path, watch):
            value = self._read(model, f"{path}/{child}")
            if value is not None:  # deleted since listed
                out[child] = value
        return out

    def _put(self, path: str, data: bytes) -> None:
        """Create-or-set a persistent node (parents made as needed)."""
        while True:
            try:
                self.client.set(path, data)
                return
            except NoNodeError:
                try:
                    self.client.create(path, data, makepath=True)
                    return
                except NodeExistsError:
                    continue

    def _put_ephemeral(self, path: str, data: bytes) -> None:
        """Create an ephemeral node owned by this session, replacing one left by another session
        (or with other data) in one transaction so that children watchers see a single change.
        It is remembered and created again in every new session until it is removed."""
        self._ephemerals[path] = data
        self._create_ephemeral(path, data)

    def _create_ephemeral(self, path: str, data: bytes) -> None:
        while True:
            stat = self.client.exists(path)
            if stat is None:
                try:
                    self.client.create(path, data, ephemeral=True, makepath=True)
                    return
                except NodeExistsError:
                    continue
            if stat.ephemeralOwner == self.client.client_id[0]:
                current = self._get(path, None)
                if current == data:
                    return
            tx = self.client.transaction()
            tx.delete(path, version=stat.version)
            tx.create(path, data, ephemeral=True)
            if not any(isinstance(r, Exception) for r in tx.commit()):
                return

    def _delete(self, path: str, recursive: bool = False) -> None:
        for known in [p for p in self._ephemerals if p == path or p.startswith(path + "/")]:
            del self._ephemerals[known]
        for _ in range(5):
            try:
                self.client.delete(path, recursive=recursive)
                return
            except NoNodeError:
                return
            except NotEmptyError:  # a child appeared during a recursive delete: go again
                continue
        self.client.delete(path, recursive=recursive)

    # --- storms ---------------------------------------------------------------------------

    def set_storm(self, topo: TopologyKey, base: StormBase) -> None:
        self._put(self._path(STORMS, _name("topology id", topo)), _encode(base))

    def get_storm(self, topo: TopologyKey, watch: Watch | None = None) -> StormBase | None:
        return self._read(StormBase, self._path(STORMS, _name("topology id", topo)), watch)

    def remove_storm(self, topo: TopologyKey) -> None:
        self._delete(self._path(STORMS, _name("topology id", topo)))

    def storm_ids(self, watch: Watch | None = None) -> list[TopologyKey]:
        return _keys(self._children(self._path(STORMS), watch))

    # --- assignments ----------------------------------------------------------------------

    def set_assignment(self, topo: TopologyKey, assignment: Assignment) -> bool:
        """Write the assignment unless the stored one is equal; return whether it wrote.

        Skipping unchanged writes keeps workers' watches quiet. A stored payload that cannot be
        read (unknown version, garbage) is overwritten: nimbus owns this node.
        """
        path = self._path(ASSIGNMENTS, _name("topology id", topo))
        data = self._get(path, None)
        if data is not None:
            try:
                if _decode(Assignment, data, path) == assignment:
                    self._assignments[topo] = assignment
                    return False
            except StateError as exc:
                _tell_unreadable(path, data, str(exc))
        self._put(path, _encode(assignment))
        self._assignments[topo] = assignment
        _told_unreadable.pop(path, None)
        return True

    def read_assignment(self, topo: TopologyKey, watch: Watch | None = None) -> tuple[Assignment | None, bool]:
        """The topology's assignment (None: there is none), and whether its node could be read.

        A node that cannot be read (not JSON, not an assignment, a payload version this Squall
        does not know: another client with the cluster's credentials wrote it) raises nothing:
        it is logged once, one line naming the node, and read as the last assignment this object
        read or wrote there (None if it has none). Nimbus owns the node and rewrites it from its
        own state (`Nimbus.mk_assignments`); meanwhile supervisors keep their workers and
        workers their routing, and the verbs show what they know."""
        path = self._path(ASSIGNMENTS, _name("topology id", topo))
        data = self._get(path, watch)
        if data is None:
            self._assignments.pop(topo, None)
            return None, True
        try:
            assignment = _decode(Assignment, data, path)
        except StateError as exc:
            _tell_unreadable(path, data, str(exc))
            return self._assignments.get(topo), False
        self._assignments[topo] = assignment
        _told_unreadable.pop(path, None)
        return assignment, True

    def get_assignment(self, topo: TopologyKey, watch: Watch | None = None) -> Assignment | None:
        """The topology's assignment; one that cannot be read as `read_assignment` says."""
        return self.read_assignment(topo, watch)[0]

    def assignment_ids(self, watch: Watch | None = None) -> list[TopologyKey]:
        return _keys(self._children(self._path(ASSIGNMENTS), watch))

    def remove_assignment(self, topo: TopologyKey) -> None:
        self._delete(self._path(ASSIGNMENTS, _name("topology id", topo)))
        self._assignments.pop(topo, None)

    # --- worker heartbeats ----------------------------------------------------------------

    def worker_heartbeat(self, topo: TopologyKey, slot: WorkerSlot, beat: WorkerHeartbeat) -> None:
        self._put(self._path(WORKERBEATS, _name("topology id", topo), slot.key()), _encode(beat))

    def get_worker_heartbeats(self, topo: TopologyKey) -> dict[WorkerSlot, WorkerHeartbeat]:
        path = self._path(WORKERBEATS, _name("topology id", topo))
        beats = self._read_children(WorkerHeartbeat, path, None)
        return {WorkerSlot.from_key(k): v for k, v in beats.items()}

    def remove_worker_heartbeat(self, topo: TopologyKey, slot: WorkerSlot) -> None:
        self._delete(self._path(WORKERBEATS, _name("topology id", topo), slot.key()))

    # --- endpoints ------------------------------------------------------------------------

    def register_endpoint(self, topo: TopologyKey, slot: WorkerSlot, endpoint: Endpoint) -> None:
        """Ephemeral: vanishes when this client's session ends; replaces a stale registration."""
        path = self._path(ENDPOINTS, _name("topology id", topo), slot.key())
        self._put_ephemeral(path, _encode(endpoint))

    def get_endpoints(self, topo: TopologyKey, watch: Watch | None = None) -> dict[WorkerSlot, Endpoint]:
        """Endpoints of the topology's workers; ``watch`` fires when one is added or removed
        (a re-registration is a remove and an add)."""
        path = self._path(ENDPOINTS, _name("topology id", topo))
        found = self._read_children(Endpoint, path, watch)
        return {WorkerSlot.from_key(k): v for k, v in found.items()}

    def owns_endpoint(self, topo: TopologyKey, slot: WorkerSlot, endpoint: Endpoint, timeout: float = 2.0) -> bool:
        """Whether ZooKeeper holds exactly `endpoint` for `slot`, as an ephemeral node of this
        client's current session (what peers will find). Waits at most `timeout` seconds; raises
        one of ``CONNECTION_ERRORS`` (or a timeout) when ZooKeeper cannot answer."""
        path = self._path(ENDPOINTS, _name("topology id", topo), slot.key())
        try:
            data, stat = self.client.get_async(path).get(timeout=timeout)
        except NoNodeError:
            return False
        client_id = self.client.client_id
        return (client_id is not None and stat.ephemeralOwner == client_id[0]
                and bytes(data) == _encode(endpoint))

    def remove_endpoint(self, topo: TopologyKey, slot: WorkerSlot) -> None:
        self._delete(self._path(ENDPOINTS, _name("topology id", topo), slot.key()))

    def remove_own_endpoint(self, topo: TopologyKey, slot: WorkerSlot) -> bool:
        """Remove the slot's endpoint if this session registered it, never another worker's (the
        slot's replacement's); whether it was removed. It is not registered again either way."""
        path = self._path(ENDPOINTS, _name("topology id", topo), slot.key())
        self._ephemerals.pop(path, None)
        stat = self.client.exists(path)
        client_id = self.client.client_id
        if stat is None or client_id is None or stat.ephemeralOwner != client_id[0]:
            return False
        try:
            self.client.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):  # replaced meanwhile
            return False
        return True

    # --- errors ---------------------------------------------------------------------------

    def report_error(self, topo: TopologyKey, component: str, error: ErrorInfo) -> None:
        """Append an error; only the newest ``MAX_ERRORS`` of a component are kept."""
        path = self._path(ERRORS, _name("topology id", topo), _name("component", component))
        self.client.create(f"{path}/e", _encode(error), sequence=True, makepath=True)
        # sequence suffixes are zero-padded, so name order is creation order
        for old in sorted(self.client.get_children(path))[:-MAX_ERRORS]:
            self._delete(f"{path}/{old}")

    def errors(self, topo: TopologyKey, component: str) -> list[ErrorInfo]:
        """The component's kept errors, oldest first (newest last)."""
        path = self._path(ERRORS, _name("topology id", topo), _name("component", component))
        return list(self._read_children(ErrorInfo, path, None).values())

    def last_error(self, topo: TopologyKey, component: str) -> ErrorInfo | None:
        path = self._path(ERRORS, _name("topology id", topo), _name("component", component))
        for child in reversed(self._children(path, None)):
            error = self._read(ErrorInfo, f"{path}/{child}")
            if error is not None:
                return error
        return None

    # --- supervisors ----------------------------------------------------------------------

    def register_supervisor(self, node: str, info: SupervisorInfo) -> None:
        """Ephemeral: vanishes when this client's session ends; replaces a stale registration."""
        self._put_ephemeral(self._path(SUPERVISORS, _name("node", node)), _encode(info))

    def supervisors(self, watch: Watch | None = None) -> dict[str, SupervisorInfo]:
        return self._read_children(SupervisorInfo, self._path(SUPERVISORS), watch)

    def remove_supervisor(self, node: str) -> None:
        self._delete(self._path(SUPERVISORS, _name("node", node)))

    # --- requests to nimbus (the CLI verbs on a local cluster) ---------------------------

    def post_request(self, request: NimbusRequest) -> str:
        """Write a request for nimbus; returns its id (the sequential node's name)."""
        path = self.client.create(
            self._path(REQUESTS, "r"), _encode(request), sequence=True, makepath=True
        )
        return str(path).rsplit("/", 1)[1]

    def request_ids(self, watch: Watch | None = None) -> list[str]:
        """Ids of the stored requests, oldest first."""
        return self._children(self._path(REQUESTS), watch)

    def get_request(self, rid: str, watch: Watch | None = None) -> NimbusRequest | None:
        return self._read(NimbusRequest, self._path(REQUESTS, _name("request id", rid)), watch)

    def answer_request(self, rid: str, request: NimbusRequest) -> bool:
        """Store nimbus's answer; False if the asker gave up and removed the request."""
        try:
            self.client.set(self._path(REQUESTS, _name("request id", rid)), _encode(request))
        except NoNodeError:
            return False
        return True

    def remove_request(self, rid: str) -> None:
        self._delete(self._path(REQUESTS, _name("request id", rid)))

    # --- dynamic log levels (squall.loglevels) --------------------------------------------

    def set_log_config(self, topo: TopologyKey, config: LogConfig) -> None:
        self._put(self._path(LOGCONFIGS, _name("topology id", topo)), _encode(config))

    def get_log_config(self, topo: TopologyKey, watch: Watch | None = None) -> LogConfig | None:
        return self._read(LogConfig, self._path(LOGCONFIGS, _name("topology id", topo)), watch)

    # --- the debugging channel (squall.worker.debugging) -----------------------------------

    def set_debug_request(self, topo: TopologyKey, request: DebugRequest) -> None:
        self._put(self._path(DEBUG, _name("topology id", topo)), _encode(request))

    def get_debug_request(self, topo: TopologyKey, watch: Watch | None = None) -> DebugRequest | None:
        return self._read(DebugRequest, self._path(DEBUG, _name("topology id", topo)), watch)

    def put_worker_debug(self, topo: TopologyKey, card: WorkerDebug) -> None:
        self._put(self._path(DEBUG, _name("topology id", topo), _name("slot", card.slot)), _encode(card))

    def get_worker_debug(self, topo: TopologyKey, slot: str) -> WorkerDebug | None:
        return self._read(WorkerDebug, self._path(DEBUG, _name("topology id", topo), _name("slot", slot)))

    def worker_debugs(self, topo: TopologyKey) -> dict[str, WorkerDebug]:
        """Slot key -> the card its worker wrote last."""
        return self._read_children(WorkerDebug, self._path(DEBUG, _name("topology id", topo)), None)

    # --- the event inspector (squall.sampling) ----------------------------------------------

    def set_sampling(self, topo: TopologyKey, config: SamplingConfig) -> None:
        self._put(self._path(SAMPLING, _name("topology id", topo)), _encode(config))

    def get_sampling(self, topo: TopologyKey, watch: Watch | None = None) -> SamplingConfig | None:
        return self._read(SamplingConfig, self._path(SAMPLING, _name("topology id", topo)), watch)

    def put_samples(self, topo: TopologyKey, slot: WorkerSlot, samples: SampledTuples) -> None:
        self._put(self._path(SAMPLES, _name("topology id", topo), slot.key()), _encode(samples))

    def samples(self, topo: TopologyKey) -> dict[str, SampledTuples]:
        """Slot key -> the tuples its worker sampled last."""
        return self._read_children(SampledTuples, self._path(SAMPLES, _name("topology id", topo)), None)

    # --- whole topologies -----------------------------------------------------------------

    def topologies_with_state(self) -> set[TopologyKey]:
        """Every topology id with any node (storm, assignment, beats, endpoints, errors): what
        nimbus compares with ``storm_ids()`` to clean up leftovers."""
        ids: set[TopologyKey] = set()
        for sub in (STORMS, ASSIGNMENTS, WORKERBEATS, ENDPOINTS, ERRORS, LOGCONFIGS, DEBUG, SAMPLING, SAMPLES):
            ids.update(_keys(self._children(self._path(sub), None)))
        return ids

    def teardown_topology(self, topo: TopologyKey) -> None:
        """Remove every node of the topology; missing nodes are fine."""
        node = _name("topology id", topo)
        for sub in (STORMS, ASSIGNMENTS, WORKERBEATS, ENDPOINTS, ERRORS, LOGCONFIGS, DEBUG, SAMPLING, SAMPLES):
            self._delete(self._path(sub, node), recursive=True)


def connect(
    hosts: str, timeout: float = 15.0, session_timeout: float = 10.0, *, root: str = "/squall",
    credentials: ZkCredentials | None = None,
) -> ClusterState:
    """``ClusterState.connect``: a started client on ``hosts``, owned by the returned state."""
    return ClusterState.connect(hosts, root=root, timeout=timeout, session_timeout=session_timeout,
                                credentials=credentials)


def _serves_every_caller(state: ClusterState) -> tuple[ForWorker, ForNimbus, ForViewers]:
    """Never called: mypy checks here that ClusterState has every method of each caller's view
    (squall.stateviews), with the same signatures."""
    return state, state, state
