"""The kopf handlers: thin glue between the API server's events and `KubeNimbus`.

Handlers only record what the API server says (spec, generation, deletion) and wake nimbus's
reconcile loop, which does the work level-based: submit, activate / deactivate, rebalance,
kill, worker pods, status. So a handler never blocks a thread on ZooKeeper or a wait (the
delete handler awaits the kill's end on kopf's event loop, looking every `KILL_POLL_S`), and an
operator that restarts in the middle of anything resumes from ZooKeeper and the resources (kopf
calls `reconcile` for every existing Topology on start, and `kill` again for one being deleted).

Leader election happens in `startup`, before kopf starts watching: a standby replica waits there
until the Lease is free, so two replicas never both act.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import kopf

from squall_operator.crd import GROUP, PLURAL, VERSION
from squall_operator.health import Health
from squall_operator.kube_api import KubeApi, KubernetesApi
from squall_operator.kube_nimbus import KubeNimbus, OperatorConfig
from squall_operator.kube_state import KubeClusterState
from squall_operator.lease import LeaseElector
from squall_operator.metrics import NimbusMetrics
from squall_operator.pods import LABEL_COMPONENT, LABEL_MANAGED_BY
from squall_operator.resources import (
    kill_wait_from_annotations,
    log_levels_from_annotations,
    rebalance_wait_from_annotations,
)

log = logging.getLogger("squall.operator")

FINALIZER = "squall.io/kill"
# The delete handler looks this often whether nimbus's loop finished the kill, so the finalizer
# goes within a quarter second of the last worker pod (it raised kopf's TemporaryError every 2 s
# before: up to 2 s more per `kubectl delete`, and an ERROR line in the operator's log each time);
# after KILL_HANDLER_S it hands back to kopf, which records the handler's progress and calls it
# again (a long killWaitSecs says so once every KILL_HANDLER_S).
KILL_POLL_S = 0.25
KILL_HANDLER_S = 60.0


@dataclass
class OperatorContext:
    """What the handlers share; kopf copies `memo` per object, this object stays one."""

    config: OperatorConfig
    stop: threading.Event = field(default_factory=threading.Event)
    nimbus: KubeNimbus | None = None
    api: KubeApi | None = None
    state: KubeClusterState | None = None
    # called when the Lease is lost: the process must stop acting at once
    on_lost: Any = None
    # what /readyz reports (operator_main serves it)
    health: Health | None = None
    # what /metrics reports (operator_main serves it; nimbus fills it)
    metrics: NimbusMetrics | None = None


def _context(memo: Any) -> OperatorContext:
    ctx = memo.context
    assert isinstance(ctx, OperatorContext)
    return ctx


def _nimbus(memo: Any) -> KubeNimbus:
    nimbus = _context(memo).nimbus
    if nimbus is None:
        raise kopf.TemporaryError("nimbus is not started yet", delay=2)
    return nimbus


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="squall.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="squall.io", key="last-handled-configuration"
    )
    # the operator posts its own Events (why a worker moved, a rebalance's phases); kopf's
    # "handler succeeded / retrying" events would only bury them
    settings.posting.enabled = False
    settings.peering.standalone = True
    ctx = _context(memo)
    config = ctx.config
    api: KubeApi = ctx.api if ctx.api is not None else await asyncio.to_thread(KubernetesApi)
    ctx.api = api
    elector = LeaseElector(api, config.lease_namespace, config.lease_name, config.identity,
                           config.lease_duration_secs, health=ctx.health)
    log.info("waiting for lease %s/%s as %s", config.lease_namespace, config.lease_name, config.identity)
    if not await asyncio.to_thread(elector.acquire, ctx.stop):
        return
    state = await asyncio.to_thread(KubeClusterState.connect, config.zookeeper, root=config.zk_root,
                                    credentials=config.zk_credentials)
    assert isinstance(state, KubeClusterState)
    ctx.state = state
    if ctx.health is not None:
        ctx.health.zk_client = state.client
    nimbus = KubeNimbus(state, api, config, health=ctx.health, metrics=ctx.metrics)
    await asyncio.to_thread(nimbus.start_operator, ctx.stop)
    ctx.nimbus = nimbus
    threading.Thread(target=elector.keep, args=(ctx.stop, ctx.on_lost or _exit_on_lost),
                     name="squall-lease", daemon=True).start()
    log.info("squall operator is nimbus (zookeeper %s, root %s)", config.zookeeper, config.zk_root)


def _exit_on_lost() -> None:
    import os

    log.critical("lost the leader lease: exiting so that only one operator acts")
    logging.shutdown()
    os._exit(70)


@kopf.on.cleanup()
async def cleanup(memo: Any, **_: Any) -> None:
    ctx = _context(memo)
    ctx.stop.set()
    if ctx.nimbus is not None:
        await asyncio.to_thread(ctx.nimbus.stop_operator)
    if ctx.state is not None:
        ctx.state.close()


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(meta: kopf.Meta, spec: kopf.Spec, status: kopf.Status, namespace: str | None,
              name: str, uid: str, memo: Any, **_: Any) -> None:
    """Record the spec; nimbus's loop validates it and acts (submit, (de)activate, rebalance)."""
    _register(meta, spec, status, namespace, name, uid, memo)


