"""Tiny duck-typed components for the validation, builder and CLI tests.

No `squall.components` import on purpose: validation recognises a spout by `next_tuple` and a
bolt by `execute`, and reads output streams from the `outputs` class attribute.
"""

from __future__ import annotations

from typing import Any


class SentenceSpout:
    outputs = ["sentence"]

    def next_tuple(self) -> None:
        pass


class SplitBolt:
    outputs = ["word"]

    def execute(self, tup: Any) -> None:
        pass


class CountBolt:
    outputs = ["word", "count"]

    def execute(self, tup: Any) -> None:
        pass


class MultiStreamBolt:
    """Declares several streams, one of them direct."""

    outputs = {
        "default": ["word"],
        "lengths": ["word", "length"],
        "targeted": {"fields": ["word"], "direct": True},
    }

    def execute(self, tup: Any) -> None:
        pass


class SinkBolt:
    """Declares no output streams."""

    def execute(self, tup: Any) -> None:
        pass


class NotAComponent:
    pass


class BadOutputsBolt:
    outputs = "word"  # a string, not a list

    def execute(self, tup: Any) -> None:
        pass


class FirstLetterGrouping:
    def prepare(self, context: Any, stream: Any, target_tasks: list[int]) -> None:
        self.tasks = target_tasks

    def choose_tasks(self, task_id: int, values: Any) -> list[int]:
        return [self.tasks[ord(str(values[0])[:1] or "a") % len(self.tasks)]]


not_a_class = 42
