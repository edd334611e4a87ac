"""The sealed transport: ZeroMQ CURVE between the workers of one topology.

Each topology has one CURVE key pair, made when it is submitted (`CurveKeys.generate`) and kept
where only its workers read it: a Kubernetes Secret owned by the Topology (the operator passes it
to the worker pods), or locally two files with mode 0600 in the local cluster's directory
(`write_keys` / `read_keys`). Every worker of the topology holds the pair and uses it both ways:

- its data and control sockets (the PULL sockets it binds) are CURVE servers with the pair;
- its sockets to peers (PUSH) are CURVE clients with the same pair, and the topology's public key
  as the server key;
- a ZAP handler (pyzmq's `ThreadAuthenticator`) admits a client only if its public key is the
  topology's. A CURVE client proves that it holds the secret key of the public key it presents,
  so only holders of the topology's secret key get in: the public key alone is not enough.

A peer without the key never gets a frame through: its handshake fails (a plain-TCP or NULL
peer fails the mechanism, a CURVE peer with another key is refused by ZAP), nothing reaches the
receive loops, and a socket monitor counts each refused handshake (`Sealer.refused`, in the
worker's heartbeat as `refused`). Traffic is encrypted and authenticated per frame.

Resubmitting a topology makes a new pair (the old files are replaced, the old Secret goes with
the old Topology): a worker of the previous submission cannot talk to the new ones.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.auth.thread
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from squall.worker.threads import NamedThread

log = logging.getLogger("squall.security")

PUBLIC_FILE = "curve.public"
SECRET_FILE = "curve.secret"
# on Kubernetes the worker reads the pair from these (secretKeyRef from the topology's Secret)
ENV_PUBLIC = "SQUALL_CURVE_PUBLIC_KEY"
ENV_SECRET = "SQUALL_CURVE_SECRET_KEY"

# every way a handshake on a server socket can fail (a refused or malformed peer)
_FAILED_HANDSHAKE = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


class CurveKeyError(ValueError):
    """A key pair that cannot be used; the message names where it came from and why."""


@dataclass(frozen=True)
class CurveKeys:
    """A topology's CURVE key pair, Z85-encoded (40 characters each)."""

    public: bytes
    secret: bytes

    @classmethod
    def generate(cls) -> CurveKeys:
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    @classmethod
    def parse(cls, public: bytes | str, secret: bytes | str, where: str) -> CurveKeys:
        """Check a pair read from somewhere (`where` names it in the error): both Z85 keys of
        32 bytes, and the public key is the secret key's."""
        pub = (public.encode() if isinstance(public, str) else public).strip()
        sec = (secret.encode() if isinstance(secret, str) else secret).strip()
        for name, key in (("public", pub), ("secret", sec)):
            if len(key) != 40:
                raise CurveKeyError(f"{where}: the CURVE {name} key must be 40 Z85 characters, not {len(key)}")
            try:
                z85.decode(key)
            except Exception as exc:
                raise CurveKeyError(f"{where}: the CURVE {name} key is not Z85 text ({exc})") from None
        if zmq.curve_public(sec) != pub:
            raise CurveKeyError(f"{where}: the CURVE public key is not the secret key's")
        return cls(pub, sec)


