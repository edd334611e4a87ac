"""The maximum frame size a worker's ports take (squall.worker.transport.max_frame_bytes):
default, topology config, environment override, and one line naming the setting when wrong."""

from __future__ import annotations

from typing import Any

import pytest

from squall import wire
from squall.worker.transport import (
    LARGEST_FRAME_BYTES,
    MAX_FRAME_CONFIG,
    MAX_FRAME_ENV,
    MIN_FRAME_BYTES,
    max_frame_bytes,
)


def test_the_default() -> None:
    assert max_frame_bytes({}, {}) == (wire.MAX_FRAME_BYTES, "default")
    assert max_frame_bytes({}, {MAX_FRAME_ENV: ""}) == (wire.MAX_FRAME_BYTES, "default")


def test_the_topology_config_then_the_environment() -> None:
    assert max_frame_bytes({MAX_FRAME_CONFIG: 1 << 20}, {}) == (1 << 20, f"spec.config.{MAX_FRAME_CONFIG}")
    assert max_frame_bytes({MAX_FRAME_CONFIG: "2097152"}, {}) == (2 << 20, f"spec.config.{MAX_FRAME_CONFIG}")
    assert max_frame_bytes({MAX_FRAME_CONFIG: 1 << 20}, {MAX_FRAME_ENV: "8388608"}) == (8 << 20, MAX_FRAME_ENV)


@pytest.mark.parametrize("value", [0, -1, MIN_FRAME_BYTES - 1, LARGEST_FRAME_BYTES + 1, "64MB", 1.5e6, True, [1], "", " "])
def test_a_wrong_config_value_is_one_line_naming_it(value: Any) -> None:
    with pytest.raises(ValueError) as err:
        max_frame_bytes({MAX_FRAME_CONFIG: value}, {})
    text = str(err.value)
    assert text.startswith(f"spec.config.{MAX_FRAME_CONFIG}={value!r}: expected a whole number of bytes")
    assert "\n" not in text


def test_a_wrong_environment_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match=f"^{MAX_FRAME_ENV}='lots': expected a whole number of bytes"):
        max_frame_bytes({MAX_FRAME_CONFIG: 1 << 20}, {MAX_FRAME_ENV: "lots"})
