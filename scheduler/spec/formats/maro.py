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
    ctx.origin("name", "name")
    for name, comp in components.items():
        loc = f"components.{name}"
        ctx.origins_under(
            f"roles.{name}",
            loc,
            {
                "replicas": "num",
                "command": "command",
                "image": "image",
                "resources.cpu": "resources.cpu",
                "resources.memory": "resources.memory",
                "resources.gpu": "resources.gpu",
            },
        )
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
            entry = _mount(mount["target"], f"{loc}.mount.target", ctx)
            if entry is not None and entry not in mounts:
                ctx.origin(f"mounts.{len(mounts)}", f"{loc}.mount.target")
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


PROJECT_ROOT = "{project root}"
"""MARO docs' placeholder for the mount target ("replace {project root} with a valid
linux path ... the data you push will be mount into this folder", microsoft/maro
docs/source/installation/grass_*_cluster_provisioning.rst). Its meaning, the directory
where the pushed data is, is the cluster share here: ``$PASTURE_SHARE_DIR`` in commands."""
_SHARE = "${PASTURE_SHARE_DIR}"
_QUOTES = "\"'\u201c\u201d\u2018\u2019 "


def _command(value: object, ctx: Context, loc: str) -> str:
    """A component's command as one shell line: a list is the program and its arguments
    (quoted); a string is a shell line. :data:`PROJECT_ROOT` becomes the share's path."""
    if isinstance(value, list) and value and all(isinstance(v, str | int | float) for v in value):
        return " ".join(_quote(str(v)) for v in value)
    if isinstance(value, str) and value.strip():
        return value.replace(PROJECT_ROOT, _SHARE)
    raise ctx.refuse(loc, "expected a command string or a list of arguments", value)


def _quote(arg: str) -> str:
    """``shlex.quote`` with each :data:`PROJECT_ROOT` left outside the quotes as the share's
    path (``{project root}/a b.sh`` -> ``"${PASTURE_SHARE_DIR}"'/a b.sh'``)."""
    if PROJECT_ROOT not in arg:
        return shlex.quote(arg)
    return f'"{_SHARE}"'.join(shlex.quote(p) if p else "" for p in arg.split(PROJECT_ROOT))


def _mount(value: object, loc: str, ctx: Context) -> dict[str, Any] | None:
    """``mount.target``: the cluster share (what ``maro ... data push`` fills) mounted at
    that path. ``{project root}`` (the docs' placeholder) means the share itself: nothing
    to mount, commands read it at ``$PASTURE_SHARE_DIR``. A Docker-style ``HOST:CONTAINER``
    mounts the share at CONTAINER (the host directory's files are to be pushed), read-write
    as Docker does unless a trailing ``:ro``."""
    target = str(value).strip(_QUOTES)
    read_only = False
    if target == PROJECT_ROOT or target.startswith(PROJECT_ROOT + "/"):
        ctx.warn(
            loc,
            f"{PROJECT_ROOT} is the cluster share here: commands read it at "
            "$PASTURE_SHARE_DIR (their {project root} is replaced by it)",
        )
        return None
    if ":" in target:
        host, _, inner = target.partition(":")
        inner, _, option = inner.partition(":")  # a trailing :ro / :rw option
        read_only = option == "ro"
        if not inner.startswith("/"):
            raise ctx.refuse(
                loc,
                f"expected a target directory; write target: /data (the share is mounted "
                f"there) and push {host}'s files with `pasture data push {host} .`",
                value,
            )
        ctx.warn(
            loc,
            f"the cluster share is mounted at {inner}; the host directory {host} is not: push "
            f"its files to the share with `pasture data push {host} .`",
        )
        target = inner
    if not target.startswith("/"):
        raise ctx.refuse(
            loc,
            f"expected an absolute directory where the share is mounted, e.g. /{target}",
            value,
        )
    return {"source": "", "target": target, "read_only": read_only}
