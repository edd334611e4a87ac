"""PySpark is Squall's optional `spark` extra: without it, `squall.spark` says how to get it."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.unit


def test_squall_spark_without_pyspark_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pyspark" or name.startswith("pyspark."):
            return None  # as on an image installed without the extra
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.delitem(sys.modules, "squall.spark", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'squall\[spark\]'") as e:
        importlib.import_module("squall.spark")
    assert e.value.name == "pyspark"
    assert "squall.spark" not in sys.modules


def test_embedded_zookeeper_without_pyspark_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from squall import zkserver

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "pyspark" else real_find_spec(name, *a, **k))
    with pytest.raises(zkserver.ZooKeeperError, match=r"squall\[spark\]"):
        zkserver.zookeeper_jars()
