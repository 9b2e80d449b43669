"""ClusterOutputs (contract 1) and the Ansible inventory rendered from it.

Every Pulumi stack (``stacks/azure_vm.py``, ``stacks/aks/``, ``stacks/onprem.py``) exports
the fields of :class:`ClusterOutputs` as top-level stack outputs. ``pulumi stack output
--json`` prints them as one JSON object; :func:`parse_stack_output` validates it and
:func:`render_inventory` turns it into the inventory shape written down in
``docs/internals/conventions.md`` (groups ``master`` and ``nodes``)::

    pulumi stack output --json  ->  parse_stack_output()  ->  ClusterOutputs
                                                                   |
                        templates/inventory.yml.j2  <- render_inventory()  ->  inventory.yml

The schema lives here, not in ``stacks/``, so that the installed ``pasture`` CLI can render
an inventory without the Pulumi programs; ``stacks/contract.py`` re-exports it.

The template is ``templates/inventory.yml.j2`` in a checkout and
``scheduler/_templates/inventory.yml.j2`` in the installed wheel (hatch force-include).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import jinja2
import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

TEMPLATE_NAME = "inventory.yml.j2"

# A host name usable as an Ansible inventory_hostname, a node name in the scheduler and a
# Kubernetes node name: RFC 1123 label characters (dots allowed for FQDN-style names).
_HOST_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")

Platform = Literal["azure", "aks", "onprem", "local"]


class ClusterOutputError(ValueError):
    """A stack output does not match the ClusterOutputs contract (message names the field)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HostOutput(_Frozen):
    """A machine Ansible connects to.

    Attributes:
        name: cluster name of the machine (the inventory_hostname and the scheduler's node
            name), lower-case RFC 1123 characters.
        address: cluster-internal address (Redis/API/Samba bind here, tasks are reached here).
        ssh_host: where Ansible connects when it differs from ``address`` (a public IP);
            None means ``address``.
        ssh_user: SSH login user.
        ssh_port: SSH port, 1..65535.
        connection: ``ssh`` for machines reached over SSH, ``local`` for a host whose plays
            run on the controller (the aks master, whose services run in Kubernetes).
    """

    name: str
    address: str = Field(min_length=1)
    ssh_host: str | None = None
    ssh_user: str = Field(default="root", min_length=1)
    ssh_port: int = Field(default=22, ge=1, le=65535)
    connection: Literal["ssh", "local"] = "ssh"

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _HOST_NAME.match(value):
            raise ValueError(f"expected a lower-case host name (a-z, 0-9, '-', '.'), got {value!r}")
        return value


