"""MARO job and schedule deployments (process, grass/* and k8s/* modes).

Source: microsoft/maro maro/cli/{process,grass,k8s}/.../deployments/external/*start_job.yml
and *start_schedule.yml. A job: ``mode``, ``name``, ``allocation``, ``components: {<name>:
{command, image, num, resources: {cpu, memory, gpu}, mount: {target}}}``. A schedule has
``job_names`` instead of one job: it submits one pasture job per name, each with the same
components (MARO starts a schedule's jobs together). Memory is MiB (``4096m``, ``4096M``,
``4096``). A command list (k8s mode) is the program and its arguments, run without a shell
(quoted into one shell line here); a string is a shell command. ``mount.target`` mounts the
cluster share (MARO's ``data push`` directory) at that path.
"""

from __future__ import annotations

import shlex
from typing import Any

from scheduler.spec.formats.common import Context, as_int, job_name
from scheduler.spec.quantity import QuantityError, parse_memory

FORMAT = "MARO"

_MODES = ("process", "grass", "grass/azure", "grass/local", "grass/on-premises", "k8s", "k8s/aks")


def is_maro(doc: dict[str, Any]) -> bool:
    """A MARO job or schedule: a ``components`` mapping."""
    return isinstance(doc.get("components"), dict)


def is_schedule(doc: dict[str, Any]) -> bool:
    """A MARO schedule: ``job_names`` besides ``components``."""
    return "job_names" in doc


def translate(doc: dict[str, Any], ctx: Context) -> list[dict[str, Any]]:
    """MARO job -> [spec dict]; schedule -> one spec dict per ``job_names`` entry.
    Raises TranslateError naming the MARO field."""
    ctx.check_fields(
        doc,
        "",
        honoured={"mode", "name", "components", "job_names"},
        ignored={
            "allocation": "MARO's node allocation mode; pasture's scheduler places tasks",
            "tags": "labels only",
            "description": "documentation only",
            "parallel": "pasture runs jobs side by side whenever they fit",
        },
    )
    mode = doc.get("mode")
    if mode is not None and mode not in _MODES:
        raise ctx.refuse("mode", f"expected one of {list(_MODES)}", mode)
    roles: dict[str, Any] = {}
    mounts: list[dict[str, str]] = []
    components = ctx.mapping(doc.get("components"), "components")
    if not components:
        raise ctx.refuse("components", "expected at least one component")
    for name, comp in components.items():
        loc = f"components.{name}"
        comp = ctx.mapping(comp, loc)
        ctx.check_fields(
            comp,
            loc,
            honoured={"command", "image", "mount", "num", "resources"},
            ignored={"tags": "labels only"},
        )
        res = ctx.mapping(comp.get("resources"), f"{loc}.resources")
        ctx.check_fields(res, f"{loc}.resources", honoured={"cpu", "memory", "gpu"})
        role: dict[str, Any] = {
            "replicas": as_int(comp.get("num", 1), ctx, f"{loc}.num", minimum=1),
            "command": _command(comp.get("command"), ctx, f"{loc}.command"),
            "resources": {"cpu": res.get("cpu", 1), "gpu": res.get("gpu", 0)},
        }
        if "memory" in res:
            try:
                role["resources"]["memory"] = parse_memory(res["memory"], mib=True)
            except QuantityError as exc:
                raise ctx.refuse(f"{loc}.resources.memory", str(exc), res["memory"]) from exc
        if comp.get("image"):
            role["image"] = comp["image"]
        mount = ctx.mapping(comp.get("mount"), f"{loc}.mount")
        ctx.check_fields(mount, f"{loc}.mount", honoured={"target"})
        if mount.get("target"):
            entry = {"source": "", "target": str(mount["target"])}
            if entry not in mounts:
                mounts.append(entry)
        roles[str(name)] = role
    base: dict[str, Any] = {"roles": roles}
    if mounts:
        base["mounts"] = mounts
    if not is_schedule(doc):
        return [{"name": job_name(doc.get("name"), ctx, "name"), **base}]
    names = ctx.sequence(doc.get("job_names"), "job_names")
    if not names:
        raise ctx.refuse("job_names", "expected at least one job name")
    specs = []
    for i, jname in enumerate(names):
        specs.append({"name": job_name(jname, ctx, f"job_names[{i}]"), **base})
    if len({s["name"] for s in specs}) != len(specs):
        raise ctx.refuse("job_names", "job names must be unique", names)
    return specs


def _command(value: object, ctx: Context, loc: str) -> str:
    if isinstance(value, list) and value and all(isinstance(v, str | int | float) for v in value):
        return shlex.join(str(v) for v in value)
    if isinstance(value, str) and value.strip():
        return value
    raise ctx.refuse(loc, "expected a command string or a list of arguments", value)
