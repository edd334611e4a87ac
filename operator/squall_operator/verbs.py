"""Storm's CLI verbs on a running topology: list, activate, deactivate, rebalance, kill,
update (JStorm's update_topology: a new spec of the same graph, squall.specchange),
set-log-level, and the debugging verbs logs and dump-stacks.

Two targets, both behind `Target`:

- `ZooKeeperTarget`: a local cluster (`squall run` prints its `--zookeeper HOST:PORT/ROOT`).
  `list` reads ZooKeeper; the other verbs write a request that the cluster's nimbus runs
  through its lifecycle table and answers (`squall_operator.requests`), the way Storm's CLI
  asks nimbus over Thrift.
- `KubernetesTarget`: the Topology resources of a namespace, through the API server, with the
  kubeconfig, context and namespace resolved as kubectl does. activate / deactivate patch
  `spec.active`, rebalance patches `spec.numWorkers` and the components' `parallelism` (the
  operator does the rest), kill deletes the resource (the operator's finalizer runs Storm's
  kill). A rebalance's or a kill's `-w` rides on the resource as an annotation the operator
  reads (`REBALANCE_WAIT_ANNOTATION`, `KILL_WAIT_ANNOTATION`), and so do dynamic log levels
  (`LOG_LEVELS_ANNOTATION`: the operator copies them into ZooKeeper, where the workers read them).

`set-log-level` writes the topology's log config (squall.loglevels): directly in ZooKeeper on a
local cluster (no nimbus involved, as Storm's nimbus only stores it too).

`logs` and `dump-stacks` find the workers that hold a component or a task (its executors) from the
topology's plan and assignment, and ask them through ZooKeeper (squall.worker.debugging). Locally
the verb reads ZooKeeper and the worker log files (each worker's card names its file); on
Kubernetes it runs ``python -m squall.worker.debugging`` in one of the topology's worker pods
(pod exec: the pod has the ZooKeeper and its credentials) and reads the right pods' logs through
the API server's pod log endpoint, as `kubectl logs` does.

Exit codes: 0 done; 1 refused or failed (no such topology, a transition the topology's state
does not allow, more executors than tasks, an unreachable ZooKeeper or API server, no answer
from nimbus); 2 a malformed argument. Every failure is one line on stderr, never a traceback.
Like Storm's, the verbs return once nimbus (or the API server) accepted the request; the wait of
a kill or a rebalance runs after that.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final, Protocol, TypeVar

from squall import limits, specchange
from squall.models.v1alpha1 import Topology
from squall.stateviews import ForViewers
from squall.topology_keys import TopologyKey
from squall_operator.resources import (  # the annotations the operator reads
    KILL_WAIT_ANNOTATION,
    LOG_LEVELS_ANNOTATION,
    REBALANCE_WAIT_ANNOTATION,
    REBALANCE_WAIT_GENERATION_ANNOTATION,
)

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "KubernetesTarget",
    "MAX_WAIT_SECS",
    "MAX_WORKERS",
    "Target",
    "TopologyRow",
    "VerbError",
    "ZooKeeperTarget",
    "follow_files",
    "format_answer",
    "format_list",
    "merge_log_levels",
    "tail_offset",
    "parse_executors",
    "parse_zookeeper",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
# `rebalance -n` at most: a topology's numWorkers limit (Storm's nimbus.slots.perTopology). A
# topology without numAckers runs an acker per worker, so an unbounded -n would have nimbus
# plan a billion acker executors.
MAX_WORKERS: Final = limits.MAX_WORKERS
# `kill -w` and `rebalance -w` at most: as a topology's killWaitSecs and rebalanceWaitSecs
MAX_WAIT_SECS: Final = limits.MAX_SECONDS
DEFAULT_ROOT = "/squall"


class VerbError(Exception):
    """A verb that cannot be done: one line for the user, and the exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class TopologyRow:
    """One line of `squall list` (Storm's columns)."""

    name: str
    status: str
    num_tasks: int
    num_workers: int
    uptime_secs: int
    namespace: str | None = None  # Kubernetes: the Topology's namespace


def format_list(rows: Sequence[TopologyRow], *, namespaces: bool = False) -> str:
    """`storm list`'s table, or its "No topologies running." line; `namespaces`: a first
    column with each row's namespace (as `kubectl get -A`)."""
    if not rows:
        return "No topologies running."
    header: tuple[str, ...] = ("Topology_name", "Status", "Num_tasks", "Num_workers", "Uptime_secs")
    cells = [header] + [
        (r.name, r.status, str(r.num_tasks), str(r.num_workers), str(r.uptime_secs)) for r in rows
    ]
    if namespaces:
        cells = [("Namespace", *cells[0])] + [(r.namespace or "", *c) for r, c in zip(rows, cells[1:], strict=True)]
        header = cells[0]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def parse_executors(items: Sequence[str]) -> dict[str, int]:
    """`-e COMPONENT=PARALLELISM` arguments -> {component: parallelism}."""
    out: dict[str, int] = {}
    for item in items:
        comp, sep, value = item.partition("=")
        comp, value = comp.strip(), value.strip()
        if not sep or not comp or not value.isdigit() or int(value) < 1:
            raise VerbError(
                f"malformed -e {item!r}: expected COMPONENT=PARALLELISM, PARALLELISM a whole "
                "number of at least 1", EXIT_USAGE)
        out[comp] = int(value)
    return out


