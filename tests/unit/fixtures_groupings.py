"""Custom stream groupings for test_groupings (loaded by "module:Class", as workers do)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# every prepare call, in order: (grouping instance, context, stream, target tasks)
PREPARED: list[tuple[Any, Any, tuple[str, str], list[int]]] = []


class FirstFieldModulo:
    """Sends a tuple to targets[values[0] % len(targets)]."""

    def __init__(self) -> None:
        self.targets: list[int] = []
        self.calls: list[tuple[int, list[Any]]] = []

    def prepare(self, context: Any, stream: tuple[str, str], target_tasks: list[int]) -> None:
        self.targets = list(target_tasks)
        PREPARED.append((self, context, stream, list(target_tasks)))

    def choose_tasks(self, task_id: int, values: Sequence[Any]) -> list[int]:
        self.calls.append((task_id, list(values)))
        return [self.targets[values[0] % len(self.targets)]]


class OutOfRange:
    """Chooses a task that is never a target."""

    def prepare(self, context: Any, stream: tuple[str, str], target_tasks: list[int]) -> None:
        self.targets = list(target_tasks)

    def choose_tasks(self, task_id: int, values: Sequence[Any]) -> list[int]:
        return [self.targets[0], 999]


class Nested:
    class Inner(FirstFieldModulo):
        """Reached through "module:Outer.Inner"."""
