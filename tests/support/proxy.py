"""A TCP forwarder that plays a broker being restarted: it refuses connections, then forwards them."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from devstack.broker import free_port


class LateProxy:
    """A TCP forwarder to the broker that starts listening only after ``delay_s``: until then the
    bootstrap address refuses connections, as a broker being restarted does."""

    def __init__(self, target: str, delay_s: float) -> None:
        self.host, port = target.rsplit(":", 1)
        self.target_port = int(port)
        self.port = free_port()   # listened on only after delay_s: below the ephemeral range, see free_port
        self.delay_s, self._stop = delay_s, threading.Event()
        self.listening_at: float | None = None   # time.monotonic() when connections were first accepted
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> LateProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _serve(self) -> None:
        if self._stop.wait(self.delay_s):
            return
        with socket.create_server(("127.0.0.1", self.port)) as server:
            server.settimeout(0.2)
            self.listening_at = time.monotonic()
            while not self._stop.is_set():
                try:
                    client, _ = server.accept()
                except TimeoutError:
                    continue
                upstream = socket.create_connection((self.host, self.target_port))
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