def parse_zookeeper(text: str) -> tuple[str, str]:
    """"HOST:PORT[,HOST:PORT...][/ROOT]" -> (connect string, root); the root defaults to
    /squall (the operator's)."""
    hosts, slash, root = text.strip().partition("/")
    root = "/" + root.rstrip("/") if slash else DEFAULT_ROOT
    ok = bool(hosts) and root != "/"
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        ok = ok and bool(name) and bool(colon) and port.isdigit() and 0 < int(port) < 65536
    if not ok:
        raise VerbError(f"malformed --zookeeper {text!r}: expected HOST:PORT[,HOST:PORT...][/ROOT]",
                        EXIT_USAGE)
    return hosts, root


class Target(Protocol):
    """Where the verbs act; every method raises `VerbError` when refused."""

    def list(self) -> list[TopologyRow]: ...
    def activate(self, name: str) -> str: ...
    def deactivate(self, name: str) -> str: ...
    def rebalance(self, name: str, num_workers: int | None, executors: Mapping[str, int],
                  wait_secs: float | None) -> str: ...
    def kill(self, name: str, wait_secs: float | None) -> str: ...
    def update(self, name: str, topology: Topology, wait_secs: float | None,
               out: Callable[[str], None]) -> str: ...
    def set_log_level(self, name: str, settings: Sequence[str], remove: Sequence[str]) -> str: ...
    def logs(self, name: str, target: str | None, follow: bool, tail: int, out: Callable[[str], None]) -> str: ...
    def dump_stacks(self, name: str, target: str | None, profile_secs: float | None,
                    out: Callable[[str], None]) -> str: ...
    def debug(self, name: str, component: str | None, pct: float | None, secs: float | None) -> str: ...
    def events(self, name: str, component: str | None, tail: int) -> Sequence[dict[str, Any]]: ...
    def close(self) -> None: ...


def _update_refused(name: str, running: Topology, asked: Topology) -> specchange.SpecChange:
    """How `asked` applies to `name` running `running`; a VerbError for what cannot be applied
    (the same decisions nimbus and the operator make: squall.specchange, and
    squall_operator.upgrade.refusal for a graph upgrade)."""
    from squall_operator import upgrade

    if asked.name != name:
        raise VerbError(f"update: the file's topology is {asked.name!r}, not {name!r}", EXIT_USAGE)
    change = specchange.classify(running.spec, asked.spec)
    if change.kind is specchange.Kind.REFUSED:
        raise VerbError(f"update: topology {name!r} {change.describe()}")
    if change.kind is specchange.Kind.UPGRADE:
        why = upgrade.refusal(running, asked, change)
        if why is not None:
            raise VerbError(f"update: topology {name!r} {change.describe()}; refused: {why}")
    return change


def _check_executors(name: str, tasks: Mapping[str, int], executors: Mapping[str, int]) -> None:
    for comp, n in executors.items():
        if comp not in tasks:
            known = ", ".join(sorted(tasks))
            raise VerbError(f"rebalance: topology {name!r} has no component {comp!r} (it has {known})")
        if n > tasks[comp]:
            raise VerbError(f"rebalance: {comp} has {tasks[comp]} tasks, cannot run {n} executors")


# --- logs and stack dumps -------------------------------------------------------------------

# seconds between two looks at a followed log file
FOLLOW_POLL_SECS = 0.25


def tail_offset(f: IO[bytes], lines: int, block: int = 1 << 16) -> int:
    """Where the last `lines` lines of the open file `f` start (lines < 0: the whole file)."""
    end = f.seek(0, os.SEEK_END)
    if lines < 0:
        return 0
    if lines == 0:
        return end
    pos = end
    if end:
        f.seek(end - 1)
        if f.read(1) == b"\n":  # the last line's own newline starts no line after it
            pos = end - 1
    need = lines
    while pos > 0:
        start = max(0, pos - block)
        f.seek(start)
        chunk = f.read(pos - start)
        i = len(chunk)
        while (i := chunk.rfind(b"\n", 0, i)) >= 0:
            need -= 1
            if need == 0:
                return start + i + 1
        pos = start
    return 0


def follow_files(paths: Mapping[str, str], tail: int, follow: bool, out: Callable[[str], None], *,
                 alive: Callable[[], bool] = lambda: True, sleep: Callable[[float], None] = time.sleep,
                 check_every: int = 8) -> None:
    """Write the last `tail` lines (tail < 0: all) of each file (name -> path) to `out`, each line
    prefixed with "[name] " when there are several; `follow`: then their new lines as they come,
    until `alive()` says no (asked every `check_every` looks)."""
    prefix = len(paths) > 1
    files = {name: open(path, "rb") for name, path in sorted(paths.items())}  # noqa: SIM115
    try:
        pos = {name: tail_offset(f, tail) for name, f in files.items()}
        pending = {name: b"" for name in files}

        def drain(name: str, final: bool) -> None:
            f = files[name]
            size = f.seek(0, os.SEEK_END)
            if size < pos[name]:  # cut short (a new file at the same path): from its start
                pos[name], pending[name] = 0, b""
            f.seek(pos[name])
            while chunk := f.read(1 << 16):
                pos[name] += len(chunk)
                *whole, pending[name] = (pending[name] + chunk).split(b"\n")
                for line in whole:
                    out(("[" + name + "] " if prefix else "") + line.decode("utf-8", "replace"))
            if final and pending[name]:
                out(("[" + name + "] " if prefix else "") + pending[name].decode("utf-8", "replace"))
                pending[name] = b""

        for name in files:
            drain(name, not follow)
        looks = 0
        while follow:
            sleep(FOLLOW_POLL_SECS)
            for name in files:
                drain(name, False)
            looks += 1
            if looks % check_every == 0 and not alive():
                for name in files:
                    drain(name, True)
                return
    finally:
        for f in files.values():
            f.close()


