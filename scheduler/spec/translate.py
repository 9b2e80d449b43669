"""Translate the job files users already have into the pasture spec's dict shape.

- OpenPAI job protocol v2 (``protocolVersion: 2``, ``taskRoles``, ``instances``,
  ``resourcePerInstance: {cpu, memoryMB, gpu, ports}``, ``commands``, ``prerequisites``
  of type dockerimage, ``defaults.virtualCluster``, ``jobRetryCount``,
  ``parameters`` substituted into ``<% $parameters.x %>``), also the v1 names
  ``taskNumber`` / ``cpuNumber`` / ``memoryMB`` / ``gpuNumber`` / ``command``.
  Source: https://github.com/microsoft/openpai-protocol (schemas/v2).
- MARO job files (``components: {<name>: {command, image, num, resources: {cpu, memory,
  gpu}, mount: {target}}}``); MARO memory ``2048m`` means MiB.
  Source: MARO grass-mode job deployment (maro/cli/grass).

Both return a plain dict that :class:`scheduler.spec.model.JobSpec` then validates, so
errors name the pasture field; fields the source format has and pasture does not are
rejected with their source path (:class:`TranslateError`).
"""

from __future__ import annotations

import re
from typing import Any

from scheduler.spec.quantity import parse_memory


class TranslateError(ValueError):
    """A field of an OpenPAI / MARO file cannot be translated. ``loc`` is its path."""

    def __init__(self, loc: str, message: str, given: object = None) -> None:
        super().__init__(f"{loc}: {message}")
        self.loc = loc
        self.message = message
        self.given = given