def write_keys(directory: Path, keys: CurveKeys) -> None:
    """Write a pair into `directory` (made 0700), each file 0600 and replaced atomically, so a
    worker starting meanwhile reads either the old pair or the new one, never half of one."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    for name, value in ((PUBLIC_FILE, keys.public), (SECRET_FILE, keys.secret)):
        tmp = directory / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, value)
        finally:
            os.close(fd)
        os.replace(tmp, directory / name)


def read_keys(directory: Path) -> CurveKeys:
    """The pair `write_keys` wrote; a missing or unusable file is an error naming it."""
    values: list[bytes] = []
    for name in (PUBLIC_FILE, SECRET_FILE):
        path = directory / name
        try:
            values.append(path.read_bytes())
        except OSError as exc:
            raise CurveKeyError(f"{path}: cannot read the topology's CURVE key: {exc.strerror}") from None
    return CurveKeys.parse(values[0], values[1], str(directory))


def keys_from_env(env: Mapping[str, str]) -> CurveKeys | None:
    """The pair from the environment (Kubernetes), or None when neither variable is set."""
    pub, sec = env.get(ENV_PUBLIC), env.get(ENV_SECRET)
    if pub is None and sec is None:
        return None
    if not pub or not sec:
        missing = ENV_PUBLIC if not pub else ENV_SECRET
        raise CurveKeyError(f"environment: {missing} is empty or missing while the other CURVE key is set")
    return CurveKeys.parse(pub, sec, f"environment ({ENV_PUBLIC}, {ENV_SECRET})")


class _TopologyKey:
    """ZAP credentials provider: a client is admitted only with the topology's public key."""

    def __init__(self, public: bytes) -> None:
        self.public = public

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.public


class Sealer:
    """CURVE for one worker's sockets: `server` for the sockets it binds, `client` for those it
    connects. `start` runs the ZAP handler and the monitor of refused handshakes; `stop` ends
    both (before the context is terminated)."""

    def __init__(self, ctx: zmq.Context[Any], keys: CurveKeys, on_refused: Callable[[str], None] | None = None) -> None:
        self.ctx = ctx
        self.keys = keys
        self.on_refused = on_refused
        self.refused = 0
        self._auth: zmq.auth.thread.ThreadAuthenticator | None = None
        self._monitors: list[tuple[zmq.Socket[Any], zmq.Socket[bytes], str]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        auth = zmq.auth.thread.ThreadAuthenticator(self.ctx, log=logging.getLogger("squall.security.zap"))
        auth.start()
        auth.configure_curve_callback("*", _TopologyKey(self.keys.public))
        self._auth = auth

    def server(self, sock: zmq.Socket[Any], name: str) -> None:
        """Make a socket that binds a CURVE server of the topology (call before bind); its
        refused handshakes are counted once `watch` runs."""
        sock.curve_secretkey = self.keys.secret
        sock.curve_publickey = self.keys.public
        sock.curve_server = True
        mon = sock.get_monitor_socket(_FAILED_HANDSHAKE)
        mon.setsockopt(zmq.LINGER, 0)
        self._monitors.append((mon, sock, name))

    def client(self, sock: zmq.Socket[Any]) -> None:
        """Make a socket that connects to peers a CURVE client of the topology (before connect)."""
        sock.curve_secretkey = self.keys.secret
        sock.curve_publickey = self.keys.public
        sock.curve_serverkey = self.keys.public

    def watch(self) -> None:
        """Start counting refused handshakes (a thread polling the server sockets' monitors)."""
        self._thread = NamedThread(target=self._watch, name="curve-monitor", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        poller = zmq.Poller()
        names = {}
        for mon, _sock, name in self._monitors:
            poller.register(mon, zmq.POLLIN)
            names[mon] = name
        try:
            while not self._stop.is_set():
                for mon, _flags in poller.poll(100):
                    try:
                        event = parse_monitor_message(mon.recv_multipart(zmq.NOBLOCK))
                    except zmq.Again:
                        continue
                    if event["event"] & _FAILED_HANDSHAKE:
                        self.refused += 1
                        text = f"{names[mon]}: refused a peer's handshake (not the topology's key; code {event['value']})"
                        if self.refused <= 10 or self.refused % 1000 == 0:
                            log.warning("%s; %d refused so far", text, self.refused)
                        if self.on_refused is not None:
                            self.on_refused(text)
        finally:
            for mon, _sock, _name in self._monitors:
                mon.close(0)

    def stop(self) -> None:
        """End the monitor and the ZAP handler; the sockets themselves are the caller's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        else:
            for mon, _sock, _name in self._monitors:
                mon.close(0)
        for _mon, sock, _name in self._monitors:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
        self._monitors.clear()
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