def format_answer(slot: str, components: Sequence[str], host: str, pid: int, text: str) -> str:
    """One worker's answer to dump-stacks, under a line naming the worker."""
    return f"==== worker {slot} on {host} (pid {pid}), running {', '.join(components)} ====\n{text.rstrip()}\n"


def _no_answer(name: str, missing: Sequence[str], timeout: float) -> VerbError:
    return VerbError(f"topology {name}: no answer from worker {', '.join(missing)} within {timeout:g}s "
                     "(is it running? a worker answers once it has started)")


# --- a local cluster, by its ZooKeeper --------------------------------------------------------


T = TypeVar("T")


def inspected(call: Callable[[], T]) -> T:
    """An event inspector call (squall.worker.eventlog) with its errors as the verbs'."""
    from squall.worker import eventlog

    try:
        return call()
    except eventlog.InspectorError as exc:
        raise VerbError(str(exc), EXIT_USAGE if exc.usage else EXIT_FAILED) from None


def format_events(rows: Sequence[Mapping[str, Any]]) -> str:
    """`squall events`' table: the sampled tuples, oldest first."""
    if not rows:
        return "no sampled tuples yet (turn sampling on with `squall debug NAME [COMPONENT] --sample PCT`)"
    lines = ["TIME          COMPONENT  TASK  STREAM   MSG-ID  VALUES"]
    for r in rows:
        when = datetime.datetime.fromtimestamp(float(r["time_secs"]), datetime.timezone.utc)
        values = ", ".join(str(v) for v in r["values"])
        msg_id = "-" if r["msg_id"] is None else r["msg_id"]
        lines.append(f"{when:%H:%M:%S.%f}"[:12] + f"  {r['component']!s:<9}  {r['task']!s:>4}  "
                     f"{r['stream']!s:<7}  {msg_id!s:>6}  [{values}]")
    return "\n".join(lines)


def _key(name: str) -> TopologyKey:
    """The topology a verb names on the command line, as the key it is stored under: on the
    local cluster its name; on the operator's ZooKeeper NAMESPACE~NAME (a bare name there is
    answered by `not_found` naming the namespaces that run one)."""
    return TopologyKey(name)


