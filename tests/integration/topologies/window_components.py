"""A windowed bolt that records every window it sees (tests/integration/test_windowed_bolts.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from squall import WindowedBolt


class RecordWindows(WindowedBolt):
    """Emits (end, size) per window, anchored to the window's tuples (the default); writes every
    window's ids, new ids and expired ids to `windows-<task>.json` in `test.out` at cleanup."""

    outputs = ["id", "size"]

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.out = Path(conf["test.out"])
        self.task = context.task_id
        self.windows: list[dict[str, Any]] = []

    def execute(self, window: Any) -> None:
        self.windows.append({
            "start": window.get_start_timestamp(), "end": window.get_end_timestamp(),
            "ids": [t.values[0] for t in window.get()],
            "new": [t.values[0] for t in window.get_new()],
            "expired": [t.values[0] for t in window.get_expired()],
        })
        # the sink groups by "id": give each window's output one
        self.collector.emit([len(self.windows), len(window.get())])

    def cleanup(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"windows-{self.task}.json"
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.windows))
        os.replace(tmp, path)
