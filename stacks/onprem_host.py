"""One existing host of the onprem platform, as pulumi-command resources:

    <cluster>-<host>-facts  command:remote:Command  create: hostops.FACTS_SCRIPT over SSH
                                                     (key only; host key from known_hosts)
                                                     stdout -> facts
    <cluster>-<host>-drain  command:local:Command   nodes only; delete: python -m stacks.drain
                                                     depends on -facts; delete before replace

Removing a host from ``pasture:hosts`` deletes its resources in reverse dependency order:
the drain command's ``delete`` runs first and drains the node through the pasture API,
with the endpoint, token and settings stored at the last ``pulumi up``; only when it
succeeds is the facts resource deleted. A failed drain stops ``pulumi up`` and the host
stays in the stack (nothing is lost). A new name or address (the ``triggers``) replaces
both: the old node is drained first (``delete_before_replace``), then the new host's facts
are recorded. A new SSH endpoint, user or key reruns the facts script (an update).
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
from pulumi_command import local, remote

from stacks import hostops
from stacks.config import OnpremHost as HostConfig

PROJECT_DIR = Path(__file__).resolve().parent.parent
# Seconds per SSH dial attempt and attempts before the facts command fails.
SSH_DIAL_TIMEOUT_S = 20
SSH_DIAL_ATTEMPTS = 3


def drain_command() -> str:
    """The drain resource's delete command: this venv's Python running ``stacks.drain``
    (the path is stored in the state; the project's editable install makes ``stacks``
    importable from it)."""
    return f"{shlex.quote(sys.executable)} -m stacks.drain"


@dataclass(frozen=True)
class HostArgs:
    """Inputs of :class:`OnpremHost`.

    Attributes:
        host: the host's config (name, address, SSH endpoint, labels).
        role: ``master`` or ``node`` (only nodes are drained).
        private_key: the SSH private key (a secret Output).
        host_key: the host's key, ``"<type> <base64>"`` (:func:`hostops.known_host_key`).
        api_endpoint: the pasture API URL the drain calls.
        api_token: the API token (a secret Output), or None when not set.
        api_ca_file: CA bundle for the API's certificate; "" = system CAs.
        drain_on_delete: drain the node before its host leaves the stack.
        drain_timeout_s: HTTP timeout of the drain request, seconds.
    """

    host: HostConfig
    role: str
    private_key: Any
    host_key: str
    api_endpoint: str
    api_token: Any = None
    api_ca_file: str = ""
    drain_on_delete: bool = True
    drain_timeout_s: float = 600.0

    def drain_environment(self) -> dict[str, Any]:
        """The environment of ``python -m stacks.drain`` (see stacks/drain.py)."""
        return {
            "PASTURE_DRAIN_NODE": self.host.name,
            "PASTURE_DRAIN_ON_DELETE": "true" if self.drain_on_delete else "false",
            "PASTURE_API_ENDPOINT": self.api_endpoint,
            "PASTURE_API_TOKEN": self.api_token if self.api_token is not None else "",
            "PASTURE_API_CA_FILE": self.api_ca_file,
            "PASTURE_DRAIN_TIMEOUT_S": str(self.drain_timeout_s),
        }


class OnpremHost(pulumi.ComponentResource):
    """An existing host: ``facts`` is ``{cpu, memory_mib, gpu_count, gpu_model, gpu_names,
    os}``; ``facts_command`` and ``drain`` (None for the master) are the resources."""

    facts: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: HostArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("pasture:onprem:Host", name, None, opts)
        h = args.host
        identity = [h.name, h.address]  # a new name or address is another machine
        self.facts_command = remote.Command(
            f"{name}-facts",
            connection=remote.ConnectionArgs(
                host=h.ssh_host or h.address,
                port=h.ssh_port,
                user=h.ssh_user,
                private_key=args.private_key,
                host_key=args.host_key,
                per_dial_timeout=SSH_DIAL_TIMEOUT_S,
                dial_error_limit=SSH_DIAL_ATTEMPTS,
            ),
            create=hostops.FACTS_SCRIPT,
            triggers=identity,
            opts=pulumi.ResourceOptions(parent=self),
        )
        # pulumi-command marks every output of a command secret when an input is (here the
        # private key; pulumi-command#256). The facts are not secret, and would otherwise
        # make every exported ClusterOutputs value secret (`pulumi stack output --json`
        # would print "[secret]" for the inventory's input).
        self.facts = pulumi.Output.unsecret(self.facts_command.stdout).apply(
            lambda out: hostops.parse_facts_output(out).to_dict()
        )
        self.drain: local.Command | None = None
        if args.role == "node":
            self.drain = local.Command(
                f"{name}-drain",
                delete=drain_command(),
                environment=args.drain_environment(),
                dir=str(PROJECT_DIR),
                triggers=identity,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[self.facts_command],
                    delete_before_replace=True,
                ),
            )
        self.register_outputs({"facts": self.facts})
