"""CURVE key handling and the sealed sockets (squall.worker.security), with real zmq sockets on
loopback in this process. The worker processes are in tests/integration/test_sealed_transport.py."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest
import zmq

from squall.worker.security import (
    ENV_PUBLIC,
    ENV_SECRET,
    PUBLIC_FILE,
    SECRET_FILE,
    CurveKeyError,
    CurveKeys,
    Sealer,
    keys_from_env,
    read_keys,
    write_keys,
)


def test_keys_are_written_private_and_replaced_on_rotation(tmp_path: Path) -> None:
    d = tmp_path / "keys" / "wordcount"
    first = CurveKeys.generate()
    write_keys(d, first)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for name in (PUBLIC_FILE, SECRET_FILE):
        assert stat.S_IMODE((d / name).stat().st_mode) == 0o600
    assert read_keys(d) == first
    second = CurveKeys.generate()
    assert second != first
    write_keys(d, second)
    assert read_keys(d) == second
    assert sorted(p.name for p in d.iterdir()) == [PUBLIC_FILE, SECRET_FILE]  # no temporary left


def test_unusable_keys_are_refused_naming_the_place(tmp_path: Path) -> None:
    with pytest.raises(CurveKeyError, match=r"curve.public: cannot read"):
        read_keys(tmp_path)
    k, other = CurveKeys.generate(), CurveKeys.generate()
    with pytest.raises(CurveKeyError, match="here: the CURVE public key must be 40 Z85 characters, not 3"):
        CurveKeys.parse(b"abc", k.secret, "here")
    with pytest.raises(CurveKeyError, match="here: the CURVE secret key is not Z85 text"):
        CurveKeys.parse(k.public, "~" * 40, "here")
    with pytest.raises(CurveKeyError, match="is not the secret key's"):
        CurveKeys.parse(other.public, k.secret, "here")
    assert CurveKeys.parse(k.public.decode() + "\n", k.secret.decode() + "\n", "here") == k


def test_keys_from_the_environment() -> None:
    k = CurveKeys.generate()
    assert keys_from_env({}) is None
    assert keys_from_env({ENV_PUBLIC: k.public.decode(), ENV_SECRET: k.secret.decode()}) == k
    with pytest.raises(CurveKeyError, match=f"{ENV_SECRET} is empty or missing"):
        keys_from_env({ENV_PUBLIC: k.public.decode()})


def _recv_all(sock: zmq.Socket[bytes], timeout: float) -> list[bytes]:
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(50):
            got.append(sock.recv())
    return got


def test_only_holders_of_the_topology_key_get_through() -> None:
    keys = CurveKeys.generate()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sealer = Sealer(ctx, keys)
    sealer.start()
    server = ctx.socket(zmq.PULL)
    server.setsockopt(zmq.LINGER, 0)
    sealer.server(server, "data port")
    port = server.bind_to_random_port("tcp://127.0.0.1")
    sealer.watch()
    clients: list[zmq.Socket[bytes]] = []
    try:
        stranger = CurveKeys.generate()
        for who in ("plain", "stranger", "holder"):
            c = ctx.socket(zmq.PUSH)
            c.setsockopt(zmq.LINGER, 0)
            if who == "stranger":  # its own key, and the topology's public key as the server's
                c.curve_secretkey, c.curve_publickey, c.curve_serverkey = stranger.secret, stranger.public, keys.public
            elif who == "holder":
                sealer.client(c)
            c.connect(f"tcp://127.0.0.1:{port}")
            clients.append(c)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for c, who in zip(clients, ("plain", "stranger", "holder"), strict=True):
                try:
                    c.send(who.encode(), zmq.NOBLOCK)
                except zmq.Again:
                    pass
            time.sleep(0.05)
        got = set(_recv_all(server, 1.0))
        assert got == {b"holder"}
        deadline = time.monotonic() + 10
        while sealer.refused < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sealer.refused >= 2  # one at least for each of the two strangers
    finally:
        for c in clients:
            c.close(0)
        sealer.stop()
        server.close(0)
        ctx.term()
