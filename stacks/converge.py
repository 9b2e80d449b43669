"""``converge: true``: ``pulumi up`` also runs site.yml on the hosts that changed.

    ClusterOutputs --host_fingerprints()--> {host: sha256}   (env PASTURE_CONVERGE_HOSTS)
                   --render_inventory()---> inventory YAML    (the command's stdin)
    previous stdout's fingerprints vs new --changed_hosts()--> limit (None = every host)
    write inventory -> runner_kwargs() -> ansible_runner.run(playbook, inventory, limit)

:class:`Converge` is a pulumi-command ``local.Command`` whose create and update command is
``python -m stacks.converge`` (:func:`main`). It runs on create (every host) and whenever
its inputs (fingerprints, inventory) change: ``--limit`` the added or changed hosts, the
whole cluster when the master or a cluster-wide value changed; removed hosts need no run.
The previous fingerprints come from the command's previous stdout, which pulumi-command
passes as ``PULUMI_COMMAND_STDOUT``: its last line is the JSON summary :func:`main` prints.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
from pulumi_command import local

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

    Args:
        props: ``inventory`` (YAML text), ``inventory_path``, ``playbook``, ``project_dir``.
        limit: hosts for ``--limit``; None = every host; ``[]`` = nothing to run.

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


def last_summary(stdout: str | None) -> dict[str, Any]:
    """The summary a run printed as its last stdout line (``{ran, limit, hosts}``, see
    :func:`main`); ``{}`` when there is none or it does not parse."""
    lines = (stdout or "").strip().splitlines()
    try:
        summary = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return {}
    return summary if isinstance(summary, dict) else {}


def previous_fingerprints(stdout: str | None) -> dict[str, str] | None:
    """The fingerprints of the last successful run, from its stdout (:func:`last_summary`);
    None when there are none (first run, or unreadable: then every host is converged)."""
    hosts = last_summary(stdout).get("hosts")
    return hosts if isinstance(hosts, dict) else None


def converge_from_env(env: Mapping[str, str], inventory: str) -> dict[str, Any]:
    """Run site.yml as the Converge command does; returns the summary :func:`main` prints.

    Args:
        env: ``PASTURE_CONVERGE_HOSTS`` (JSON fingerprints), ``PASTURE_CONVERGE_PLAYBOOK``,
            ``PASTURE_CONVERGE_INVENTORY_PATH``, ``PASTURE_CONVERGE_PROJECT_DIR``, and on an
            update ``PULUMI_COMMAND_STDOUT`` (the previous run's stdout).
        inventory: the rendered inventory (the command's stdin).

    Raises:
        ConvergeError: a variable is missing, or the playbook failed.
    """
    keys = (
        "PASTURE_CONVERGE_HOSTS",
        "PASTURE_CONVERGE_PLAYBOOK",
        "PASTURE_CONVERGE_INVENTORY_PATH",
        "PASTURE_CONVERGE_PROJECT_DIR",
    )
    missing = [k for k in keys if not env.get(k)]
    if missing or not inventory.strip():
        raise ConvergeError(
            f"converge: environment variables {missing} are not set"
            if missing
            else "converge: no inventory on stdin"
        )
    try:
        hosts = json.loads(env["PASTURE_CONVERGE_HOSTS"])
    except json.JSONDecodeError as exc:
        raise ConvergeError(f"converge: PASTURE_CONVERGE_HOSTS is not JSON: {exc}") from None
    limit = changed_hosts(previous_fingerprints(env.get("PULUMI_COMMAND_STDOUT")), hosts)
    summary = run_site(
        {
            "inventory": inventory,
            "inventory_path": env["PASTURE_CONVERGE_INVENTORY_PATH"],
            "playbook": env["PASTURE_CONVERGE_PLAYBOOK"],
            "project_dir": env["PASTURE_CONVERGE_PROJECT_DIR"],
        },
        limit,
    )
    return {**summary, "hosts": hosts}


def main() -> int:
    """``python -m stacks.converge``: the inventory on stdin, settings in the environment
    (:func:`converge_from_env`). Prints the summary as one JSON line (the next run's
    ``PULUMI_COMMAND_STDOUT``); exit status 1 with the error on stderr."""
    try:
        summary = converge_from_env(os.environ, sys.stdin.read())
    except ConvergeError as exc:
        print(f"pasture converge: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0


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


def converge_command() -> str:
    """The create and update command: this venv's Python running ``stacks.converge``."""
    return f"{shlex.quote(sys.executable)} -m stacks.converge"


class Converge(pulumi.ComponentResource):
    """Runs site.yml from ``pulumi up`` (``converge: true``) through a pulumi-command
    ``local.Command`` (``command``); output ``last_run`` is the summary of the last run
    (``{ran, limit, hosts}``)."""

    last_run: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: ConvergeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("pasture:converge:Converge", name, None, opts)
        cluster = args.outputs.apply(ClusterOutputs.model_validate)
        self.command = local.Command(
            f"{name}-site",
            create=converge_command(),
            update=converge_command(),
            stdin=cluster.apply(render_inventory),
            environment={
                "PASTURE_CONVERGE_HOSTS": cluster.apply(
                    lambda c: json.dumps(host_fingerprints(c), sort_keys=True)
                ),
                "PASTURE_CONVERGE_PLAYBOOK": args.playbook,
                "PASTURE_CONVERGE_INVENTORY_PATH": args.inventory_path,
                "PASTURE_CONVERGE_PROJECT_DIR": args.project_dir,
            },
            dir=args.project_dir,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.last_run = self.command.stdout.apply(last_summary)
        self.register_outputs({"last_run": self.last_run})


if __name__ == "__main__":
    sys.exit(main())
