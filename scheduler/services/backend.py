"""The one place that names the backend's functions (settings, job spec, store).

The API, the services and the CLI reach ``scheduler.settings``, ``scheduler.spec`` and
``scheduler.store`` only through these functions, so a renamed backend function is fixed
here and nowhere else. Every import is lazy: the CLI's client commands must start without
loading Redis or the spec models. The types are imported for the type checker only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

    from scheduler.core.explain import Explanation
    from scheduler.core.model import Job, Node, Snapshot
    from scheduler.core.policy import Policy
    from scheduler.settings import SchedulerSettings
    from scheduler.spec import ParsedJob
    from scheduler.spec.model import JobSpec
    from scheduler.store import Store


def load_scheduler_settings(path: str | Path | None = None) -> SchedulerSettings:
    """The master's settings (``/etc/pasture/scheduler.yaml``, see conventions.md).

    Args:
        path: the YAML file; None uses ``PASTURE_CONFIG`` or the default path.

    Raises:
        FileNotFoundError, ValueError (pydantic ValidationError): a missing or bad file.
    """
    from scheduler import settings

    return settings.load_scheduler_settings(path)


def redis_client(settings: SchedulerSettings) -> redis.Redis:
    """A redis-py client for ``settings.redis`` (url, username, password/password_file)."""
    return settings.redis.client()


def open_store(settings: SchedulerSettings, client: redis.Redis | None = None) -> Store:
    """The backend's store object over ``client`` (a new client when None)."""
    from scheduler import store

    return store.Store(client if client is not None else redis_client(settings))


def upgrade_store(store: Store, settings: SchedulerSettings) -> None:
    """Bring a store written by an older pasture to this code's layout, backup first
    (:func:`scheduler.store.migrate.migrate`; a no-op once done). Raises as it does."""
    from scheduler.store.migrate import migrate

    migrate(store, share_dir=settings.share_dir, backup_dir=settings.backup_dir)


def parse_job_spec(document: dict[str, Any]) -> JobSpec:
    """Validate a parsed job document (pasture, OpenPAI v1/v2, MARO, Volcano) into one job spec.

    Raises:
        scheduler.spec.SpecError: ``errors`` lists ``{"loc": "roles.worker.cpu", "msg",
            "input"}`` (dotted field path).
    """
    from scheduler import spec

    return spec.parse_job_spec(document)


def parse_job(document: dict[str, Any]) -> ParsedJob:
    """Translate (any supported format) and validate a parsed job document once.

    Returns:
        :class:`scheduler.spec.ParsedJob` (``specs``, ``format``, ``warnings``).

    Raises:
        scheduler.spec.SpecError: as :func:`parse_job_spec`.
    """
    from scheduler import spec

    return spec.parse_job(document)


def load_document(body: bytes | str, as_json: bool = False) -> object:
    """The bounded YAML/JSON parse of a job spec's text (size, depth and alias limits).

    Raises:
        scheduler.spec.DocumentError: malformed or over a limit (``errors`` as SpecError).
    """
    from scheduler import spec

    return spec.load_document(body, as_json=as_json)


def job_template() -> str:
    """The commented example job spec (``pasture template job``)."""
    from scheduler.spec import JOB_TEMPLATE

    return JOB_TEMPLATE


def apply_vcs(settings: SchedulerSettings, store: Store) -> list[str]:
    """(Re)write the VCs from ``settings.virtual_clusters``; returns their names."""
    store.apply_vcs(settings.virtual_clusters)
    return [vc.name for vc in settings.virtual_clusters]


def core_nodes(store: Store) -> list[Node]:
    """The registered nodes as core :class:`scheduler.core.model.Node` values (capacity in
    millicores / bytes / devices, labels, GPU model, state; nothing allocated)."""
    from scheduler.core.model import Node, NodeState
    from scheduler.core.resources import Resources

    return [
        Node(
            name=n.name,
            capacity=Resources(n.cpu_m, n.memory, n.gpu),
            labels=dict(n.labels),
            gpu_model=n.gpu_model,
            state=NodeState(n.state),
        )
        for n in store.list_nodes()
    ]


def unfittable_reason(spec: JobSpec, nodes: list[Node]) -> str | None:
    """Why no node of ``nodes`` could ever hold the job's gang, None when one could.

    Only the cluster's static shape counts (capacity, labels, GPU model; lost nodes are
    ignored). With no node registered yet the check is skipped (None): agents may still be
    starting, and the loop then reports the pending reason.
    """
    from scheduler.spec import unfittable_reason as reason

    return reason(spec, nodes) if nodes else None


def job_exists_error() -> type[Exception]:
    """The store's "a job of that name exists" exception class."""
    from scheduler.store import JobExistsError

    return JobExistsError


def not_found_errors() -> tuple[type[Exception], ...]:
    """The store's "no such job / node" exception classes."""
    from scheduler.store import JobNotFoundError, NodeNotFoundError

    return (JobNotFoundError, NodeNotFoundError)


def job_active_error() -> type[Exception]:
    """The store's error for deleting a job that has not finished."""
    from scheduler.store import JobActiveError

    return JobActiveError


def seal_secrets(key_file: str | Path | None, job: str, values: dict[str, str]) -> str:
    """The sealed token of a job's secret values, with the key in ``key_file``.

    Raises:
        ValueError (scheduler.sealed.SealError): no key file, or not a key.
    """
    from scheduler import sealed

    return sealed.seal(sealed.load_key(key_file), job, values)


def load_policy(name: str) -> Policy:
    """The named scheduling policy (``loop.policy`` in the settings) from
    :mod:`scheduler.core.presets`, as the loop uses it.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    from scheduler.core.presets import get_preset

    return get_preset(name)


def snapshot(store: Store) -> Snapshot:
    """The core's view of the cluster now (nodes with what the ledger allocates, VCs,
    queued and running jobs), read as the loop reads it; nothing is written."""
    from scheduler.store.snapshot import take_snapshot

    return take_snapshot(store)[0]


def core_job(spec: JobSpec, user: str, submit_time: float) -> Job:
    """The core's view of a job not stored yet (first attempt, no service attained)."""
    return spec.to_core(submit_time=submit_time, user=user)


def explain(snapshot: Snapshot, policy: Policy, job: str, now: float) -> Explanation:
    """``scheduler.core.explain.explain``: the pending ``job``'s outcome of one
    ``schedule()`` on ``snapshot`` and every node's verdict per role.

    Raises:
        KeyError: ``job`` is not pending in ``snapshot``.
    """
    from scheduler.core.explain import explain as core_explain

    return core_explain(snapshot, policy, job, now)