class NodeOutput(HostOutput):
    """A machine that runs tasks.

    Attributes:
        cpu: CPU cores (>= 0).
        memory_mib: memory in MiB (>= 0).
        gpu_count: GPU devices (>= 0).
        gpu_model: GPU model ("A100"), None when the node has none or it is unknown.
        labels: node labels matched by job node selectors (``{pool: gpu}``).
    """

    cpu: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    gpu_count: int = Field(default=0, ge=0)
    gpu_model: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class ClusterOutputs(_Frozen):
    """What every stack exports and the only thing Ansible consumes (contract 1).

    Attributes:
        platform: which stack produced it: ``azure``, ``aks``, ``onprem`` (or ``local`` for
            the podman cluster's inventory).
        cluster_name: name of the cluster (``pasture_cluster_name``).
        master: the master machine.
        nodes: the machines that run tasks, names unique (may be empty: an aks cluster's
            nodes join through the agent DaemonSet, not through Ansible).
        share_name: name of the cluster share (Samba share or Azure Files share).
        api_endpoint: URL of the pasture API (``https://10.0.0.4:8443``).

    Raises:
        pydantic.ValidationError: on construction with bad fields (see
            :func:`parse_stack_output` for a message naming the field).
    """

    platform: Platform
    cluster_name: str = Field(min_length=1)
    master: HostOutput
    nodes: list[NodeOutput] = Field(default_factory=list)
    share_name: str = Field(min_length=1)
    api_endpoint: str

    @field_validator("api_endpoint")
    @classmethod
    def _check_endpoint(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http(s) URL like https://10.0.0.4:8443, got {value!r}")
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> ClusterOutputs:
        seen = {self.master.name}
        for node in self.nodes:
            if node.name in seen:
                raise ValueError(f"host name {node.name!r} appears twice (master and nodes)")
            seen.add(node.name)
        return self

    def to_stack_outputs(self) -> dict[str, Any]:
        """The top-level stack outputs a Pulumi program exports for this value."""
        return self.model_dump(mode="json")


CONTRACT_KEYS: tuple[str, ...] = tuple(ClusterOutputs.model_fields)


def _format_errors(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        given = e.get("input")
        given_s = "missing" if e["type"] == "missing" else repr(given)
        if len(given_s) > 80:
            given_s = given_s[:77] + "..."
        parts.append(f"{loc}: {e['msg']} (given: {given_s})")
    return "; ".join(parts)


def parse_stack_output(data: Mapping[str, Any] | str | bytes) -> ClusterOutputs:
    """Validate ``pulumi stack output --json`` into :class:`ClusterOutputs`.

    Args:
        data: the JSON text or the decoded object. Keys that are not contract fields
            (``kubeconfig``, ``resource_group``...) are ignored.

    Returns:
        The validated ClusterOutputs.

    Raises:
        ClusterOutputError: the text is not JSON, not an object, or a field is missing or
            wrong; the message names each bad field, what was expected and what was given.
    """
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ClusterOutputError(f"stack output is not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ClusterOutputError(
            f"stack output must be a JSON object of outputs, got {type(data).__name__}"
        )
    fields = {k: v for k, v in data.items() if k in CONTRACT_KEYS}
    if fields.get("master") == "[secret]" or fields.get("nodes") == "[secret]":
        raise ClusterOutputError("master/nodes are shown as [secret]: use --show-secrets")
    try:
        return ClusterOutputs.model_validate(fields)
    except ValidationError as exc:
        raise ClusterOutputError(f"stack output: {_format_errors(exc)}") from None


def template_dirs() -> list[Path]:
    """Directories searched for ``inventory.yml.j2``: the installed package's
    ``_templates`` first, then the checkout's top-level ``templates/``."""
    here = Path(__file__).resolve().parent
    return [d for d in (here / "_templates", here.parent / "templates") if d.is_dir()]


def _environment() -> jinja2.Environment:
    dirs = template_dirs()
    if not dirs:
        raise FileNotFoundError(
            f"{TEMPLATE_NAME} not found in scheduler/_templates or the checkout's templates/"
        )
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in dirs]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_inventory(outputs: ClusterOutputs) -> str:
    """Render the Ansible inventory (YAML text) of a cluster.

    The shape is the one in ``docs/internals/conventions.md``: ``all.vars`` with
    ``pasture_cluster_name``, ``pasture_share_name``, ``pasture_api_endpoint``; groups
    ``master`` and ``nodes``; per host ``ansible_host``, ``ansible_user``, ``pasture_address``
    and, for nodes, ``pasture_node_cpu`` (cores), ``pasture_node_memory_mib``,
    ``pasture_node_gpu_count``, ``pasture_node_gpu_model``, ``pasture_node_labels``.
    Every value is written as JSON (a YAML subset), so no name or label can break the YAML.

    Raises:
        FileNotFoundError: the template is not installed and not in a checkout.
    """
    template = _environment().get_template(TEMPLATE_NAME)
    return template.render(cluster=outputs.model_dump(mode="json"))


def write_inventory(outputs: ClusterOutputs, path: Path) -> Path:
    """Render the inventory and write it to ``path`` (parents created). Returns ``path``."""
    text = render_inventory(outputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def inventory_command(
    from_stack_output: Annotated[
        Path,
        typer.Option(
            "--from-stack-output",
            help="JSON written by `pulumi stack output --json` ('-' reads stdin).",
            allow_dash=True,
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the inventory here instead of stdout."),
    ] = None,
) -> None:
    """Write the Ansible inventory of a cluster from its Pulumi stack outputs."""
    try:
        from_stdin = str(from_stack_output) == "-"
        text = sys.stdin.read() if from_stdin else from_stack_output.read_text()
    except OSError as exc:
        typer.echo(f"error: --from-stack-output: cannot read {from_stack_output}: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        outputs = parse_stack_output(text)
    except ClusterOutputError as exc:
        typer.echo(f"error: {from_stack_output}: {exc}", err=True)
        raise typer.Exit(2) from None
    if output is None:
        typer.echo(render_inventory(outputs), nl=False)
    else:
        write_inventory(outputs, output)
        typer.echo(f"wrote {output} ({len(outputs.nodes)} nodes)", err=True)


# Mount with ``cli.add_typer(app, name="inventory")``: the command is the group's callback, so
# the CLI reads ``pasture inventory --from-stack-output FILE.json [--output PATH]``.
app = typer.Typer(help="Ansible inventory from Pulumi stack outputs.", add_completion=False)
app.callback(invoke_without_command=True)(inventory_command)
