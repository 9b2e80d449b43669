"""Pulumi dynamic resource for one existing host (onprem platform).

    create/update: SSH in (paramiko, key only, known_hosts checked), record facts
    delete:        drain the node through the pasture API, then forget the host

The provider is pickled by reference (dill) into the Pulumi engine's dynamic provider
process, so this module must stay importable and free of side effects (pulumi#7453).
Its logic is in plain functions (:func:`target_from_props`, :func:`diff_host`,
:func:`delete_host`) that tests call directly; under Pulumi's mocks ``create`` never runs.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

from stacks import hostops

# Inputs whose change means a different machine: replace (delete = drain the old one).
REPLACE_KEYS = ("name", "address")
# Inputs whose change needs a new SSH session to refresh the facts.
REFRESH_KEYS = ("ssh_host", "ssh_user", "ssh_port", "private_key", "known_hosts")
SECRET_KEYS = ("private_key", "api_token")


def target_from_props(props: dict[str, Any]) -> hostops.SshTarget:
    """The SSH target of a host resource's properties.

    Raises:
        hostops.HostOpError: a property is missing (names it).
    """
    missing = [k for k in ("name", "address", "ssh_user", "private_key") if not props.get(k)]
    if missing:
        raise hostops.HostOpError(f"host resource: missing properties {missing}")
    return hostops.SshTarget(
        name=props["name"],
        host=props.get("ssh_host") or props["address"],
        port=int(props.get("ssh_port") or 22),
        user=props["ssh_user"],
        private_key=props["private_key"],
        known_hosts=props.get("known_hosts") or None,
        timeout_s=float(props.get("ssh_timeout_s") or 20.0),
    )


def diff_host(olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
    """Changed keys; a new name or address replaces the host (the old node is drained)."""
    keys = sorted(set(olds) | set(news) - {"facts", "__provider"})
    changed = [k for k in keys if k not in ("facts", "__provider") and olds.get(k) != news.get(k)]
    replaces = [k for k in changed if k in REPLACE_KEYS]
    return DiffResult(
        changes=bool(changed),
        replaces=replaces,
        delete_before_replace=bool(replaces),
    )


def delete_host(props: dict[str, Any], drain=hostops.drain_node) -> hostops.DrainResult | None:
    """Drain the node of a host that leaves the stack (nodes only; the master is not a node).

    Returns:
        The drain result, or None when nothing was drained (master, or draining disabled).

    Raises:
        hostops.HostOpError: draining is on but no API token is set, or the API refuses;
            the host then stays in the stack (nothing is lost).
    """
    if props.get("role") != "node" or not props.get("drain_on_delete", True):
        return None
    token = props.get("api_token")
    if not token:
        raise hostops.HostOpError(
            f"cannot remove {props.get('name')}: draining needs pasture:apiToken (set it with "
            "`pulumi config set --secret apiToken ...` and run `pulumi up`), or set "
            "pasture:drainOnDelete false"
        )
    verify: bool | str = props.get("api_ca_file") or True
    return drain(
        props["api_endpoint"],
        token,
        props["name"],
        timeout_s=float(props.get("drain_timeout_s") or 30.0),
        verify=verify,
    )


class HostProvider(ResourceProvider):
    """Dynamic provider of :class:`OnpremHost` (see the module docstring)."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        facts = hostops.gather_facts(target_from_props(props))
        return CreateResult(id_=props["name"], outs={**props, "facts": facts.to_dict()})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        return diff_host(olds, news)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        facts = hostops.gather_facts(target_from_props(news))
        return UpdateResult(outs={**news, "facts": facts.to_dict()})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        delete_host(props)


class OnpremHost(pulumi.dynamic.Resource):
    """An existing host: inputs say how to reach it; output ``facts`` is
    ``{cpu, memory_mib, gpu_count, gpu_model, gpu_names, os}``."""

    facts: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        opts = pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(additional_secret_outputs=list(SECRET_KEYS))
        )
        super().__init__(HostProvider(), name, {**props, "facts": None}, opts)
