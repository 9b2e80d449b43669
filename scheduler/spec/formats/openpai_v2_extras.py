"""OpenPAI protocol v2 ``extras``: gangAllocation, hivedScheduler, runtime plugins (ssh,
teamwise_storage, tensorboard), portal data. See :mod:`scheduler.spec.formats.openpai_v2`."""

from __future__ import annotations

from typing import Any

from scheduler.spec.formats.common import Context

_PRIORITY = {"crit": "critical", "prod": "high", "test": "low", "oppo": "opportunistic"}
_HIVED_WARNED = {
    "affinityGroupName": "HiveD affinity group {value}: pasture places every task of the job "
    "as one gang (all or none), but not inside one HiveD cell: the tasks of {role} may land "
    "on any nodes that fit, not on one rack or buddy cell",
    "pinnedCellId": "HiveD pinned cell {value} is not known here: the tasks of {role} run on "
    "any node of the job's virtual cluster that fits (to keep them on given nodes, label "
    "the nodes and use a pasture spec's node_selector)",
    "reservationId": "HiveD reservation {value} (the older name of a pinned cell) is not "
    "known here: the tasks of {role} run on any node of the job's virtual cluster that fits "
    "(a pasture spec's node_selector keeps them on labelled nodes)",
}
"""HiveD task-role fields accepted with a warning saying what changes
(microsoft/hivedscheduler doc/user-manual.md, example/request/design/request.yaml)."""


