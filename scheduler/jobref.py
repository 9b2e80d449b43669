"""A job's identity: its name within its virtual cluster (VC), as one string, the key.

Job names belong to their VC: alice's ``train`` in VC ``a`` and bob's ``train`` in VC
``b`` are two jobs. Everything that stores or finds a job uses its key, never the bare
name: the store's Redis keys (``job:<key>``, ``jobs`` members, ledger entries
``<key>/<role>-<index>``, launch records ``node:<node>:launch:<key>``), the share paths
(``jobs/<key>/...``, :mod:`scheduler.logpaths`), container and process handles, metric
labels and the discovery environment's job identity. The short name and the VC stay
fields of the job's record (``vc`` and ``spec.name``); answers show those two.

The key (this module is the one definition; :func:`job_key` and :func:`split_key`)::

    <name>            a job of VC "default" (the VC a spec gets when it names none)
    <name>.<vc>       a job of any other VC

Why this form: a job name is a DNS label (``[a-z0-9-]``, at most 63, no dot) and a VC name
is ``[A-Za-z0-9][A-Za-z0-9_.-]{0,62}``, so the first dot of a key ends the name and
everything after it is the VC: the mapping is one-to-one, and a key without a dot can only
be a default-VC job. ``.`` (unlike OpenPAI's ``~`` or ``/``) is valid in Redis keys, file
names (a key is never ``.`` or ``..``: it starts with a letter or digit), podman container
names (``[a-zA-Z0-9][a-zA-Z0-9_.-]*``), Kubernetes label values (pod names are hashed by
:func:`scheduler.agent.k8s_pod.pod_name`), Prometheus label values and environment values.
Default-VC jobs keep their bare names so that a single-tenant cluster's store, share and
scripts are unchanged; :mod:`scheduler.store.migrate` renames the jobs of other VCs that
a store written before this scheme holds.

Stdlib only: a leaf every layer imports.
"""

from __future__ import annotations

import re

DEFAULT_VC = "default"
"""The VC whose jobs' keys are their bare names (the spec's default ``vc``)."""

SEPARATOR = "."
"""Between a job's name and its VC in its key; never part of a job name."""

NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A job name (DNS label; the spec's ``name`` pattern)."""

VC = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A VC name (the settings' and the spec's VC pattern)."""


def job_key(vc: str, name: str) -> str:
    """The key of job ``name`` of VC ``vc``: ``name`` for VC ``default``, else
    ``<name>.<vc>``.

    Raises:
        ValueError: ``name`` is not a job name or ``vc`` not a VC name (the message
            names the field, what was expected and what was given).
    """
    if not NAME.fullmatch(name):
        raise ValueError(f"job name: expected a DNS label of [a-z0-9-] (<= 63), got {name!r}")
    if not VC.fullmatch(vc):
        raise ValueError(f"vc: expected a VC name of [A-Za-z0-9_.-] (<= 64), got {vc!r}")
    return name if vc == DEFAULT_VC else f"{name}{SEPARATOR}{vc}"


def split_key(key: str) -> tuple[str, str]:
    """The inverse of :func:`job_key`: ``(vc, name)`` of a job key.

    Raises:
        ValueError: ``key`` is not a job key.
    """
    name, dot, vc = key.partition(SEPARATOR)
    if not dot:
        vc = DEFAULT_VC
    if not NAME.fullmatch(name) or not VC.fullmatch(vc) or (dot and vc == DEFAULT_VC):
        raise ValueError(f"job: expected <name> or <name>.<vc>, got {key!r}")
    return vc, name


def short_name(key: str) -> str:
    """The job name part of ``key`` (what users call the job within its VC); a string
    that is not a key (a record from before names were checked) is returned as it is."""
    try:
        return split_key(key)[1]
    except ValueError:
        return key


def is_key(text: str) -> bool:
    """Whether ``text`` is a job key (a bare job name is one: a default-VC job's)."""
    try:
        split_key(text)
    except ValueError:
        return False
    return True


def exists_message(vc: str, name: str) -> str:
    """What a submit is told when job ``name`` is taken in its own VC ``vc`` (it names
    only the caller's VC: a name used in another VC is free)."""
    return f"a job named {name!r} already exists in VC {vc!r}"


def qualified_name(key: str) -> str:
    """``<name>.<vc>`` of job ``key``, the VC spelt out even for VC ``default``: the one
    form that names a job unambiguously wherever a job name is taken (API paths, the
    dashboard's links, the CLI); a string that is not a key is returned as it is."""
    try:
        vc, name = split_key(key)
    except ValueError:
        return key
    return f"{name}{SEPARATOR}{vc}"


def parse_ref(text: str) -> tuple[str | None, str]:
    """``(vc, name)`` of what a user calls a job: ``<name>`` (VC not given: None) or
    ``<name>.<vc>`` (:func:`qualified_name`; ``<name>.default`` too).

    Raises:
        ValueError: ``text`` is neither form (the message names what was given).
    """
    name, dot, vc = text.partition(SEPARATOR)
    if not NAME.fullmatch(name) or (dot and not VC.fullmatch(vc)):
        raise ValueError(f"job: expected <name> or <name>.<vc>, got {text!r}")
    return (vc if dot else None), name
