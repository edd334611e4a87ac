"""Squall: Apache Storm's model in Python. The SDK users write spouts and bolts with."""

from squall.components import (
    DEFAULT_STREAM,
    TICK_STREAM,
    BasicBolt,
    Bolt,
    FailedException,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    TopologyContext,
    Tuple,
)

__all__ = [
    "DEFAULT_STREAM",
    "TICK_STREAM",
    "BasicBolt",
    "Bolt",
    "FailedException",
    "OutputCollector",
    "Spout",
    "SpoutOutputCollector",
    "TopologyContext",
    "Tuple",
]
__version__ = "0.1.0"
