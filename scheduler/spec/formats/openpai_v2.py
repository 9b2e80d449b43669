"""OpenPAI job protocol v2 (``protocolVersion: 2``).

Source: microsoft/openpai-protocol schemas/v2/schema.yaml and microsoft/pai
docs/manual/cluster-user (runtime plugins). Every field of the schema is honoured or
refused by name; see docs/compat.md for the table. In short:

- ``parameters`` and the selected prerequisites (``$data``, ``$output``, ``$script``: name,
  uri, uri[i], version, contributor...) are substituted into ``<% ... %>`` references of
  commands and deployment commands; a reference left unresolved is refused.
- ``secrets``: each ``<% $secrets.NAME %>`` of a command (role commands, deployment
  pre/postCommands, cmd-plugin callbacks) becomes ``${PASTURE_SECRET_NAME}``; the values go
  to the spec's ``secrets`` mapping, which parsing splits off and the API seals
  (:mod:`scheduler.spec.secrets`). A reference to an undeclared secret, or one in any other
  field, is refused. A dockerimage's ``auth`` (where the protocol also allows secrets) is
  accepted with a warning: nodes run images they already have (``pasture image push``).
- ``deployments`` + ``defaults.deployment``: the chosen deployment's preCommands run before
  and postCommands after the role's commands (one shell script; post only when the
  commands succeeded, the task's exit code stays theirs).
- ``prerequisites`` with ``plugin: com.microsoft.pai.runtimeplugin.cmd`` (``callbacks``
  taskStarts / taskSucceeds, ``require``, ``failurePolicy``) referenced by a role's
  ``prerequisites`` list: taskStarts commands first (in order, required ones before),
  taskSucceeds commands last (reverse order), ``failurePolicy: ignore`` -> ``|| true``.
- ``completion`` -> role completion; ``taskRetryCount`` -> max_task_retries;
  ``jobRetryCount`` -> retry.max_attempts - 1; ``extraContainerOptions.shmMB`` -> shm;
  ``extras.gangAllocation: false`` -> every role's min_available 1;
  ``extras.hivedScheduler``: jobPriorityClass -> priority, taskRoles.<r>.skuType (or the
  older gpuType) -> gpu_model;
  ``extras.com.microsoft.pai.runtimeplugin``: ssh with jobssh -> ssh, teamwise_storage ->
  mounts of the share directory named like each storage config at /mnt/<name>, tensorboard
  warned, others refused.
"""

from __future__ import annotations

import re
from typing import Any

from scheduler.spec.formats.common import Context, as_int, completion_counts, job_name
from scheduler.spec.formats.openpai_v2_extras import extras as extras_of
from scheduler.spec.secrets import REF, find_ref, shell_ref

FORMAT = "OpenPAI v2"

_REF = re.compile(r"<%\s*\$([A-Za-z_]+)((?:\.[A-Za-z0-9_]+|\[[0-9]+\])*)\s*%>")
_CMD_PLUGIN = "com.microsoft.pai.runtimeplugin.cmd"
_CALLBACK_EVENTS = ["taskStarts", "taskSucceeds"]
_ROLE_ORIGINS = {
    "replicas": "instances",
    "resources": "resourcePerInstance",
    "resources.cpu": "resourcePerInstance.cpu",
    "resources.memory": "resourcePerInstance.memoryMB",
    "resources.gpu": "resourcePerInstance.gpu",
    "ports": "resourcePerInstance.ports",
    "command": "commands",
    "image": "dockerImage",
    "completion.min_succeeded": "completion.minSucceededInstances",
    "completion.min_failed": "completion.minFailedInstances",
    "max_task_retries": "taskRetryCount",
    "shm": "extraContainerOptions.shmMB",
}
_INFO_IGNORED = {
    "version": "component version: documentation only",
    "contributor": "documentation only",
    "description": "documentation only",
}


def is_openpai_v2(doc: dict[str, Any]) -> bool:
    """A v2 job: ``protocolVersion`` 2 (or ``taskRoles`` given as a mapping)."""
    return str(doc.get("protocolVersion", "")) == "2" or isinstance(doc.get("taskRoles"), dict)