class ZooKeeperTarget:
    """The local cluster whose state lives at `connect` + `root` (see the module doc)."""

    def __init__(self, zookeeper: str, *, timeout: float = 30.0, connect_timeout: float = 5.0) -> None:
        from kazoo.exceptions import NoAuthError

        from squall.state import ZK_AUTH_FILE_ENV, ClusterState, StateError, ZkCredentials

        self.connect, self.root = parse_zookeeper(zookeeper)
        self.where = f"{self.connect}{self.root}"
        self.timeout = timeout
        try:  # the cluster's nodes carry a digest ACL: `squall run` prints the file to name
            credentials = ZkCredentials.from_env()
        except ValueError as exc:
            raise VerbError(f"{ZK_AUTH_FILE_ENV}: {exc}") from None
        refused = (f"ZooKeeper refused access to {self.where}: set {ZK_AUTH_FILE_ENV} to the credentials "
                   "file `squall run` printed" if credentials is None else
                   f"ZooKeeper refused the credentials in ${ZK_AUTH_FILE_ENV} for {self.where}")
        try:  # a viewer's session: read the state and post requests, the changes left to nimbus
            self.state: ForViewers = ClusterState.connect(self.connect, timeout=connect_timeout, root=self.root,
                                                          credentials=credentials)
        except StateError as exc:
            raise VerbError(f"cannot reach ZooKeeper at {self.connect} (within {connect_timeout:g}s)") from exc
        except NoAuthError:
            raise VerbError(refused) from None
        try:
            self.state.storm_ids()
        except NoAuthError:
            self.state.close()
            raise VerbError(refused) from None

    def close(self) -> None:
        self.state.close()

    def _base(self, name: str) -> Any:
        from squall.state import StateError

        try:
            base = self.state.get_storm(_key(name))
        except (StateError, ValueError) as exc:
            raise VerbError(f"topology {name!r}: {exc}") from exc
        if base is None:
            from squall.state import not_found

            why = not_found(name, self.state.storm_ids())
            if why == f"no topology named {name!r}":
                raise VerbError(f"{why} is running at {self.where}")
            # the operator's ZooKeeper, where topologies are keyed by namespace and name
            raise VerbError(f"{why} at {self.where}; or use --kubernetes --namespace NAMESPACE")
        return base

    def list(self) -> list[TopologyRow]:
        from squall.models.cluster import parse_executor_key

        rows = []
        now = time.time()
        for name in self.state.storm_ids():
            base = self.state.get_storm(name)
            if base is None:
                continue
            assignment = self.state.get_assignment(name)
            slots = assignment.executor_slots if assignment is not None else {}
            tasks = sum(e - s + 1 for s, e in map(parse_executor_key, slots))
            rows.append(TopologyRow(name, base.status.value, tasks, len(set(slots.values())),
                                    max(0, int(now - base.launch_time_secs))))
        return rows

    def _ask(self, name: str, action: str, **args: Any) -> str:
        from squall.models.cluster import NimbusRequest

        self._base(name)  # a clear line for an unknown topology, before asking nimbus
        rid = self.state.post_request(NimbusRequest(action=action, topology=name, **args))
        deadline = time.monotonic() + self.timeout
        try:
            while time.monotonic() < deadline:
                req = self.state.get_request(rid)
                if req is not None and req.answered:
                    if not req.ok:
                        raise VerbError(req.message)
                    return req.message
                time.sleep(0.1)
        finally:
            self.state.remove_request(rid)
        raise VerbError(f"no nimbus answered at {self.where} within {self.timeout:g}s "
                        "(is `squall run` still running?)")

    def activate(self, name: str) -> str:
        return self._ask(name, "activate")

    def deactivate(self, name: str) -> str:
        return self._ask(name, "deactivate")

    def rebalance(self, name: str, num_workers: int | None, executors: Mapping[str, int],
                  wait_secs: float | None) -> str:
        from squall import validation
        from squall_operator import stored

        topology = stored.topology(self._base(name))
        _check_executors(name, {c.name: c.tasks for c in topology.spec.components}, executors)
        over = validation.rebalance_problem(topology, num_workers, executors)
        if over is not None:
            raise VerbError(f"rebalance: topology {name!r}: {over}")
        return self._ask(name, "rebalance", num_workers=num_workers,
                         executors=dict(executors) or None, wait_secs=wait_secs)

    def kill(self, name: str, wait_secs: float | None) -> str:
        return self._ask(name, "kill", wait_secs=wait_secs)

    def update(self, name: str, topology: Topology, wait_secs: float | None,
               out: Callable[[str], None]) -> str:
        """Apply `topology` to the running one; a graph upgrade is waited for (its drain, then
        the new launch stored), its progress printed on `out`."""
        from squall_operator import stored

        base = self._base(name)
        running = stored.topology(base)
        change = _update_refused(name, running, topology)
        said = self._ask(name, "update", resource=topology.model_dump(mode="json", by_alias=True, exclude_none=True),
                         wait_secs=wait_secs)
        if change.kind is not specchange.Kind.UPGRADE:
            return said
        out(said)
        started = time.monotonic()
        wait = running.spec.rebalance_wait if wait_secs is None else wait_secs
        deadline = started + wait + self.timeout
        while time.monotonic() < deadline:
            now = self.state.get_storm(_key(name))
            if now is None:
                raise VerbError(f"update: topology {name!r} was removed during its upgrade")
            if now.launch_time_secs != base.launch_time_secs and now.upgrade_topology is None:
                return (f"topology {name}: upgraded {time.monotonic() - started:.1f}s after the deactivation: the "
                        f"new graph is launched ({now.status.value}); its workers start")
            time.sleep(0.2)
        raise VerbError(f"update: topology {name!r} was not upgraded within {wait + self.timeout:g}s "
                        "(is `squall run` still running?)")

    def set_log_level(self, name: str, settings: Sequence[str], remove: Sequence[str]) -> str:
        from squall.models.cluster import LogConfig, LogSetting

        self._base(name)
        stored = self.state.get_log_config(_key(name))
        current = {} if stored is None else {k: v.model_dump() for k, v in stored.loggers.items()}
        now = time.time()
        config = merge_log_levels(current, settings, remove, now)
        self.state.set_log_config(_key(name), LogConfig(loggers={k: LogSetting(**v) for k, v in config.items()}))
        return describe_log_levels(name, config, now)

    def _holders(self, name: str, target: str | None) -> Mapping[str, Sequence[str]]:
        from squall.worker import debugging

        self._base(name)
        try:
            return debugging.resolve(self.state, _key(name), target)
        except debugging.TargetError as exc:
            raise VerbError(f"topology {name}: {exc}") from None

    def logs(self, name: str, target: str | None, follow: bool, tail: int, out: Callable[[str], None]) -> str:
        found = self._holders(name, target)
        cards = self.state.worker_debugs(_key(name))
        paths = {}
        for slot in found:
            card = cards.get(slot)
            if card is None:
                raise VerbError(f"topology {name}: worker {slot} has not said where its log is yet (is it starting?)")
            if card.log_path is None or not os.path.isfile(card.log_path):
                where = "no file" if card.log_path is None else f"{card.log_path}, not on this machine"
                raise VerbError(f"topology {name}: worker {slot} on {card.host} logs to {where}")
            paths[slot] = card.log_path
        follow_files(paths, tail, follow, out, alive=lambda: self.state.get_storm(_key(name)) is not None)
        return ""

    def dump_stacks(self, name: str, target: str | None, profile_secs: float | None,
                    out: Callable[[str], None]) -> str:
        from squall.worker import debugging

        found = self._holders(name, target)
        got, missing = debugging.ask(self.state, _key(name), "stacks" if profile_secs is None else "profile",
                                     list(found), seconds=profile_secs or 0.0, timeout=self.timeout)
        for slot, card in sorted(got.items()):
            out(format_answer(slot, found[slot], card.host, card.pid, card.answer))
        if missing:
            raise _no_answer(name, missing, self.timeout)
        return ""


