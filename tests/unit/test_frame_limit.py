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


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "curve"])
def test_zmq_refuses_a_frame_over_the_maximum_and_takes_one_under_it(sealed: bool) -> None:
    """What the worker's receiving sockets do with MAXMSGSIZE (real zmq on loopback): a frame a
    sender keeps under the maximum (less FRAME_OVERHEAD) arrives, plain or sealed with CURVE; a
    larger one is refused (its connection dropped: nothing of it is buffered), and the sender's
    connection comes back by itself."""
    import zmq

    from squall.worker.transport import FRAME_OVERHEAD

    limit = MIN_FRAME_BYTES
    ctx = zmq.Context()
    try:
        pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
        pull.setsockopt(zmq.MAXMSGSIZE, limit)
        pull.setsockopt(zmq.LINGER, 0)
        push.setsockopt(zmq.LINGER, 0)
        if sealed:
            server_public, server_secret = zmq.curve_keypair()
            client_public, client_secret = zmq.curve_keypair()
            pull.curve_server = True
            pull.curve_secretkey = server_secret
            push.curve_serverkey = server_public
            push.curve_publickey = client_public
            push.curve_secretkey = client_secret
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        push.connect(f"tcp://127.0.0.1:{port}")
        fits = b"a" * (limit - FRAME_OVERHEAD)
        push.send(fits)
        assert pull.poll(5000) and pull.recv() == fits
        push.send(b"b" * (limit + 1))
        assert not pull.poll(500)  # refused
        for _ in range(50):  # reconnected: the next frame arrives
            if push.poll(0, zmq.POLLOUT):
                push.send(b"c", zmq.NOBLOCK)
            if pull.poll(200):
                break
        assert pull.recv() == b"c"
        pull.close()
        push.close()
    finally:
        ctx.term()
