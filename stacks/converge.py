"""``converge: true``: ``pulumi up`` also runs site.yml on the hosts that changed.

    ClusterOutputs --host_fingerprints()--> {host: sha256}      (resource input "hosts")
    old vs new fingerprints --changed_hosts()--> limit (None = every host)
    render inventory -> runner_kwargs() -> ansible_runner.run(playbook, inventory, limit)

A Pulumi dynamic resource (:class:`Converge`) carries the fingerprints; its provider runs
on create (every host) and on update (``--limit`` the added or changed hosts; the whole
cluster when the master or a cluster-wide value changed). Removed hosts need no run.

The provider is pickled by reference (dill): this module stays importable and free of
side effects (pulumi#7453). The logic is in plain functions tested directly.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

from scheduler.inventory import ClusterOutputs, render_inventory

PROJECT_DIR = Path(__file__).resolve().parent.parent
CLUSTER_KEY = "__cluster__"  # fingerprint of the cluster-wide values


class ConvergeError(RuntimeError):
    """site.yml failed; the message has ansible-runner's status and return code."""


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def host_fingerprints(outputs: ClusterOutputs) -> dict[str, str]:
    """``{host name: sha256 of its inventory values}`` plus ``__cluster__`` for the
    cluster-wide values (name, share, API endpoint, master)."""
    prints = {n.name: _digest(n.model_dump(mode="json")) for n in outputs.nodes}
    prints[outputs.master.name] = _digest(outputs.master.model_dump(mode="json"))
    prints[CLUSTER_KEY] = _digest(
        {
            "cluster_name": outputs.cluster_name,
            "share_name": outputs.share_name,
            "api_endpoint": outputs.api_endpoint,
            "master": outputs.master.name,
        }
    )
    return prints


def changed_hosts(old: dict[str, str] | None, new: dict[str, str]) -> list[str] | None:
    """Hosts site.yml must run on after a change.

    Returns:
        None for every host (first run, or the master or a cluster-wide value changed:
        every node's settings point at the master); otherwise the sorted names of hosts
        added or changed (``[]`` when hosts were only removed: nothing to run).
    """
    if not old or old.get(CLUSTER_KEY) != new.get(CLUSTER_KEY):
        return None
    return sorted(h for h, fp in new.items() if h != CLUSTER_KEY and old.get(h) != fp)


def ansible_playbook() -> str:
    """The ``ansible-playbook`` on PATH, else the one next to this Python (the venv's,
    when Pulumi runs the program without activating the venv)."""
    found = shutil.which("ansible-playbook")
    if found:
        return found
    return str(Path(sys.executable).with_name("ansible-playbook"))


def runner_kwargs(
    *,
    project_dir: str,
    playbook: str,
    inventory_path: str,
    limit: list[str] | None,
    private_data_dir: str,
) -> dict[str, Any]:
    """Keyword arguments of ``ansible_runner.run`` for site.yml.

    Args:
        project_dir: the checkout (playbooks/ and roles/ live here).
        playbook: playbook path, relative to ``project_dir`` or absolute.
        inventory_path: rendered inventory file.
        limit: hosts for ``--limit`` (None: all hosts).
        private_data_dir: ansible-runner's working directory (artifacts).
    """
    kwargs: dict[str, Any] = {
        # ansible-playbook of this Python's venv first (Pulumi may not activate the venv).
        "envvars": {"PATH": f"{Path(ansible_playbook()).parent}:{os.environ.get('PATH', '')}"},
        "private_data_dir": private_data_dir,
        "project_dir": project_dir,
        "playbook": str(Path(project_dir) / playbook),
        "inventory": inventory_path,
        "quiet": True,
    }
    if limit is not None:
        kwargs["limit"] = ",".join(limit)
    return kwargs


def run_site(props: dict[str, Any], limit: list[str] | None) -> dict[str, Any]:
    """Write the inventory and run the playbook with ``limit``; returns a summary.

    Raises:
        ConvergeError: the playbook failed (status and rc in the message).
    """
    import ansible_runner

    inventory = Path(props["inventory_path"])
    inventory.parent.mkdir(parents=True, exist_ok=True)
    inventory.write_text(props["inventory"])
    if limit == []:
        return {"ran": False, "limit": []}
    with tempfile.TemporaryDirectory(prefix="pasture-converge-") as tmp:
        result = ansible_runner.run(
            **runner_kwargs(
                project_dir=props["project_dir"],
                playbook=props["playbook"],
                inventory_path=str(inventory),
                limit=limit,
                private_data_dir=tmp,
            )
        )
        if result.rc != 0:
            tail = "".join(result.stdout.readlines()[-30:]) if result.stdout else ""
            raise ConvergeError(
                f"{props['playbook']} failed (status {result.status}, rc {result.rc}) "
                f"on {','.join(limit) if limit else 'all hosts'}:\n{tail}"
            )
    return {"ran": True, "limit": limit if limit is not None else ["all"]}


class ConvergeProvider(ResourceProvider):
    """Runs site.yml on create and on host changes (see the module docstring)."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        summary = run_site(props, None)
        return CreateResult(id_="converge", outs={**props, "last_run": summary})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = olds.get("hosts") != news.get("hosts") or olds.get("inventory") != news.get(
            "inventory"
        )
        return DiffResult(changes=changed, replaces=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        summary = run_site(news, changed_hosts(olds.get("hosts"), news["hosts"]))
        return UpdateResult(outs={**news, "last_run": summary})


@dataclass(frozen=True)
class ConvergeArgs:
    """Inputs of :class:`Converge`.

    Attributes:
        outputs: the stack's ClusterOutputs (as the output dict the component exports).
        playbook: playbook relative to the project directory.
        inventory_path: absolute path the rendered inventory is written to.
        project_dir: the checkout holding playbooks/ and roles/.
    """

    outputs: pulumi.Output[dict[str, Any]]
    playbook: str
    inventory_path: str
    project_dir: str = str(PROJECT_DIR)

    @classmethod
    def from_config(cls, cfg: Any, outputs: pulumi.Output[dict[str, Any]]) -> ConvergeArgs:
        """From the stack config: ``convergePlaybook``, ``convergeInventory`` (default
        ``inventories/<stack>/inventory.yml``)."""
        path = cfg.converge_inventory or f"inventories/{pulumi.get_stack()}/inventory.yml"
        inventory = Path(path)
        if not inventory.is_absolute():
            inventory = PROJECT_DIR / inventory
        return cls(outputs=outputs, playbook=cfg.converge_playbook, inventory_path=str(inventory))


class Converge(pulumi.dynamic.Resource):
    """Runs site.yml from ``pulumi up`` (``converge: true``); output ``last_run``."""

    last_run: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: ConvergeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        cluster = args.outputs.apply(ClusterOutputs.model_validate)
        props = {
            "hosts": cluster.apply(host_fingerprints),
            "inventory": cluster.apply(render_inventory),
            "inventory_path": args.inventory_path,
            "playbook": args.playbook,
            "project_dir": args.project_dir,
            "last_run": None,
        }
        super().__init__(ConvergeProvider(), name, props, opts)
