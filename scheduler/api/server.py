"""Run the API under uvicorn, with TLS when ``api.tls_cert`` and ``api.tls_key`` are set."""

from __future__ import annotations

from pathlib import Path

import uvicorn

from scheduler.api.app import create_app
from scheduler.services import backend

GRACEFUL_SHUTDOWN_S = 5


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
    app = create_app(settings)
    uvicorn.run(
        app,
        host=host or api.host,
        port=api.port if port is None else port,
        ssl_certfile=str(cert) if cert else None,
        ssl_keyfile=str(key) if key else None,
        log_level="info",
        proxy_headers=False,
        # log streams (?follow=true) stay open until their job ends: do not let them hold
        # a restart of the service
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
