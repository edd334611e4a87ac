"""The Kubernetes API as the operator uses it: the few calls it makes (`KubeApi`, a Protocol that
tests implement with a fake) and their adapter over the official client (`KubernetesApi`), which
turns the client's errors into three the operator acts on (`ApiConflict`, `ApiNotFound`,
`ApiRejected`). The only module that imports the `kubernetes` package, and only when an adapter
is made.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from squall.models.v1alpha1 import API_VERSION, KIND
from squall_operator import pods


class ApiConflict(Exception):
    """The object already exists, or changed since it was read (HTTP 409)."""


class ApiNotFound(Exception):
    """HTTP 404."""


class ApiRejected(Exception):
    """The API server refused the object as invalid or forbidden (HTTP 400, 403, 422): its
    message names the field."""


class KubeApi(Protocol):
    """The few API calls the operator makes; tests pass a fake."""

    def list_nodes(self) -> list[dict[str, Any]]: ...
    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]: ...
    def create_pod(self, namespace: str, body: dict[str, Any]) -> None: ...
    def create_secret(self, namespace: str, body: dict[str, Any]) -> None: ...
    def create_network_policy(self, namespace: str, body: dict[str, Any]) -> None: ...
    def delete_pod(self, namespace: str, name: str, grace_secs: int | None = None) -> None: ...
    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...
    def patch_topology(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None: ...
    def list_topologies(self, namespace: str | None) -> list[dict[str, Any]]: ...
    def post_event(self, namespace: str, name: str, uid: str, type_: str, reason: str,
                   message: str) -> None: ...
    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_lease(self, namespace: str, body: dict[str, Any]) -> None: ...
    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> None: ...
    def apply_secret(self, namespace: str, body: dict[str, Any]) -> None: ...
    def apply_disruption_budget(self, namespace: str, body: dict[str, Any]) -> None: ...
    def delete_disruption_budget(self, namespace: str, name: str) -> None: ...


def now_micro() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _api_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


class KubernetesApi:
    """`KubeApi` over the `kubernetes` package (in-cluster credentials, else $KUBECONFIG)."""

    def __init__(self, timeout: tuple[float, float] = (5.0, 30.0)) -> None:
        from kubernetes import client, config

        # (connect, read) seconds for every call: a hung call must not stall the loop
        self.timeout = timeout
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        self._client = client
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()
        self.coordination = client.CoordinationV1Api()

    def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kw)
        except ApiException as exc:
            if exc.status == 409:
                raise ApiConflict(str(exc.reason)) from None
            if exc.status == 404:
                raise ApiNotFound(str(exc.reason)) from None
            if exc.status in (400, 403, 422):
                raise ApiRejected(_api_message(exc)) from None
            raise
        data = resp.data
        return json.loads(data) if data else None

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self._call(self.core.list_node)["items"])

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        return list(self._call(self.core.list_namespaced_pod, namespace, label_selector=sel)["items"])

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        self._call(self.core.create_namespaced_pod, namespace, body)

    def create_secret(self, namespace: str, body: dict[str, Any]) -> None:
        self._call(self.core.create_namespaced_secret, namespace, body)

    def create_network_policy(self, namespace: str, body: dict[str, Any]) -> None:
        self._call(self._client.NetworkingV1Api().create_namespaced_network_policy, namespace, body)

    def delete_pod(self, namespace: str, name: str, grace_secs: int | None = None) -> None:
        kw: dict[str, Any] = {}
        if grace_secs is not None:
            kw["grace_period_seconds"] = grace_secs
        try:
            self._call(self.core.delete_namespaced_pod, name, namespace, **kw)
        except ApiNotFound:
            pass

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        # a JSON patch replacing the whole status: a merge patch would keep map keys that are
        # gone (a slot the topology left stays under status.slots)
        self._call(
            self.custom.patch_namespaced_custom_object_status,
            pods.GROUP, "v1alpha1", namespace, "topologies", name,
            [{"op": "add", "path": "/status", "value": status}],
            _content_type="application/json-patch+json",
        )

    def patch_topology(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        # a JSON patch: its `test` operations make it fail (422) when the spec changed meanwhile
        self._call(self.custom.patch_namespaced_custom_object, pods.GROUP, "v1alpha1", namespace,
                   "topologies", name, ops, _content_type="application/json-patch+json")

    def list_topologies(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace is None:
            out = self._call(self.custom.list_cluster_custom_object, pods.GROUP, "v1alpha1", "topologies")
        else:
            out = self._call(self.custom.list_namespaced_custom_object, pods.GROUP, "v1alpha1",
                             namespace, "topologies")
        return list(out["items"])

    def post_event(self, namespace: str, name: str, uid: str, type_: str, reason: str, message: str) -> None:
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": name,
                               "namespace": namespace, "uid": uid},
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "squall-operator"},
            "reportingComponent": "squall-operator",
            "reportingInstance": os.environ.get("HOSTNAME", "squall-operator"),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._call(self.core.create_namespaced_event, namespace, body)

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = self._call(self.coordination.read_namespaced_lease, name, namespace)
            return out
        except ApiNotFound:
            return None

    def create_lease(self, namespace: str, body: dict[str, Any]) -> None:
        self._call(self.coordination.create_namespaced_lease, namespace, body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self._call(self.coordination.replace_namespaced_lease, name, namespace, body)

    def apply_secret(self, namespace: str, body: dict[str, Any]) -> None:
        """Create the Secret, or replace its data when it exists."""
        try:
            self._call(self.core.create_namespaced_secret, namespace, body)
        except ApiConflict:
            self._call(self.core.replace_namespaced_secret, body["metadata"]["name"], namespace, body)

    def apply_disruption_budget(self, namespace: str, body: dict[str, Any]) -> None:
        """Create the PodDisruptionBudget, or merge its labels, owner and spec into the one that
        exists."""
        policy = self._client.PolicyV1Api()
        try:
            self._call(policy.create_namespaced_pod_disruption_budget, namespace, body)
        except ApiConflict:
            patch = {"metadata": {k: body["metadata"][k] for k in ("labels", "ownerReferences")},
                     "spec": body["spec"]}
            self._call(policy.patch_namespaced_pod_disruption_budget, body["metadata"]["name"], namespace,
                       patch, _content_type="application/merge-patch+json")

    def delete_disruption_budget(self, namespace: str, name: str) -> None:
        try:
            self._call(self._client.PolicyV1Api().delete_namespaced_pod_disruption_budget, name, namespace)
        except ApiNotFound:
            pass


__all__ = ["ApiConflict", "ApiNotFound", "ApiRejected", "KubeApi", "KubernetesApi", "now_micro", "parse_time"]