def translate(doc: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """OpenPAI v2 job -> pasture spec dict. Raises TranslateError naming the v2 field."""
    secrets = doc.get("secrets") or {}
    if not isinstance(secrets, dict):  # never echoed: it holds values
        raise ctx.refuse("secrets", f"expected a mapping, got {type(secrets).__name__}")
    misplaced = find_ref(doc, "", _secret_fields(doc))
    if misplaced:
        raise ctx.refuse(
            misplaced[0],
            f"references secret {misplaced[1]!r}; a secret may appear only in commands, "
            "deployments' pre/postCommands, prerequisites' callbacks and a dockerimage's auth",
            misplaced[1],
        )
    ctx.check_fields(
        doc,
        "",
        honoured={
            "protocolVersion",
            "name",
            "type",
            "prerequisites",
            "parameters",
            "jobRetryCount",
            "taskRoles",
            "defaults",
            "extras",
            "deployments",
            "secrets",
        },
        ignored=_INFO_IGNORED,
    )
    if doc.get("type") not in (None, "job"):
        raise ctx.refuse("type", "expected 'job'", doc.get("type"))
    if str(doc.get("protocolVersion", "2")) != "2":
        raise ctx.refuse("protocolVersion", "expected 2", doc.get("protocolVersion"))
    params = ctx.mapping(doc.get("parameters"), "parameters")
    prereqs = _prerequisites(doc, ctx)
    defaults = ctx.mapping(doc.get("defaults"), "defaults")
    ctx.check_fields(defaults, "defaults", honoured={"virtualCluster", "deployment"})
    deployment = _deployment(doc, defaults, ctx)
    extras = ctx.mapping(doc.get("extras"), "extras")
    hived = extras_of(extras, ctx)
    spec: dict[str, Any] = {"name": job_name(doc.get("name"), ctx, "name"), "roles": {}}
    if secrets:
        spec["secrets"] = dict(secrets)
    if defaults.get("virtualCluster"):
        spec["vc"] = defaults["virtualCluster"]
    if doc.get("jobRetryCount") is not None:
        n = as_int(doc["jobRetryCount"], ctx, "jobRetryCount", minimum=0)
        spec["retry"] = {"max_attempts": n + 1}
    if hived.get("priority"):
        spec["priority"] = hived["priority"]
        if hived["priority"] == "opportunistic":
            spec["preemptible"] = True
    if hived.get("ssh"):
        spec["ssh"] = True
    if hived.get("mounts"):
        spec["mounts"] = hived["mounts"]
    task_roles = ctx.mapping(doc.get("taskRoles"), "taskRoles")
    if not task_roles:
        raise ctx.refuse("taskRoles", "expected at least one task role")
    for key, src in (
        ("name", "name"),
        ("vc", "defaults.virtualCluster"),
        ("retry", "jobRetryCount"),
        ("priority", "extras.hivedScheduler.jobPriorityClass"),
        ("secrets", "secrets"),
        ("mounts", "extras.com.microsoft.pai.runtimeplugin"),
    ):
        ctx.origin(key, src)
    for name, tr in task_roles.items():
        loc = f"taskRoles.{name}"
        ctx.origins_under(f"roles.{name}", loc, _ROLE_ORIGINS)
        ctx.origin(
            f"roles.{name}.resources.gpu_model", f"extras.hivedScheduler.taskRoles.{name}.skuType"
        )
        deploy = dict(deployment.get(name, {}))
        for roles, pre, post in hived.get("cmd", []):  # the cmd runtime plugin
            if roles is None or name in roles:
                deploy["preCommands"] = [*(deploy.get("preCommands") or []), *pre]
                deploy["postCommands"] = [*post, *(deploy.get("postCommands") or [])]
        role = _role(
            str(name),
            ctx.mapping(tr, loc),
            loc,
            ctx,
            {"parameters": params, "secrets": secrets},
            prereqs,
            deploy,
        )
        sku = hived.get("sku", {}).get(name)
        if sku:
            role["resources"]["gpu_model"] = sku
        if extras.get("gangAllocation") is False:
            role["min_available"] = 1
        spec["roles"][str(name)] = role
    for name in deployment:
        if name not in task_roles:
            raise ctx.refuse(
                f"deployments.taskRoles.{name}", f"no task role {name!r}", list(task_roles)
            )
    return spec


def _prerequisites(doc: dict[str, Any], ctx: Context) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, pre in enumerate(ctx.sequence(doc.get("prerequisites"), "prerequisites")):
        loc = f"prerequisites[{i}]"
        pre = ctx.mapping(pre, loc)
        ctx.check_fields(
            pre,
            loc,
            honoured={
                "protocolVersion",
                "name",
                "type",
                "uri",
                "plugin",
                "callbacks",
                "require",
                "failurePolicy",
                "auth",
            },
            ignored=_INFO_IGNORED,
        )
        _cmd_plugin(pre, loc, ctx)
        kind = pre.get("type")
        if kind not in ("dockerimage", "data", "script", "output"):
            raise ctx.refuse(f"{loc}.type", "expected dockerimage, data, script or output", kind)
        if pre.get("auth") is not None:  # credentials: never echoed, never checked by field
            if kind != "dockerimage":
                raise ctx.refuse(f"{loc}.auth", "only a dockerimage prerequisite has auth")
            ctx.warn(
                f"{loc}.auth",
                "registry credentials are not used: nodes run images they already have "
                "(`pasture image push IMAGE`); secrets it references go nowhere",
            )
        name = pre.get("name")
        if not isinstance(name, str) or not name:
            raise ctx.refuse(f"{loc}.name", "expected a name", name)
        if name in out:
            raise ctx.refuse(f"{loc}.name", f"duplicate prerequisite {name!r}", name)
        if kind == "dockerimage" and not isinstance(pre.get("uri"), str):
            raise ctx.refuse(f"{loc}.uri", "expected an image reference", pre.get("uri"))
        out[name] = pre
    return out


def _cmd_plugin(pre: dict[str, Any], loc: str, ctx: Context) -> None:
    """Check a prerequisite's ``plugin: com.microsoft.pai.runtimeplugin.cmd`` fields:
    callbacks [{event: taskStarts | taskSucceeds, commands}], require, failurePolicy."""
    plugin = pre.get("plugin")
    if plugin is None:
        for key in ("callbacks", "require", "failurePolicy"):
            if pre.get(key) is not None:
                raise ctx.refuse(f"{loc}.{key}", f"needs plugin: {_CMD_PLUGIN}", pre[key])
        return
    if plugin != _CMD_PLUGIN:
        raise ctx.refuse(f"{loc}.plugin", f"only {_CMD_PLUGIN} is known here", plugin)
    if pre.get("failurePolicy") not in (None, "fail", "ignore"):
        raise ctx.refuse(f"{loc}.failurePolicy", "expected fail or ignore", pre["failurePolicy"])
    for j, cb in enumerate(ctx.sequence(pre.get("callbacks"), f"{loc}.callbacks")):
        cloc = f"{loc}.callbacks[{j}]"
        cb = ctx.mapping(cb, cloc)
        ctx.check_fields(cb, cloc, honoured={"event", "commands"})
        if cb.get("event") not in _CALLBACK_EVENTS:
            raise ctx.refuse(
                f"{cloc}.event", f"expected one of {_CALLBACK_EVENTS}", cb.get("event")
            )
        ctx.sequence(cb.get("commands"), f"{cloc}.commands")
    for name in ctx.sequence(pre.get("require"), f"{loc}.require"):
        if not isinstance(name, str):
            raise ctx.refuse(f"{loc}.require", "expected prerequisite names", name)


def _callbacks(
    names: list[Any], prereqs: dict[str, dict[str, Any]], ctx: Context, loc: str
) -> tuple[list[str], list[str]]:
    """A role's ``prerequisites`` (with what they ``require``, first) as (taskStarts
    commands in order, taskSucceeds commands in reverse order)."""
    ordered: list[str] = []

    def visit(name: object, path: tuple[str, ...]) -> None:
        if not isinstance(name, str) or name not in prereqs:
            raise ctx.refuse(loc, f"no prerequisite named {name!r}", name)
        if name in path:
            raise ctx.refuse(loc, f"prerequisites require each other: {' -> '.join(path)}", name)
        for dep in prereqs[name].get("require") or []:
            visit(dep, (*path, name))
        if name not in ordered:
            ordered.append(name)

    for name in names:
        visit(name, ())
    starts: list[str] = []
    succeeds: list[str] = []
    for name in ordered:
        pre = prereqs[name]
        ignore = pre.get("failurePolicy") == "ignore"
        for cb in pre.get("callbacks") or []:
            cmds = [str(c) for c in cb.get("commands") or []]
            if ignore:
                cmds = [f"{{ {c}\n}} || true" for c in cmds]
            (starts if cb["event"] == "taskStarts" else succeeds).append("\n".join(cmds))
    return [c for c in starts if c], [c for c in reversed(succeeds) if c]


def _script(pre: list[str], main: list[str], post: list[str]) -> str:
    """One shell script: ``pre``, the role's commands, then ``post`` only when the last
    command succeeded; the task's exit code is that of the role's commands (or of post)."""
    if not post:
        return "\n".join([*pre, *main])
    guard = '__pasture_rc=$?; if [ "$__pasture_rc" -ne 0 ]; then exit "$__pasture_rc"; fi'
    return "\n".join([*pre, *main, guard, *post])


def _deployment(
    doc: dict[str, Any], defaults: dict[str, Any], ctx: Context
) -> dict[str, dict[str, Any]]:
    deployments = ctx.sequence(doc.get("deployments"), "deployments")
    chosen = defaults.get("deployment")
    by_name: dict[str, dict[str, Any]] = {}
    for i, d in enumerate(deployments):
        loc = f"deployments[{i}]"
        d = ctx.mapping(d, loc)
        ctx.check_fields(d, loc, honoured={"name", "taskRoles"}, ignored=_INFO_IGNORED)
        roles = ctx.mapping(d.get("taskRoles"), f"{loc}.taskRoles")
        for rname, r in roles.items():
            rloc = f"{loc}.taskRoles.{rname}"
            ctx.check_fields(ctx.mapping(r, rloc), rloc, honoured={"preCommands", "postCommands"})
        by_name[str(d.get("name"))] = roles
    if chosen is None:
        if deployments:
            ctx.warn(
                "deployments",
                "defaults.deployment names none, so none applies (as in OpenPAI)",
            )
        return {}
    if str(chosen) not in by_name:
        raise ctx.refuse("defaults.deployment", f"no deployment named {chosen!r}", list(by_name))
    return {str(k): v or {} for k, v in by_name[str(chosen)].items()}


def _role(
    name: str,
    tr: dict[str, Any],
    loc: str,
    ctx: Context,
    scope: dict[str, Any],
    prereqs: dict[str, dict[str, Any]],
    deployment: dict[str, Any],
) -> dict[str, Any]:
    ctx.check_fields(
        tr,
        loc,
        honoured={
            "instances",
            "completion",
            "taskRetryCount",
            "dockerImage",
            "data",
            "output",
            "script",
            "extraContainerOptions",
            "resourcePerInstance",
            "commands",
            "prerequisites",
        },
    )
    scope = dict(scope)
    for kind in ("data", "output", "script"):
        ref = tr.get(kind)
        if ref is None:
            continue
        if ref not in prereqs or prereqs[ref].get("type") != kind:
            raise ctx.refuse(f"{loc}.{kind}", f"no {kind} prerequisite named {ref!r}", ref)
        scope[kind] = prereqs[ref]

    def subst(text: object, where: str) -> str:
        return _substitute(str(text), scope, ctx, where)

    if isinstance(tr.get("commands"), str):
        commands = [tr["commands"]]
    else:
        commands = ctx.sequence(tr.get("commands"), f"{loc}.commands")
    if not commands:
        raise ctx.refuse(f"{loc}.commands", "expected at least one command")
    lines = [subst(c, f"{loc}.commands[{i}]") for i, c in enumerate(commands)]
    pre = [subst(c, f"deployments.{name}.preCommands") for c in deployment.get("preCommands") or []]
    post = [
        subst(c, f"deployments.{name}.postCommands") for c in deployment.get("postCommands") or []
    ]
    starts, succeeds = _callbacks(
        ctx.sequence(tr.get("prerequisites"), f"{loc}.prerequisites"),
        prereqs,
        ctx,
        f"{loc}.prerequisites",
    )
    where = f"{loc}.prerequisites"
    starts = [_secret_refs(c, scope["secrets"], ctx, where) for c in starts]
    succeeds = [_secret_refs(c, scope["secrets"], ctx, where) for c in succeeds]
    res = ctx.mapping(tr.get("resourcePerInstance"), f"{loc}.resourcePerInstance")
    ctx.check_fields(
        res, f"{loc}.resourcePerInstance", honoured={"cpu", "memoryMB", "gpu", "ports"}
    )
    memory = as_int(
        res.get("memoryMB", 1024), ctx, f"{loc}.resourcePerInstance.memoryMB", minimum=1
    )
    role: dict[str, Any] = {
        "replicas": as_int(tr.get("instances", 1), ctx, f"{loc}.instances", minimum=1),
        "resources": {"cpu": res.get("cpu", 1), "memory": f"{memory}Mi", "gpu": res.get("gpu", 0)},
        "command": _script([*starts, *pre], lines, [*post, *succeeds]),
    }
    ports = ctx.mapping(res.get("ports"), f"{loc}.resourcePerInstance.ports")
    for label, count in ports.items():
        if as_int(count, ctx, f"{loc}.resourcePerInstance.ports.{label}", minimum=0) > 1:
            raise ctx.refuse(
                f"{loc}.resourcePerInstance.ports.{label}",
                "one port per label here; declare one label per port",
                count,
            )
    if ports:
        role["ports"] = [str(p) for p, n in ports.items() if n != 0]
    image_ref = tr.get("dockerImage")
    if image_ref is not None:
        pre_img = prereqs.get(str(image_ref))
        if pre_img is None or pre_img.get("type") != "dockerimage":
            raise ctx.refuse(
                f"{loc}.dockerImage", f"no dockerimage prerequisite named {image_ref!r}", image_ref
            )
        role["image"] = pre_img["uri"]
    completion = ctx.mapping(tr.get("completion"), f"{loc}.completion")
    ctx.check_fields(
        completion, f"{loc}.completion", honoured={"minSucceededInstances", "minFailedInstances"}
    )
    out = completion_counts(
        completion.get("minSucceededInstances"),
        completion.get("minFailedInstances"),
        role["replicas"],
        ctx,
        (f"{loc}.completion.minSucceededInstances", f"{loc}.completion.minFailedInstances"),
    )
    if out:
        role["completion"] = out
    if tr.get("taskRetryCount") is not None:
        role["max_task_retries"] = as_int(
            tr["taskRetryCount"], ctx, f"{loc}.taskRetryCount", minimum=0
        )
    extra = ctx.mapping(tr.get("extraContainerOptions"), f"{loc}.extraContainerOptions")
    ctx.check_fields(
        extra,
        f"{loc}.extraContainerOptions",
        honoured={"shmMB"},
        refused={"infiniband": "InfiniBand devices are not passed to tasks here: drop infiniband"},
    )
    if extra.get("shmMB") is not None:
        role["shm"] = (
            f"{as_int(extra['shmMB'], ctx, f'{loc}.extraContainerOptions.shmMB', minimum=1)}Mi"
        )
    return role


def _substitute(text: str, scope: dict[str, Any], ctx: Context, loc: str) -> str:
    """Replace ``<% $parameters.x %>``, ``<% $data.uri[0] %>``... references."""

    def repl(m: re.Match[str]) -> str:
        root, path = m.group(1), m.group(2)
        if root == "secrets":
            return _secret_refs(m.group(0), scope.get("secrets") or {}, ctx, loc)
        if root not in scope:
            raise ctx.refuse(loc, f"unresolved reference {m.group(0)!r}", m.group(0))
        value: Any = scope[root]
        for part in re.findall(r"\.([A-Za-z0-9_]+)|\[([0-9]+)\]", path):
            key, index = part
            try:
                value = value[key] if key else value[int(index)]
            except (KeyError, IndexError, TypeError):
                raise ctx.refuse(loc, f"unresolved reference {m.group(0)!r}", m.group(0)) from None
        if isinstance(value, dict | list):
            raise ctx.refuse(loc, f"reference {m.group(0)!r} is not a single value", m.group(0))
        return str(value)

    out = _REF.sub(repl, text)
    if "<%" in out:
        raise ctx.refuse(loc, "a '<% ... %>' reference could not be read", text)
    return out


def _secret_refs(text: str, declared: dict[str, Any], ctx: Context, loc: str) -> str:
    """``<% $secrets.NAME %>`` -> ``${PASTURE_SECRET_NAME}`` for each declared NAME; a
    reference to an undeclared secret is refused (the error names it, never a value)."""

    def repl(m: re.Match[str]) -> str:
        if m.group(1) not in declared:
            raise ctx.refuse(
                loc, f"references secret {m.group(1)!r}, not declared in secrets", m.group(1)
            )
        return shell_ref(m.group(1))

    return REF.sub(repl, text)


def _secret_fields(doc: dict[str, Any]) -> frozenset[str]:
    """The locations where the protocol lets a secret reference appear: commands,
    deployments' taskRoles (pre/postCommands), prerequisites' callbacks and auth."""
    out = {"secrets"}
    if isinstance(doc.get("taskRoles"), dict):
        out |= {f"taskRoles.{r}.commands" for r in doc["taskRoles"]}
    for kind in ("deployments", "prerequisites"):
        items = doc.get(kind)
        for i in range(len(items) if isinstance(items, list) else 0):
            out |= {f"{kind}[{i}].taskRoles", f"{kind}[{i}].callbacks", f"{kind}[{i}].auth"}
    return frozenset(out)
