"""A TLS front for a loopback server that speaks plain TCP: mutual TLS, a client certificate required.

The local schema registry (Apicurio 2.4.2 on Quarkus 2.16) serves HTTPS but cannot require client
certificates: Quarkus fixes ``quarkus.http.ssl.client-auth`` when the app is built. This front does
what a registry behind a TLS-terminating load balancer sees: the handshake (Python's OpenSSL, TLS
1.3) requires a client certificate the given CA signed and refuses any other with its alert; the
bytes of an accepted connection go to and from the upstream port unchanged.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

#: Seconds a connection may stay idle before the front closes it.
IDLE = 30.0


@dataclass
class TlsProxy:
    """Listens on a free port of 127.0.0.1 (:attr:`port`) with ``certificate``/``key``, and trusts
    client certificates ``ca`` signed; forwards to ``127.0.0.1:upstream_port``."""

    certificate: Path
    key: Path
    ca: Path
    upstream_port: int
    port: int = 0
    _listener: socket.socket | None = field(default=None, repr=False)

    def start(self) -> TlsProxy:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certificate, self.key)
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(self.ca)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(self._listener, context), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _accept(self, listener: socket.socket, context: ssl.SSLContext) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            threading.Thread(target=self._serve, args=(client, context), daemon=True).start()

    def _serve(self, client: socket.socket, context: ssl.SSLContext) -> None:
        client.settimeout(IDLE)
        try:
            tls = context.wrap_socket(client, server_side=True)
        except (ssl.SSLError, OSError):
            client.close()  # the handshake failed: the client got the alert
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=IDLE)
        except OSError:
            tls.close()
            return
        with tls, upstream:
            _pump(tls, upstream)


def _pump(tls: ssl.SSLSocket, upstream: socket.socket) -> None:
    """Bytes both ways until either side closes or both stay idle; one thread, as an SSL socket
    must not be read and written from two at once."""
    with selectors.DefaultSelector() as selector:
        selector.register(tls, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, tls)
        while True:
            ready = selector.select(timeout=IDLE)
            if not ready:
                return
            for key, _ in ready:
                source: socket.socket = key.fileobj  # type: ignore[assignment]
                target: socket.socket = key.data
                try:
                    data = source.recv(65536)
                    # TLS records already decrypted stay in the SSL object, unseen by select.
                    while isinstance(source, ssl.SSLSocket) and source.pending():
                        data += source.recv(source.pending())
                    if not data:
                        return
                    target.sendall(data)
                except OSError:
                    return
