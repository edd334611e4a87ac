"""Storm's CLI verbs on a running topology: list, activate, deactivate, rebalance, kill,
set-log-level.

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

Exit codes: 0 done; 1 refused or failed (no such topology, a transition the topology's state
does not allow, more executors than tasks, an unreachable ZooKeeper or API server, no answer
from nimbus); 2 a malformed argument. Every failure is one line on stderr, never a traceback.
Like Storm's, the verbs return once nimbus (or the API server) accepted the request; the wait of
a kill or a rebalance runs after that.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from squall import limits
from squall_operator.resources import LOG_LEVELS_ANNOTATION

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
    "format_list",
    "merge_log_levels",
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
    def set_log_level(self, name: str, settings: Sequence[str], remove: Sequence[str]) -> str: ...
    def close(self) -> None: ...


def _check_executors(name: str, tasks: Mapping[str, int], executors: Mapping[str, int]) -> None:
    for comp, n in executors.items():
        if comp not in tasks:
            known = ", ".join(sorted(tasks))
            raise VerbError(f"rebalance: topology {name!r} has no component {comp!r} (it has {known})")
        if n > tasks[comp]:
            raise VerbError(f"rebalance: {comp} has {tasks[comp]} tasks, cannot run {n} executors")


# --- a local cluster, by its ZooKeeper --------------------------------------------------------


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
        try:
            self.state = ClusterState.connect(self.connect, timeout=connect_timeout, root=self.root,
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
            base = self.state.get_storm(name)
        except (StateError, ValueError) as exc:
            raise VerbError(f"topology {name!r}: {exc}") from exc
        if base is None:
            raise VerbError(f"no topology named {name!r} is running at {self.where}")
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
        from squall_operator import stored

        topology = stored.topology(self._base(name))
        _check_executors(name, {c.name: c.tasks for c in topology.spec.components}, executors)
        over = limits.rebalance_problem(topology, num_workers, executors)
        if over is not None:
            raise VerbError(f"rebalance: topology {name!r}: {over}")
        return self._ask(name, "rebalance", num_workers=num_workers,
                         executors=dict(executors) or None, wait_secs=wait_secs)

    def kill(self, name: str, wait_secs: float | None) -> str:
        return self._ask(name, "kill", wait_secs=wait_secs)

    def set_log_level(self, name: str, settings: Sequence[str], remove: Sequence[str]) -> str:
        from squall.models.cluster import LogConfig, LogSetting

        self._base(name)
        stored = self.state.get_log_config(name)
        current = {} if stored is None else {k: v.model_dump() for k, v in stored.loggers.items()}
        now = time.time()
        config = merge_log_levels(current, settings, remove, now)
        self.state.set_log_config(name, LogConfig(loggers={k: LogSetting(**v) for k, v in config.items()}))
        return describe_log_levels(name, config, now)


# --- Kubernetes -----------------------------------------------------------------------------

GROUP, VERSION, PLURAL = "squall.io", "v1alpha1", "topologies"
# read by the operator's kill (squall_operator.resources.KILL_WAIT_ANNOTATION)
KILL_WAIT_ANNOTATION = "squall.io/kill-wait-secs"
# read by the operator's rebalance (resources.REBALANCE_WAIT_ANNOTATION): the wait, and the
# generation of the spec it applies to
REBALANCE_WAIT_ANNOTATION = "squall.io/rebalance-wait-secs"
REBALANCE_WAIT_GENERATION_ANNOTATION = "squall.io/rebalance-wait-generation"


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

    def kill(self, name: str, wait_secs: float | None) -> str:
        self._get(name)
        if wait_secs is not None:
            # the operator's kill reads it from the deleted resource (else killWaitSecs)
            self._patch(name, {"metadata": {"annotations": {KILL_WAIT_ANNOTATION: f"{wait_secs:g}"}}})
        self._call(name, self.api.delete_namespaced_custom_object,
                   GROUP, VERSION, self.namespace, PLURAL, name)
        after = "killWaitSecs" if wait_secs is None else f"{wait_secs:g}s"
        return f"killed topology {name} (the operator removes it after {after})"
