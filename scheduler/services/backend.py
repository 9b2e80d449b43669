"""The one place that names the backend's functions (settings, job spec, store).

The API, the services and the CLI reach ``scheduler.settings``, ``scheduler.spec`` and
``scheduler.store`` only through these functions, so a renamed backend function is fixed
here and nowhere else. Every import is lazy: the CLI's client commands must start without
loading Redis or the spec models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_scheduler_settings(path: str | Path | None = None) -> Any:
    """The master's settings (``/etc/pasture/scheduler.yaml``, see conventions.md).

    Args:
        path: the YAML file; None uses ``PASTURE_CONFIG`` or the default path.

    Raises:
        FileNotFoundError, ValueError (pydantic ValidationError): a missing or bad file.
    """
    from scheduler import settings

    return settings.load_scheduler_settings(path)


def redis_client(settings: Any) -> Any:
    """A redis-py client for ``settings.redis`` (url, username, password/password_file)."""
    return settings.redis.client()


def open_store(settings: Any, client: Any | None = None) -> Any:
    """The backend's store object over ``client`` (a new client when None)."""
    from scheduler import store

    return store.Store(client if client is not None else redis_client(settings))


def parse_job_spec(document: Any) -> Any:
    """Validate a parsed job document (pasture, OpenPAI v2 or MARO) into the job spec.

    Raises:
        scheduler.spec.SpecError: ``errors`` lists ``{"loc": "roles.worker.cpu", "msg",
            "input"}`` (dotted field path).
    """
    from scheduler import spec

    return spec.parse_job_spec(document)


def job_template() -> str:
    """The commented example job spec (``pasture template job``)."""
    from scheduler.spec import JOB_TEMPLATE

    return JOB_TEMPLATE


def apply_vcs(settings: Any, store: Any) -> list[str]:
    """(Re)write the VCs from ``settings.virtual_clusters``; returns their names."""
    store.apply_vcs(settings.virtual_clusters)
    return [vc.name for vc in settings.virtual_clusters]