def _mapping(value: object, loc: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TranslateError(loc, f"expected a mapping, got {type(value).__name__}", value)
    return value


def _reject_unknown(d: dict, known: set[str], loc: str) -> None:
    for key in d:
        if key not in known:
            path = f"{loc}.{key}" if loc else str(key)
            raise TranslateError(path, f"unknown field; expected one of {sorted(known)}", d[key])


def _job_name(name: object) -> object:
    # OpenPAI / MARO allow '_' and upper case; pasture names are DNS labels.
    if isinstance(name, str):
        return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")
    return name


_PARAM = re.compile(r"<%\s*\$parameters\.([A-Za-z0-9_]+)\s*%>")


def is_openpai(doc: dict) -> bool:
    return "taskRoles" in doc or "protocolVersion" in doc


def is_maro(doc: dict) -> bool:
    return "components" in doc


def from_openpai(doc: dict) -> dict[str, Any]:
    """OpenPAI protocol v2 (or v1) job -> pasture spec dict. Raises TranslateError."""
    _reject_unknown(
        doc,
        {
            "protocolVersion",
            "name",
            "type",
            "version",
            "contributor",
            "description",
            "prerequisites",
            "parameters",
            "secrets",
            "jobRetryCount",
            "taskRoles",
            "defaults",
            "extras",
            "deployments",
            "virtualCluster",
            "jobName",
            "image",
            "retryCount",
        },
        "",
    )
    params = {str(k): str(v) for k, v in _mapping(doc.get("parameters"), "parameters").items()}

    def subst(text: str) -> str:
        def repl(m: re.Match) -> str:
            if m.group(1) not in params:
                raise TranslateError(
                    "parameters", f"command uses unknown parameter {m.group(1)!r}", sorted(params)
                )
            return params[m.group(1)]

        return _PARAM.sub(repl, text)

    images: dict[str, str] = {}
    for i, pre in enumerate(doc.get("prerequisites") or []):
        pre = _mapping(pre, f"prerequisites[{i}]")
        if pre.get("type") == "dockerimage":
            images[str(pre.get("name"))] = str(pre.get("uri"))
    defaults = _mapping(doc.get("defaults"), "defaults")
    vc = defaults.get("virtualCluster") or doc.get("virtualCluster") or "default"
    roles: dict[str, Any] = {}
    for name, tr in _mapping(doc.get("taskRoles"), "taskRoles").items():
        loc = f"taskRoles.{name}"
        tr = _mapping(tr, loc)
        _reject_unknown(
            tr,
            {
                "instances",
                "taskNumber",
                "dockerImage",
                "resourcePerInstance",
                "commands",
                "command",
                "completion",
                "taskRetryCount",
                "minFailedInstances",
                "minSucceededInstances",
                "cpuNumber",
                "memoryMB",
                "gpuNumber",
                "shmMB",
                "name",
                "portList",
                "extraContainerOptions",
            },
            loc,
        )
        res = _mapping(tr.get("resourcePerInstance"), f"{loc}.resourcePerInstance")
        _reject_unknown(res, {"cpu", "memoryMB", "gpu", "ports"}, f"{loc}.resourcePerInstance")
        commands = tr.get("commands", tr.get("command"))
        if isinstance(commands, list):
            command = "\n".join(subst(str(c)) for c in commands)
        elif commands is None:
            command = ""
        else:
            command = subst(str(commands))
        role: dict[str, Any] = {
            "replicas": tr.get("instances", tr.get("taskNumber", 1)),
            "resources": {
                "cpu": res.get("cpu", tr.get("cpuNumber", 1)),
                "memory": f"{res.get('memoryMB', tr.get('memoryMB', 1024))}Mi",
                "gpu": res.get("gpu", tr.get("gpuNumber", 0)),
            },
            "command": command,
        }
        ports = res.get("ports")
        if ports:
            role["ports"] = list(_mapping(ports, f"{loc}.resourcePerInstance.ports"))
        image_ref = tr.get("dockerImage")
        if image_ref is not None:
            if str(image_ref) not in images:
                raise TranslateError(
                    f"{loc}.dockerImage",
                    f"no dockerimage prerequisite named {image_ref!r}",
                    image_ref,
                )
            role["image"] = images[str(image_ref)]
        roles[str(name)] = role
    spec: dict[str, Any] = {
        "name": _job_name(doc.get("name", doc.get("jobName"))),
        "vc": vc,
        "roles": roles,
        "retry": {"max_attempts": int(doc.get("jobRetryCount", doc.get("retryCount", 0)) or 0) + 1},
    }
    if doc.get("image"):
        spec["image"] = doc["image"]
    return spec


def from_maro(doc: dict) -> dict[str, Any]:
    """MARO job -> pasture spec dict (memory numbers / ``m`` suffix are MiB). Raises
    TranslateError."""
    _reject_unknown(doc, {"mode", "name", "allocation", "components", "tags"}, "")
    roles: dict[str, Any] = {}
    mounts: list[dict[str, str]] = []
    for name, comp in _mapping(doc.get("components"), "components").items():
        loc = f"components.{name}"
        comp = _mapping(comp, loc)
        _reject_unknown(comp, {"command", "image", "mount", "num", "resources", "tags"}, loc)
        res = _mapping(comp.get("resources"), f"{loc}.resources")
        _reject_unknown(res, {"cpu", "memory", "gpu"}, f"{loc}.resources")
        role: dict[str, Any] = {
            "replicas": comp.get("num", 1),
            "command": comp.get("command"),
            "resources": {"cpu": res.get("cpu", 1), "gpu": res.get("gpu", 0)},
        }
        if "memory" in res:
            try:
                role["resources"]["memory"] = parse_memory(res["memory"], mib=True)
            except ValueError as exc:
                raise TranslateError(f"{loc}.resources.memory", str(exc), res["memory"]) from exc
        if comp.get("image"):
            role["image"] = comp["image"]
        mount = _mapping(comp.get("mount"), f"{loc}.mount")
        if mount.get("target") and {"source": "", "target": mount["target"]} not in mounts:
            mounts.append({"source": "", "target": str(mount["target"])})
        roles[str(name)] = role
    spec: dict[str, Any] = {"name": _job_name(doc.get("name")), "roles": roles}
    if mounts:
        spec["mounts"] = mounts
    return spec