def extras(extras: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """OpenPAI v2 ``extras`` -> {priority, sku: {role: gpu model}, ssh, mounts}; raises
    TranslateError for what is not known here (see openpai_v2's docstring)."""
    out: dict[str, Any] = {}
    for key, value in extras.items():
        loc = f"extras.{key}"
        if key == "gangAllocation":
            if not isinstance(value, bool):
                raise ctx.refuse(loc, "expected true or false", value)
        elif key == "hivedScheduler":
            h = ctx.mapping(value, loc)
            ctx.check_fields(
                h,
                loc,
                honoured={"jobPriorityClass", "taskRoles"},
            )
            if h.get("jobPriorityClass") is not None:
                if h["jobPriorityClass"] not in _PRIORITY:
                    raise ctx.refuse(
                        f"{loc}.jobPriorityClass",
                        f"expected one of {sorted(_PRIORITY)}",
                        h["jobPriorityClass"],
                    )
                out["priority"] = _PRIORITY[h["jobPriorityClass"]]
            sku: dict[str, str] = {}
            for rname, r in ctx.mapping(h.get("taskRoles"), f"{loc}.taskRoles").items():
                rloc = f"{loc}.taskRoles.{rname}"
                r = ctx.mapping(r, rloc)
                ctx.check_fields(
                    r,
                    rloc,
                    honoured={"skuType", "gpuType", *_HIVED_WARNED},
                    ignored={"skuNum": "HiveD SKU count; resourcePerInstance is what is requested"},
                )
                for key, what in _HIVED_WARNED.items():
                    if r.get(key) not in (None, ""):
                        ctx.warn(f"{rloc}.{key}", what.format(value=r[key], role=rname))
                model = r.get("skuType") or r.get("gpuType")
                if model:
                    sku[str(rname)] = str(model)
            out["sku"] = sku
        elif key == "com.microsoft.pai.runtimeplugin":
            for i, plugin in enumerate(ctx.sequence(value, loc)):
                ploc = f"{loc}[{i}]"
                plugin = ctx.mapping(plugin, ploc)
                name = plugin.get("plugin")
                if name == "ssh":
                    params = ctx.mapping(plugin.get("parameters"), f"{ploc}.parameters")
                    if params.get("jobssh"):
                        out["ssh"] = True
                    else:  # OpenPAI: no job key, no ssh between the tasks
                        ctx.warn(
                            f"{ploc}.parameters.jobssh",
                            "without jobssh: true there is no ssh between the job's tasks",
                        )
                    if params.get("sshbarrier"):
                        ctx.warn(
                            f"{ploc}.parameters.sshbarrier",
                            "commands start when their own task is up, not when every task's "
                            "sshd answers; wait in the command (or use depends_on) if needed",
                        )
                    if params.get("userssh"):
                        ctx.warn(
                            f"{ploc}.parameters.userssh",
                            "user ssh keys are not installed; use `pasture job ssh`",
                        )
                elif name == "cmd":
                    _cmd_plugin(plugin, ploc, out, ctx)
                elif name == "tensorboard":
                    ctx.warn(ploc, "the tensorboard runtime plugin is not run here")
                elif name == "teamwise_storage":
                    params = ctx.mapping(plugin.get("parameters"), f"{ploc}.parameters")
                    names = ctx.sequence(
                        params.get("storageConfigNames"), f"{ploc}.parameters.storageConfigNames"
                    )
                    for storage in names:
                        out.setdefault("mounts", []).append(
                            {
                                "source": str(storage),
                                "target": f"/mnt/{storage}",
                                "read_only": False,
                            }
                        )
                    ctx.warn(
                        ploc,
                        f"team storage {[str(n) for n in names]} is the share directory of the "
                        "same name, mounted at /mnt/<name> as OpenPAI does",
                    )
                else:
                    raise ctx.refuse(
                        f"{ploc}.plugin",
                        "only the ssh, cmd, teamwise_storage and tensorboard runtime plugins "
                        "are known here: drop this one (and do what it did in the commands)",
                        name,
                    )
        elif key in ("submitFrom", "jobStatusChangeNotification", "virtualGroup"):
            ctx.warn(loc, "OpenPAI web portal / notification data; no meaning here")
        else:
            raise ctx.refuse(
                loc,
                "unknown extras field (known: gangAllocation, hivedScheduler, "
                "com.microsoft.pai.runtimeplugin, submitFrom, jobStatusChangeNotification, "
                "virtualGroup): drop it",
                value,
            )
    return out


def _cmd_plugin(plugin: dict[str, Any], loc: str, out: dict[str, Any], ctx: Context) -> None:
    """OpenPAI's ``cmd`` runtime plugin (microsoft/openpai-runtime src/plugins/cmd/init.py):
    ``parameters.preCommands`` / ``postCommands``, or ``parameters.callbacks`` with events
    ``containerStarts`` (pre) and ``containerEnds`` (post), never both forms; optional
    ``taskroles`` (the roles it applies to, default all). Adds ``{"cmd": [(roles or None,
    pre, post)]}`` to ``out``. Raises TranslateError for another shape."""
    ctx.check_fields(plugin, loc, honoured={"plugin", "parameters", "taskroles"})
    params = ctx.mapping(plugin.get("parameters"), f"{loc}.parameters")
    ctx.check_fields(
        params, f"{loc}.parameters", honoured={"preCommands", "postCommands", "callbacks"}
    )
    pre: list[str] = []
    post: list[str] = []
    if params.get("callbacks") is not None:
        if params.get("preCommands") is not None or params.get("postCommands") is not None:
            raise ctx.refuse(
                f"{loc}.parameters.callbacks",
                "callbacks and preCommands/postCommands together (OpenPAI's runtime refuses "
                "both): keep one form",
            )
        for j, cb in enumerate(ctx.sequence(params["callbacks"], f"{loc}.parameters.callbacks")):
            cloc = f"{loc}.parameters.callbacks[{j}]"
            cb = ctx.mapping(cb, cloc)
            ctx.check_fields(cb, cloc, honoured={"event", "commands"})
            event = cb.get("event")
            if event not in ("containerStarts", "containerEnds"):
                raise ctx.refuse(
                    f"{cloc}.event", "expected containerStarts or containerEnds", event
                )
            commands = [str(c) for c in ctx.sequence(cb.get("commands"), f"{cloc}.commands")]
            (pre if event == "containerStarts" else post).extend(commands)
    else:
        pre = [
            str(c) for c in ctx.sequence(params.get("preCommands"), f"{loc}.parameters.preCommands")
        ]
        post = [
            str(c)
            for c in ctx.sequence(params.get("postCommands"), f"{loc}.parameters.postCommands")
        ]
    roles = plugin.get("taskroles")
    names = None if roles is None else [str(r) for r in ctx.sequence(roles, f"{loc}.taskroles")]
    out.setdefault("cmd", []).append((names, pre, post))
