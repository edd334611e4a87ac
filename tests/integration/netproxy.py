"""A TCP proxy on loopback that a test can cut and heal: a network partition between one set of
clients (the ones given `proxy.address`) and a real server, without pausing either process.

While cut, the proxy closes every connection it carries and closes each new one as soon as it
is accepted, so clients see their server go away and fail to reconnect (the server sees its
clients go silent: their sessions expire). `heal()` forwards again. Threads: one accept loop,
two pumps per carried connection; `close()` stops them all.
"""

from __future__ import annotations

import socket
import threading


class PartitionProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)
        self._accept.start()

    @classmethod
    def to(cls, connect_string: str) -> PartitionProxy:
        host, _, port = connect_string.split(",")[0].rpartition(":")
        return cls(host, int(port))

    def cut(self) -> None:
        self._cut.set()
        self._close_all()

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._stop.set()
        self._close_all()
        self._accept.join(5)
        self.listener.close()
        for t in list(self._threads):
            t.join(5)

    def _close_all(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, set()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._socks.update((client, upstream))
            self._threads = [t for t in self._threads if t.is_alive()]
            for src, dst in ((client, upstream), (upstream, client)):
                t = threading.Thread(target=self._pump, args=(src, dst), name="proxy-pump", daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                data = src.recv(65536)
                if not data or self._cut.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._socks.difference_update((src, dst))
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
