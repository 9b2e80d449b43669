"""OpenPAI protocol v2 ``extras``: gangAllocation, hivedScheduler, runtime plugins (ssh,
teamwise_storage, tensorboard), portal data. See :mod:`scheduler.spec.formats.openpai_v2`."""

from __future__ import annotations

from typing import Any

from scheduler.spec.formats.common import Context

_PRIORITY = {"crit": "critical", "prod": "high", "test": "low", "oppo": "opportunistic"}


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
                    honoured={"skuType", "gpuType"},
                    ignored={"skuNum": "HiveD SKU count; resourcePerInstance is what is requested"},
                    refused={
                        "affinityGroupName": "HiveD affinity groups are not supported: drop "
                        "affinityGroupName (pasture places a job's tasks as one gang)",
                        "pinnedCellId": "HiveD pinned cells are not known here: drop "
                        "pinnedCellId (to keep the role on given nodes, label them and use "
                        "a pasture spec's node_selector)",
                    },
                )
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
                elif name == "tensorboard":
                    ctx.warn(ploc, "the tensorboard runtime plugin is not run here")
                elif name == "teamwise_storage":
                    params = ctx.mapping(plugin.get("parameters"), f"{ploc}.parameters")
                    names = ctx.sequence(
                        params.get("storageConfigNames"), f"{ploc}.parameters.storageConfigNames"
                    )
                    for storage in names:
                        out.setdefault("mounts", []).append(
                            {"source": str(storage), "target": f"/mnt/{storage}"}
                        )
                    ctx.warn(
                        ploc,
                        f"team storage {[str(n) for n in names]} is the share directory of the "
                        "same name, mounted at /mnt/<name> as OpenPAI does",
                    )
                else:
                    raise ctx.refuse(
                        f"{ploc}.plugin",
                        "only the ssh, teamwise_storage and tensorboard runtime plugins are "
                        "known here: drop this one (and do what it did in the commands)",
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