# --- Kubernetes -----------------------------------------------------------------------------

    def debug(self, name: str, component: str | None, pct: float | None, secs: float | None) -> str:
        from squall.worker import eventlog

        self._base(name)  # an unknown topology said as every verb says it, with where
        return inspected(lambda: eventlog.set_sampling(self.state, _key(name), component, pct, secs, time.time()))

    def events(self, name: str, component: str | None, tail: int) -> Sequence[dict[str, Any]]:
        from squall.worker import eventlog

        self._base(name)
        return inspected(lambda: eventlog.sampled(self.state, _key(name), component, tail))

GROUP, VERSION, PLURAL = "squall.io", "v1alpha1", "topologies"


def _pointer(key: str) -> str:
    """`key` as one JSON-pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _rows(got: Mapping[str, Any]) -> list[TopologyRow]:
    """`squall list`'s rows from a list of Topology resources."""
    rows = []
    for item in got.get("items", []):
        status = item.get("status") or {}
        rows.append(TopologyRow(
            item["metadata"]["name"],
            str(status.get("stormStatus") or status.get("phase") or "Pending"),
            int(status.get("tasks") or 0), int(status.get("workers") or 0),
            int(status.get("uptimeSecs") or 0), item["metadata"].get("namespace")))
    return rows


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def merge_log_levels(current: Mapping[str, Any], settings: Sequence[str], remove: Sequence[str],
                     now: float) -> dict[str, dict[str, Any]]:
    """The log config after `-l LOGGER=LEVEL[:SECS]` settings and `-r LOGGER` removals (a bad one:
    VerbError, exit 2)."""
    from squall import loglevels

    if not settings and not remove:
        raise VerbError("set-log-level: give -l LOGGER=LEVEL[:TIMEOUT_SECS] and/or -r LOGGER", EXIT_USAGE)
    try:
        parsed = [loglevels.parse_setting(t) for t in settings]
        return loglevels.merge(current, parsed, list(remove), now)
    except loglevels.LogLevelError as exc:
        raise VerbError(f"set-log-level: {exc}", EXIT_USAGE) from None


def describe_log_levels(name: str, config: Mapping[str, Mapping[str, Any]], now: float) -> str:
    if not config:
        return f"topology {name}: no dynamic log levels (every logger at its own level)"
    parts = []
    for logger, setting in sorted(config.items()):
        expires = setting.get("expires")
        parts.append(f"{logger}={setting['level']}" + ("" if expires is None else f" for {expires - now:.0f}s"))
    return f"topology {name}: log levels {', '.join(parts)}"


