"""Squall: Apache Storm's model in Python. The SDK users write spouts and bolts with."""

from squall import _native

_native.install()  # the compiled hot path, or the .py modules if it is absent or stale

from squall.components import (
    DEFAULT_STREAM,
    TICK_STREAM,
    BasicBolt,
    Bolt,
    FailedException,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    StatefulSpout,
    StatefulWindowedBolt,
    TopologyContext,
    Tuple,
    WindowedBolt,
)
from squall.serialization import register_serializer

__all__ = [
    "DEFAULT_STREAM",
    "TICK_STREAM",
    "BasicBolt",
    "Bolt",
    "FailedException",
    "OutputCollector",
    "Spout",
    "SpoutOutputCollector",
    "StatefulBolt",
    "StatefulSpout",
    "StatefulWindowedBolt",
    "TopologyContext",
    "Tuple",
    "WindowedBolt",
    "register_serializer",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # `from squall import TopologyBuilder` without importing the builder (and pydantic's
    # model machinery) into every worker at start-up
    if name == "Window":
        from squall.windowing import Window

        return Window
    if name == "TopologyBuilder":
        from squall.builder import TopologyBuilder

        return TopologyBuilder
    raise AttributeError(f"module 'squall' has no attribute {name!r}")
