"""Run the API under uvicorn, with TLS when ``api.tls_cert`` and ``api.tls_key`` are set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from scheduler.api.app import create_app
from scheduler.services import backend

GRACEFUL_SHUTDOWN_S = 5
# A request's line and headers may take at most this many bytes (h11, uvicorn's default
# parser, refuses more than 16 KiB; httptools has no bound of its own).
MAX_HEAD_BYTES = 32 * 1024
# uvloop: uvicorn's C event loop (a dependency of the package).
LOOP_IMPL = "uvloop"


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools (C, llhttp) HTTP/1.1 protocol with a bound on a request's head.

    httptools takes about 0.15 ms of CPU off each request compared with h11
    (scheduler/bench/README.md, "The API's per-request cost"), but buffers a request line
    and headers of any size (100 MiB of headers grew the process by 125 MiB, measured).
    Here, a head still incomplete after more than :data:`MAX_HEAD_BYTES` bytes is answered
    400 and the connection closed, as h11 does; buffered head bytes stay under that bound
    plus one read. Bodies are bounded by :class:`scheduler.api.limits.BodySizeLimit`.
    """

    _in_head = True  # between a message's end (or the connection's start) and its headers
    _head_bytes = 0  # bytes received while in a head, counted chunk by chunk
    _events = 0  # heads and messages completed on this connection

    def data_received(self, data: bytes) -> None:
        events = self._events
        super().data_received(data)
        if self._events != events:
            # A head or a message ended inside this chunk: what follows it is at most one
            # chunk, so counting starts again (a complete request in one chunk, a body's
            # tail, are not counted as head bytes).
            self._head_bytes = 0
        elif self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                msg = "Request line and headers too large."
                self.logger.warning(msg)
                self.send_400_response(msg)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._events += 1
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head = True  # the next request's head starts
        self._events += 1
        super().on_message_complete()


def started_app(settings: Any) -> FastAPI:
    """The app ``pasture serve api`` serves: its store opened from ``settings`` and first
    brought to this code's layout (:func:`scheduler.store.migrate.migrate`: once per
    store, backup first), then :func:`create_app` over it.

    Raises:
        RuntimeError: the store needs an upgrade that cannot be made (see ``migrate``).
    """
    store = backend.open_store(settings)
    backend.upgrade_store(store, settings)
    return create_app(settings, store=store)


def serve(config: str | Path | None, host: str | None = None, port: int | None = None) -> None:
    """Load the settings, build the app and serve until SIGINT/SIGTERM.

    Args:
        config: path of scheduler.yaml (None: ``PASTURE_CONFIG`` or the default).
        host, port: overrides of ``api.host`` / ``api.port`` (port 0 = any free port).

    Raises:
        ValueError: only one of ``api.tls_cert`` / ``api.tls_key`` is set.
    """
    settings = backend.load_scheduler_settings(config)
    api = settings.api
    cert, key = getattr(api, "tls_cert", None), getattr(api, "tls_key", None)
    if bool(cert) != bool(key):
        raise ValueError("api.tls_cert and api.tls_key: expected both or neither")
    app = started_app(settings)
    uvicorn.run(
        app,
        host=host or api.host,
        port=api.port if port is None else port,
        ssl_certfile=str(cert) if cert else None,
        ssl_keyfile=str(key) if key else None,
        log_level="info",
        http=BoundedHttpToolsProtocol,
        loop=LOOP_IMPL,
        proxy_headers=False,
        # log streams (?follow=true) stay open until their job ends: do not let them hold
        # a restart of the service
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
