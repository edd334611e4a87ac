"""The input tuple a bolt receives: `squall.Tuple` (re-exported by `squall.components`).

It has a module of its own because it is built once per input tuple of every bolt: setup.py
compiles this module with mypyc together with the executors (`squall._native`), so the
executor builds it and the collectors read and write its anchors as a C struct instead of
through an interpreted `__init__` and slot descriptors. Users only read it (`values`, `get`,
`source_component`, ...), which works the same either way; it is not meant to be subclassed.
Plain Python when the hot path is not compiled (`SQUALL_PURE=1`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TICK_STREAM = "__tick"


class Tuple:
    """An input tuple: values plus where it came from. `values` is a list; fields by name too."""

    __slots__ = ("values", "source_task", "source_component", "stream", "_fields", "anchors", "ack_val")

    def __init__(
        self,
        values: list[Any],
        source_task: int,
        source_component: str,
        stream: str,
        fields: Mapping[str, int],
        anchors: dict[int, int] | None,
    ) -> None:
        self.values = values
        self.source_task = source_task
        self.source_component = source_component
        self.stream = stream
        self._fields = fields
        # root id -> edge id of this tuple in that root's tree (None when not tracked)
        self.anchors = anchors
        # XOR of the edge ids of tuples emitted anchored to this one
        self.ack_val = 0

    def __getitem__(self, index: Any) -> Any:
        return self.values[index]

    def __len__(self) -> int:
        return len(self.values)

    def get(self, field: str) -> Any:
        """The value of a declared field: `tup.get("word")`."""
        try:
            return self.values[self._fields[field]]
        except KeyError:
            raise KeyError(
                f"stream {self.source_component}:{self.stream} has no field {field!r}"
                f" (fields: {', '.join(self._fields) or 'none'})"
            ) from None

    @property
    def fields(self) -> list[str]:
        return list(self._fields)

    def is_tick(self) -> bool:
        return self.stream == TICK_STREAM

    def __repr__(self) -> str:
        return f"Tuple({self.source_component}:{self.stream} from task {self.source_task}: {self.values!r})"


__all__ = ["TICK_STREAM", "Tuple"]