def _register(meta: kopf.Meta, spec: kopf.Spec, status: kopf.Status, namespace: str | None,
              name: str, uid: str, memo: Any) -> None:
    _nimbus(memo).register(
        namespace or "default", name, uid, int(meta.get("generation") or 1), dict(spec),
        dict(meta.get("labels") or {}), dict(status or {}),
        rebalance_wait=rebalance_wait_from_annotations(meta.get("annotations")),
        log_levels=log_levels_from_annotations(meta.get("annotations")),
    )


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def kill(meta: kopf.Meta, spec: kopf.Spec, status: kopf.Status, namespace: str | None, name: str,
               uid: str, memo: Any, **_: Any) -> None:
    """Storm's kill: the finalizer holds the resource until the workers and the ZooKeeper
    state are gone (after killWaitSecs). Nimbus's loop does the kill; this waits for its end
    without holding a thread (nimbus's calls, which take its lock, run on one)."""
    nimbus = _nimbus(memo)
    done = await asyncio.to_thread(
        nimbus.request_kill,
        namespace or "default", name, uid, int(meta.get("generation") or 1), dict(spec), dict(status or {}),
        kill_wait=kill_wait_from_annotations(meta.get("annotations")),
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + KILL_HANDLER_S
    while not done:
        if loop.time() >= deadline:
            raise kopf.TemporaryError("killing: spouts deactivated, waiting for killWaitSecs and the workers "
                                      "to stop", delay=KILL_POLL_S)
        await asyncio.sleep(KILL_POLL_S)
        done = await asyncio.to_thread(nimbus.kill_done, uid)


def _pod_going(type: str | None, body: kopf.Body, **_: Any) -> bool:
    """A worker pod event worth waking the loop for: deleted, being deleted or finished (the
    others are not even handed to the handler: kopf logs every handler call at INFO)."""
    return (type == "DELETED" or body.meta.get("deletionTimestamp") is not None
            or body.status.get("phase") in ("Failed", "Succeeded"))


@kopf.on.event("", "v1", "pods", labels={LABEL_MANAGED_BY: "squall-operator", LABEL_COMPONENT: "worker"},
               when=_pod_going)
def worker_pod_event(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
    """The watch on worker pods: one being deleted (`kubectl delete pod`, an eviction) or gone
    wakes nimbus's loop at once, which makes its slot a new pod (under a new name, while the old
    one terminates). Only wakes: the loop reads the pods itself, level-based."""
    nimbus = _context(memo).nimbus
    if nimbus is None:  # not the leader yet: the loop reads every pod when it starts
        return
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    nimbus.pod_event(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                     deleting=meta.get("deletionTimestamp") is not None, gone=event.get("type") == "DELETED",
                     finished=(obj.get("status") or {}).get("phase") in ("Failed", "Succeeded"))