class KubernetesTarget:
    """The Topology resources of one namespace (see the module doc)."""


    def __init__(self, *, namespace: str | None = None, kubeconfig: str | None = None,
                 context: str | None = None, request_timeout: float = 15.0) -> None:
        import os

        from kubernetes import client, config

        self.timeout = (5.0, request_timeout)
        conf = client.Configuration()
        conf.retries = 0  # an unreachable API server is one line, not three retries
        ns_from_config: str | None = None
        try:
            in_cluster = (kubeconfig is None and context is None and not os.environ.get("KUBECONFIG")
                          and not os.path.exists(os.path.expanduser("~/.kube/config"))
                          and os.environ.get("KUBERNETES_SERVICE_HOST"))
            if in_cluster:
                config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
                sa_ns = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
                if os.path.exists(sa_ns):
                    with open(sa_ns, encoding="utf-8") as f:
                        ns_from_config = f.read().strip() or None
            else:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, context=context, client_configuration=conf)
                contexts, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig)
                if context is not None:
                    active = next((c for c in contexts if c.get("name") == context), active)
                ns_from_config = ((active or {}).get("context") or {}).get("namespace")
        except (config.ConfigException, OSError, ValueError, TypeError) as exc:
            raise VerbError(f"kubeconfig: {exc}") from exc
        conf.retries = 0
        self.server = conf.host
        self.request_timeout = request_timeout
        self.namespace = namespace or ns_from_config or "default"
        self.api = client.CustomObjectsApi(client.ApiClient(conf))

    def close(self) -> None:
        self.api.api_client.close()

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, _request_timeout=self.timeout, **kw)
        except ApiException as exc:
            if exc.status == 404 and what:
                raise VerbError(f"no topology named {what!r} in namespace {self.namespace!r}") from None
            message = exc.reason or ""
            try:
                import json

                message = json.loads(exc.body or "{}").get("message") or message
            except (ValueError, AttributeError):
                pass
            raise VerbError(f"the API server at {self.server} refused: {exc.status} {message}") from None
        except Exception as exc:  # urllib3's connection errors and timeouts
            raise VerbError(f"cannot reach the Kubernetes API server at {self.server} "
                            f"({type(exc).__name__})") from None

    def _get(self, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self._call(name, self.api.get_namespaced_custom_object,
                                         GROUP, VERSION, self.namespace, PLURAL, name)
        return got

    def _patch(self, name: str, body: Any) -> None:
        kind = "json-patch" if isinstance(body, list) else "merge-patch"
        self._call(name, self.api.patch_namespaced_custom_object,
                   GROUP, VERSION, self.namespace, PLURAL, name, body,
                   _content_type=f"application/{kind}+json")

    def list(self) -> list[TopologyRow]:
        got = self._call("", self.api.list_namespaced_custom_object, GROUP, VERSION,
                         self.namespace, PLURAL)
        return _rows(got)

    def list_all(self) -> Sequence[TopologyRow]:
        """The Topology resources of every namespace (`--all-namespaces`), by namespace then name."""
        got = self._call("", self.api.list_cluster_custom_object, GROUP, VERSION, PLURAL)
        return sorted(_rows(got), key=lambda r: (r.namespace or "", r.name))

    def activate(self, name: str) -> str:
        self._get(name)
        self._patch(name, {"spec": {"active": True}})
        return f"activated topology {name} (spec.active: true)"

    def deactivate(self, name: str) -> str:
        self._get(name)
        self._patch(name, {"spec": {"active": False}})
        return f"deactivated topology {name} (spec.active: false)"

    def rebalance(self, name: str, num_workers: int | None, executors: Mapping[str, int],
                  wait_secs: float | None) -> str:
        if num_workers is None and not executors:
            raise VerbError("rebalance: give -n WORKERS and/or -e COMPONENT=PARALLELISM", EXIT_USAGE)
        obj = self._get(name)
        spec = obj.get("spec") or {}
        comps = {c.get("name"): (kind, i, c) for kind in ("spouts", "bolts")
                 for i, c in enumerate(spec.get(kind) or [])}
        status_comps = (obj.get("status") or {}).get("components") or {}
        tasks = {}
        for cname, (_, _, c) in comps.items():
            running = (status_comps.get(cname) or {}).get("tasks")
            tasks[cname] = int(running or c.get("numTasks") or c.get("parallelism") or 1)
        _check_executors(name, tasks, executors)
        # a JSON patch that tests the names it changes: a resource edited meanwhile is refused,
        # not patched in the wrong place
        meta = obj["metadata"]
        ops: list[dict[str, Any]] = []
        rv = meta.get("resourceVersion")
        if rv:
            ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
        changes = 0
        if num_workers is not None:
            changes += spec.get("numWorkers") != num_workers
            ops.append({"op": "replace" if "numWorkers" in spec else "add",
                        "path": "/spec/numWorkers", "value": num_workers})
        for cname, n in executors.items():
            kind, i, c = comps[cname]
            changes += int(c.get("parallelism") or 1) != n
            ops.append({"op": "replace" if "parallelism" in c else "add",
                        "path": f"/spec/{kind}/{i}/parallelism", "value": n})
        parts = ([f"numWorkers -> {num_workers}"] if num_workers is not None else []) + [
            f"{c} parallelism -> {n}" for c, n in sorted(executors.items())]
        if not changes:
            return f"topology {name} already runs {', '.join(parts).replace(' ->', '')}: nothing to rebalance"
        # the wait rides on the same patch, for the generation it makes (the API server adds
        # one to metadata.generation for a spec change; the resourceVersion test above makes
        # sure no other change comes between): the operator honours it for that generation only
        annotations = meta.get("annotations") or {}
        wanted: dict[str, str] = {}
        if wait_secs is not None:
            wanted = {REBALANCE_WAIT_ANNOTATION: f"{wait_secs:g}",
                      REBALANCE_WAIT_GENERATION_ANNOTATION: str(int(meta.get("generation") or 1) + 1)}
        if wanted and not meta.get("annotations"):
            ops.append({"op": "add", "path": "/metadata/annotations", "value": wanted})
        else:
            ops += [{"op": "add", "path": f"/metadata/annotations/{_pointer(k)}", "value": v}
                    for k, v in wanted.items()]
            ops += [{"op": "remove", "path": f"/metadata/annotations/{_pointer(k)}"}
                    for k in (REBALANCE_WAIT_ANNOTATION, REBALANCE_WAIT_GENERATION_ANNOTATION)
                    if k in annotations and k not in wanted]
        self._patch(name, ops)
        after = "rebalanceWaitSecs" if wait_secs is None else f"{wait_secs:g}s"
        return f"topology {name} is rebalancing ({', '.join(parts)}; reassigned after {after})"

    def update(self, name: str, topology: Topology, wait_secs: float | None,
               out: Callable[[str], None]) -> str:
        from squall.errors import TopologyError
        from squall.validation import parse_topology

        obj = self._get(name)
        try:
            running = parse_topology({"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                                      "metadata": {"name": name}, "spec": obj.get("spec") or {}})
        except TopologyError as exc:
            raise VerbError(f"update: the resource {name!r} does not parse: {exc}") from None
        change = _update_refused(name, running, topology)
        # the whole spec replaced, as `kubectl apply` of the file would; the operator applies it
        # (squall.specchange); a resource edited meanwhile is refused, not overwritten
        ops: list[dict[str, Any]] = []
        rv = obj["metadata"].get("resourceVersion")
        if rv:
            ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
        ops.append({"op": "replace", "path": "/spec",
                    "value": topology.spec.model_dump(mode="json", by_alias=True, exclude_none=True)})
        self._patch(name, ops)
        return f"topology {name}: {change.describe()} (spec replaced; the operator applies it)"

    def set_log_level(self, name: str, settings: Sequence[str], remove: Sequence[str]) -> str:
        import json

        from squall import loglevels

        res = self._get(name)
        raw = ((res.get("metadata") or {}).get("annotations") or {}).get(LOG_LEVELS_ANNOTATION)
        try:
            current = loglevels.parse_config(json.loads(raw)) if raw else {}
        except (ValueError, loglevels.LogLevelError):
            current = {}  # a hand-edited annotation the operator refuses anyway: replaced
        now = time.time()
        config = merge_log_levels(current, settings, remove, now)
        self._patch(name, {"metadata": {"annotations": {
            LOG_LEVELS_ANNOTATION: json.dumps(config, sort_keys=True) if config else None}}})
        return describe_log_levels(name, config, now) + " (the operator hands them to the workers)"

    # --- logs and stack dumps: the worker pods --------------------------------------------

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api.api_client)

    def _worker_pods(self, name: str) -> dict[str, dict[str, Any]]:
        """Slot key -> the topology's worker pod serving it (a running one before others)."""
        from squall_operator.pods import ANNOTATION_SLOT, selector_string

        got = self._call("", self._core().list_namespaced_pod, self.namespace,
                         label_selector=selector_string(name))
        pods: dict[str, dict[str, Any]] = {}
        for pod in self.api.api_client.sanitize_for_serialization(got).get("items") or []:
            meta = pod.get("metadata") or {}
            slot = (meta.get("annotations") or {}).get(ANNOTATION_SLOT)
            if not slot or meta.get("deletionTimestamp"):
                continue
            if slot not in pods or _phase(pod) == "Running" != _phase(pods[slot]):
                pods[slot] = pod
        return pods

    def _debug_exec(self, name: str, pods: Mapping[str, Mapping[str, Any]], target: str | None,
                    action: str, seconds: float = 0.0) -> dict[str, Any]:
        """``python -m squall.worker.debugging`` run in one of the topology's running worker pods
        (it has the topology's ZooKeeper and credentials): its JSON answer."""
        return self.exec_in_worker(name, pods, "squall.worker.debugging", [
            "--action", action, "--seconds", f"{seconds:g}", "--timeout", f"{self.request_timeout:g}",
            *(["--target", target] if target else [])], seconds)

    def exec_in_worker(self, name: str, pods: Mapping[str, Mapping[str, Any]], module: str,
                       module_args: Sequence[str], seconds: float = 0.0) -> dict[str, Any]:
        """``python -m MODULE --zookeeper Z --root R --topology KEY ARGS`` run in one of the
        topology's running worker pods (it has the topology's ZooKeeper and credentials; Z, R and
        KEY, its key in ZooKeeper, come from the worker's own arguments): the JSON object it prints
        last. `{"error": ...}` is a VerbError (exit 2 when it says `"usage": true`)."""
        import json

        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        running = [p for _, p in sorted(pods.items()) if _phase(p) == "Running"]
        if not running:
            raise VerbError(f"topology {name}: no worker pod is running in namespace {self.namespace!r} "
                            "(the workers are asked through one)")
        pod = running[0]
        pod_name = pod["metadata"]["name"]
        container = next((c for c in pod["spec"]["containers"] if c.get("name") == "worker"), pod["spec"]["containers"][0])
        args = list(container.get("args") or [])

        def arg(flag: str, default: str) -> str:
            return args[args.index(flag) + 1] if flag in args[:-1] else default

        # the worker's own key: NAMESPACE~NAME, or the bare name an older operator stored
        command = ["python", "-m", module, "--zookeeper", arg("--zookeeper", ""),
                   "--root", arg("--root", DEFAULT_ROOT), "--topology", arg("--topology", name), *module_args]
        try:
            ws = stream(self._core().connect_get_namespaced_pod_exec, pod_name, self.namespace,
                        container=container.get("name"), command=command, stdin=False, stdout=True,
                        stderr=True, tty=False, _preload_content=False)
            try:
                ws.run_forever(timeout=self.request_timeout + seconds + 20.0)
                stdout, stderr = ws.read_channel(1), ws.read_channel(2)
            finally:
                ws.close()
        except ApiException as exc:
            raise VerbError(f"the API server at {self.server} refused to exec in pod {pod_name}: "
                            f"{exc.status} {exc.reason} (the debugging verbs need create on pods/exec)") from None
        except Exception as exc:
            raise VerbError(f"exec in pod {pod_name} through {self.server} failed ({type(exc).__name__}: {exc})") from None
        try:
            data: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            said = (stderr or stdout).strip().splitlines()
            raise VerbError(f"topology {name}: pod {pod_name} gave no answer"
                            + (f" ({said[-1][:300]})" if said else "")) from None
        if "error" in data:
            raise VerbError(f"topology {name}: {data['error']}", EXIT_USAGE if data.get("usage") else EXIT_FAILED)
        data["pod"] = pod_name
        return data

    def logs(self, name: str, target: str | None, follow: bool, tail: int, out: Callable[[str], None]) -> str:
        self._get(name)
        pods = self._worker_pods(name)
        if target is None:
            slots = list(pods)
            if not slots:
                raise VerbError(f"topology {name}: no worker pod in namespace {self.namespace!r} yet")
        else:
            slots = list(self._debug_exec(name, pods, target, "where")["holders"])
        chosen = {}
        for slot in sorted(slots):
            if slot not in pods:
                raise VerbError(f"topology {name}: worker {slot} has no pod (yet)")
            chosen[slot] = pods[slot]["metadata"]["name"]
        prefix = len(chosen) > 1
        core = self._core()
        tail_lines = tail if tail >= 0 else None
        if not follow:
            for slot, pod in chosen.items():
                text = self._call("", core.read_namespaced_pod_log, pod, self.namespace, container="worker",
                                  tail_lines=tail_lines)
                for line in str(text).splitlines():
                    out(f"[{slot}] {line}" if prefix else line)
            return ""
        return self._follow(chosen, tail_lines, out)

    def _follow(self, chosen: Mapping[str, str], tail_lines: int | None, out: Callable[[str], None]) -> str:
        """The pods' logs as they come (`kubectl logs -f`), until every pod's stream ends."""
        import queue
        import threading

        lines: queue.Queue[tuple[str, str | None]] = queue.Queue(maxsize=10_000)
        core = self._core()
        prefix = len(chosen) > 1
        failures: list[str] = []

        def pump(slot: str, pod: str) -> None:
            try:
                # no read timeout (the client refuses None in the pair): a log may be quiet for long,
                # as with `kubectl logs -f`
                resp = core.read_namespaced_pod_log(pod, self.namespace, container="worker", follow=True,
                                                    tail_lines=tail_lines, _preload_content=False)
                rest = b""
                # read1: what has come, not a full 4 KiB (a quiet log would be held back)
                while chunk := resp.read1(4096):
                    *whole, rest = (rest + chunk).split(b"\n")
                    for line in whole:
                        lines.put((slot, line.decode("utf-8", "replace")))
                if rest:
                    lines.put((slot, rest.decode("utf-8", "replace")))
            except Exception as exc:
                failures.append(f"pod {pod}: {type(exc).__name__}: {exc}"[:300])
            finally:
                lines.put((slot, None))

        for slot, pod in chosen.items():
            threading.Thread(target=pump, args=(slot, pod), name=f"logs-{pod}", daemon=True).start()
        live = len(chosen)
        while live:
            try:
                slot, line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                live -= 1
            else:
                out(f"[{slot}] {line}" if prefix else line)
        if failures:
            raise VerbError(f"following the logs failed: {'; '.join(failures)}")
        return ""

    def dump_stacks(self, name: str, target: str | None, profile_secs: float | None,
                    out: Callable[[str], None]) -> str:
        self._get(name)
        pods = self._worker_pods(name)
        data = self._debug_exec(name, pods, target, "stacks" if profile_secs is None else "profile",
                                profile_secs or 0.0)
        for slot, card in sorted(data.get("answers", {}).items()):
            pod = (pods.get(slot) or {}).get("metadata", {}).get("name")
            out(format_answer(f"{slot} (pod {pod})" if pod else slot, data["holders"].get(slot, []),
                              card["host"], card["pid"], card["answer"]))
        if data.get("missing"):
            raise _no_answer(name, data["missing"], self.request_timeout)
        return ""


    def debug(self, name: str, component: str | None, pct: float | None, secs: float | None) -> str:
        self._get(name)
        got = self.exec_in_worker(name, self._worker_pods(name), "squall.worker.eventlog", [
            *(["--component", component] if component else []),
            *(["--off"] if pct is None else ["--sample", f"{pct!r}"]),
            *([] if secs is None else ["--secs", f"{secs!r}"])])
        return str(got["message"])

    def events(self, name: str, component: str | None, tail: int) -> Sequence[dict[str, Any]]:
        self._get(name)
        got = self.exec_in_worker(name, self._worker_pods(name), "squall.worker.eventlog", [
            *(["--component", component] if component else []), "--tail", str(tail)])
        return list(got["events"])
    def kill(self, name: str, wait_secs: float | None) -> str:
        self._get(name)
        if wait_secs is not None:
            # the operator's kill reads it from the deleted resource (else killWaitSecs)
            self._patch(name, {"metadata": {"annotations": {KILL_WAIT_ANNOTATION: f"{wait_secs:g}"}}})
        self._call(name, self.api.delete_namespaced_custom_object,
                   GROUP, VERSION, self.namespace, PLURAL, name)
        after = "killWaitSecs" if wait_secs is None else f"{wait_secs:g}s"
        return f"killed topology {name} (the operator removes it after {after})"
