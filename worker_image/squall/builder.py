"""Storm's `TopologyBuilder`, in Python, producing the same `Topology` resource a YAML file does.

    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("split", SplitBolt, parallelism=2).shuffle_grouping("sentences")
    b.set_bolt("count", CountBolt, parallelism=2).fields_grouping("split", ["word"])
    topo = b.build(num_workers=2)
    print(topology_to_yaml(topo))

Components are given as classes or as "module:Class" strings; a class becomes "module:Class", so
it must live in an importable module (not `__main__`, not inside a function). `build` checks what
the schema checks (raising `TopologyError`); `squall.validation.check_topology` checks the graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeAlias

import yaml

from squall.models.v1alpha1 import API_VERSION, KIND, Grouping, StreamSpec, Topology
from squall.validation import DEFAULT_STREAM, normalize_outputs, parse_topology

__all__ = [
    "BoltDeclarer",
    "ComponentDeclarer",
    "SpoutDeclarer",
    "TopologyBuilder",
    "class_path",
    "topology_to_yaml",
]

ClassRef: TypeAlias = type | str
WindowSizeArg: TypeAlias = int | str | timedelta


def _duration(value: str | timedelta) -> str:
    if isinstance(value, timedelta):
        us = value // timedelta(microseconds=1)
        if us % 1_000_000 == 0:
            return f"{us // 1_000_000}s"
        if us % 1000 == 0:
            return f"{us // 1000}ms"
        return f"{us / 1000:.3f}ms"
    return value


def _window_size(value: WindowSizeArg) -> int | str:
    return _duration(value) if isinstance(value, timedelta) else value
OutputsDecl: TypeAlias = (
    Sequence[str] | Mapping[str, Any] | Sequence[StreamSpec] | Sequence[Mapping[str, Any]] | None
)


def class_path(ref: type | str) -> str:
    """"module:Class" for a class (a string is returned as given)."""
    if isinstance(ref, str):
        return ref
    if not isinstance(ref, type):
        raise TypeError(f"expected a class or a 'module:Class' string, not {ref!r}")
    qualname = ref.__qualname__
    if "<locals>" in qualname:
        raise ValueError(
            f"class {qualname} is defined inside a function; workers cannot import it. "
            "Define it at module level."
        )
    if ref.__module__ == "__main__":
        raise ValueError(
            f"class {qualname} is defined in __main__; workers cannot import it. Move it into a "
            "module, or give the class as a 'module:Class' string."
        )
    return f"{ref.__module__}:{qualname}"


def _is_stateful(ref: type | str) -> bool:
    from squall.components import StatefulBolt, StatefulSpout, StatefulWindowedBolt

    return isinstance(ref, type) and issubclass(ref, (StatefulBolt, StatefulSpout, StatefulWindowedBolt))


class ComponentDeclarer:
    """What `set_spout` / `set_bolt` return: tune the component after declaring it."""

    def __init__(
        self,
        name: str,
        component: ClassRef,
        parallelism: int,
        num_tasks: int | None,
        config: Mapping[str, Any] | None,
        outputs: OutputsDecl,
        stateful: bool | None = None,
    ) -> None:
        self.name = name
        self._class = class_path(component)
        self._parallelism = parallelism
        self._num_tasks = num_tasks
        self._config: dict[str, Any] = dict(config or {})
        self._outputs: list[StreamSpec] | None = (
            None if outputs is None else normalize_outputs(outputs)
        )
        # a StatefulBolt / StatefulSpout class given as a class is stateful without saying so
        self._stateful = stateful if stateful is not None else _is_stateful(component)

    def set_num_tasks(self, num_tasks: int) -> ComponentDeclarer:
        self._num_tasks = num_tasks
        return self

    def add_configuration(self, key: str, value: Any) -> ComponentDeclarer:
        self._config[key] = value
        return self

    def add_configurations(self, config: Mapping[str, Any]) -> ComponentDeclarer:
        self._config.update(config)
        return self

    def declare_stream(
        self, stream: str, fields: Sequence[str], *, direct: bool = False
    ) -> ComponentDeclarer:
        """Declare (or replace) one output stream in the spec."""
        spec = StreamSpec(stream=stream, fields=list(fields), direct=direct)
        kept = [s for s in self._outputs or () if s.stream != stream]
        self._outputs = [*kept, spec]
        return self

    def _to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "class": self._class,
            "parallelism": self._parallelism,
        }
        if self._num_tasks is not None:
            out["numTasks"] = self._num_tasks
        if self._config:
            out["config"] = dict(self._config)
        if self._outputs is not None:
            out["outputs"] = [s.model_dump(by_alias=True) for s in self._outputs]
        if self._stateful:
            out["stateful"] = True
        return out


class SpoutDeclarer(ComponentDeclarer):
    pass


class BoltDeclarer(ComponentDeclarer):
    """A bolt: subscribe it to streams with the grouping methods (each returns the declarer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inputs: list[dict[str, Any]] = []
        self._window: dict[str, Any] = {}

    # -- windows (a WindowedBolt's; Storm's BaseWindowedBolt.withWindow and friends) ----------
    def with_window(self, length: WindowSizeArg, sliding: WindowSizeArg | None = None) -> BoltDeclarer:
        """A sliding window (tumbling without `sliding`). An int counts tuples; a duration is a
        string ("30s", "500ms") or a `timedelta`."""
        self._window["windowLength"] = _window_size(length)
        if sliding is None:
            self._window.pop("slidingInterval", None)
        else:
            self._window["slidingInterval"] = _window_size(sliding)
        return self

    def with_tumbling_window(self, length: WindowSizeArg) -> BoltDeclarer:
        return self.with_window(length)

    def with_timestamp_field(self, field: str) -> BoltDeclarer:
        """Event time: each tuple's timestamp (seconds, a number) is this field."""
        self._window["timestampField"] = field
        return self

    def with_lag(self, lag: str | timedelta) -> BoltDeclarer:
        """How far out of order event-time tuples may arrive before they are late."""
        self._window["lag"] = _duration(lag)
        return self

    def with_watermark_interval(self, interval: str | timedelta) -> BoltDeclarer:
        self._window["watermarkInterval"] = _duration(interval)
        return self

    def with_late_tuple_stream(self, stream: str) -> BoltDeclarer:
        """Late tuples (and tuples without a usable timestamp) go out on this stream."""
        self._window["lateStream"] = stream
        return self

    def grouping(
        self,
        component: str,
        grouping: Grouping | str,
        *,
        stream: str = DEFAULT_STREAM,
        fields: Sequence[str] | str | None = None,
        custom_class: ClassRef | None = None,
    ) -> BoltDeclarer:
        """Subscribe to `component`'s `stream` with any grouping."""
        entry: dict[str, Any] = {
            "component": component,
            "stream": stream,
            "grouping": Grouping(grouping).value,
        }
        if fields is not None:
            entry["fields"] = [fields] if isinstance(fields, str) else list(fields)
        if custom_class is not None:
            entry["customClass"] = class_path(custom_class)
        self._inputs.append(entry)
        return self

    def shuffle_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, Grouping.SHUFFLE, stream=stream)

    def local_or_shuffle_grouping(
        self, component: str, stream: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        return self.grouping(component, Grouping.LOCAL_OR_SHUFFLE, stream=stream)

    def fields_grouping(
        self, component: str, fields: Sequence[str] | str, stream: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        return self.grouping(component, Grouping.FIELDS, stream=stream, fields=fields)

    def partial_key_grouping(
        self, component: str, fields: Sequence[str] | str, stream: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        return self.grouping(component, Grouping.PARTIAL_KEY, stream=stream, fields=fields)

    def all_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, Grouping.ALL, stream=stream)

    def global_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, Grouping.GLOBAL, stream=stream)

    def none_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, Grouping.NONE, stream=stream)

    def direct_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        return self.grouping(component, Grouping.DIRECT, stream=stream)

    def custom_grouping(
        self, component: str, custom_class: ClassRef, stream: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        return self.grouping(component, Grouping.CUSTOM, stream=stream, custom_class=custom_class)

    def _to_dict(self) -> dict[str, Any]:
        out = super()._to_dict()
        if self._inputs:
            out["inputs"] = [dict(i) for i in self._inputs]
        if self._window:
            out["window"] = dict(self._window)
        return out


class TopologyBuilder:
    """Declare spouts and bolts, then `build()` a `Topology`."""

    def __init__(
        self,
        name: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.labels = dict(labels or {})
        self.annotations = dict(annotations or {})
        self._spouts: dict[str, SpoutDeclarer] = {}
        self._bolts: dict[str, BoltDeclarer] = {}

    def _check_new(self, name: str) -> None:
        if name in self._spouts or name in self._bolts:
            raise ValueError(f"topology {self.name!r} already has a component named {name!r}")

    def set_spout(
        self,
        name: str,
        spout: ClassRef,
        parallelism: int = 1,
        *,
        num_tasks: int | None = None,
        config: Mapping[str, Any] | None = None,
        outputs: OutputsDecl = None,
        stateful: bool | None = None,
    ) -> SpoutDeclarer:
        self._check_new(name)
        declarer = SpoutDeclarer(name, spout, parallelism, num_tasks, config, outputs, stateful)
        self._spouts[name] = declarer
        return declarer

    def set_bolt(
        self,
        name: str,
        bolt: ClassRef,
        parallelism: int = 1,
        *,
        num_tasks: int | None = None,
        config: Mapping[str, Any] | None = None,
        outputs: OutputsDecl = None,
        stateful: bool | None = None,
    ) -> BoltDeclarer:
        self._check_new(name)
        declarer = BoltDeclarer(name, bolt, parallelism, num_tasks, config, outputs, stateful)
        self._bolts[name] = declarer
        return declarer

    def to_dict(
        self,
        num_workers: int | None = None,
        *,
        num_ackers: int | None = None,
        message_timeout_secs: float | None = None,
        max_spout_pending: int | None = None,
        tick_tuple_freq_secs: float | None = None,
        kill_wait_secs: float | None = None,
        rebalance_wait_secs: float | None = None,
        active: bool | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The resource as a plain mapping (camelCase keys), before validation."""
        metadata: dict[str, Any] = {"name": self.name}
        if self.namespace is not None:
            metadata["namespace"] = self.namespace
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        spec: dict[str, Any] = {}
        for key, value in (
            ("numWorkers", num_workers),
            ("numAckers", num_ackers),
            ("messageTimeoutSecs", message_timeout_secs),
            ("maxSpoutPending", max_spout_pending),
            ("tickTupleFreqSecs", tick_tuple_freq_secs),
            ("killWaitSecs", kill_wait_secs),
            ("rebalanceWaitSecs", rebalance_wait_secs),
            ("active", active),
        ):
            if value is not None:
                spec[key] = value
        if config:
            spec["config"] = dict(config)
        spec["spouts"] = [s._to_dict() for s in self._spouts.values()]
        if self._bolts:
            spec["bolts"] = [b._to_dict() for b in self._bolts.values()]
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}

    def build(
        self,
        num_workers: int | None = None,
        *,
        num_ackers: int | None = None,
        message_timeout_secs: float | None = None,
        max_spout_pending: int | None = None,
        tick_tuple_freq_secs: float | None = None,
        kill_wait_secs: float | None = None,
        rebalance_wait_secs: float | None = None,
        active: bool | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> Topology:
        """The `Topology`. Arguments left as None take the resource's defaults.

        Raises `TopologyError` for what the schema rejects (a bad name, parallelism 0, ...).
        """
        data = self.to_dict(
            num_workers,
            num_ackers=num_ackers,
            message_timeout_secs=message_timeout_secs,
            max_spout_pending=max_spout_pending,
            tick_tuple_freq_secs=tick_tuple_freq_secs,
            kill_wait_secs=kill_wait_secs,
            rebalance_wait_secs=rebalance_wait_secs,
            active=active,
            config=config,
        )
        return parse_topology(data, source=f"TopologyBuilder({self.name!r})")


# --------------------------------------------------------------------------------------------
# YAML output
# --------------------------------------------------------------------------------------------

_TOP_ORDER = ("apiVersion", "kind", "metadata", "spec", "status")
_SPEC_ORDER = (
    "numWorkers",
    "numAckers",
    "messageTimeoutSecs",
    "maxSpoutPending",
    "tickTupleFreqSecs",
    "killWaitSecs",
    "rebalanceWaitSecs",
    "active",
    "config",
    "spouts",
    "bolts",
)


def _ordered(data: dict[str, Any], order: Sequence[str]) -> dict[str, Any]:
    out = {k: data[k] for k in order if k in data}
    out.update((k, v) for k, v in data.items() if k not in out)
    return out


def _drop_empty(data: dict[str, Any], *keys: str) -> None:
    for key in keys:
        if data.get(key) == {}:
            del data[key]


def _prune_defaults(data: dict[str, Any]) -> None:
    """Drop `config: {}`, `labels: {}` and the like: they are the defaults and only noise."""
    if isinstance(data.get("metadata"), dict):
        _drop_empty(data["metadata"], "labels", "annotations")
    spec = data.get("spec")
    if isinstance(spec, dict):
        _drop_empty(spec, "config")
        for key in ("spouts", "bolts"):
            for component in spec.get(key) or ():
                _drop_empty(component, "config")
                if component.get("stateful") is False:
                    del component["stateful"]


class _Dumper(yaml.SafeDumper):
    pass


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    # Short lists of scalars (field names) read best inline: `fields: [word, count]`.
    flow = bool(data) and all(isinstance(v, (str, int, float, bool)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _represent_float(dumper: yaml.SafeDumper, data: float) -> yaml.Node:
    # `messageTimeoutSecs: 30`, not `30.0` (the model reads either as the same float).
    if data.is_integer() and abs(data) < 2**53:
        return dumper.represent_int(int(data))
    return dumper.represent_float(data)


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(float, _represent_float)


def topology_to_yaml(topo: Topology) -> str:
    """The resource as YAML: camelCase keys, no nulls, `apiVersion, kind, metadata, spec` first.

    `parse_topology(topology_to_yaml(t)) == t`.
    """
    data = topo.model_dump(mode="json", by_alias=True, exclude_none=True)
    _prune_defaults(data)
    data = _ordered(data, _TOP_ORDER)
    if isinstance(data.get("spec"), dict):
        data["spec"] = _ordered(data["spec"], _SPEC_ORDER)
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )
