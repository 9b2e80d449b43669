"""OpenPAI job protocol v1 (the JSON of OpenPAI <= 0.14, also written as YAML).

Source: microsoft/pai docs/job_tutorial.md ("Json config file for job submission") and
examples/*/*.json. Detected by ``jobName`` or a ``taskRoles`` list.

Field map (docs/compat.md has the table):
    jobName -> name; image -> image; virtualCluster -> vc; retryCount -> retry.max_attempts
    (retryCount + 1; -1/-2, unlimited, is 100); jobEnvs -> env; gpuType -> every role's
    resources.gpu_model;
    codeDir -> code_dir (share path, copied to ./code; hdfs refused); dataDir / outputDir ->
    env PAI_DATA_DIR / PAI_OUTPUT_DIR (passed through); taskRoles[i]: name, taskNumber ->
    replicas, cpuNumber / memoryMB / gpuNumber -> resources, shmMB -> shm, portList ->
    ports, minSucceededTaskCount / minFailedTaskCount -> completion, command.
    authFile: empty is ignored; credentials are refused (nodes run images pushed to them).
"""

from __future__ import annotations

from typing import Any

from scheduler.spec.formats.common import (
    Context,
    as_int,
    code_dir,
    completion_counts,
    is_hdfs,
    job_name,
)

FORMAT = "OpenPAI v1"

_JOB_IGNORED = {
    "description": "documentation only",
    "isDebug": "OpenPAI debug mode has no meaning here",
    "extras": "OpenPAI plugin data; no pasture plugin reads it",
}
_ROLE_IGNORED = {"description": "documentation only"}
_ROLE_ORIGINS = {
    "replicas": "taskNumber",
    "resources.cpu": "cpuNumber",
    "resources.memory": "memoryMB",
    "resources.gpu": "gpuNumber",
    "shm": "shmMB",
    "ports": "portList",
    "command": "command",
    "completion.min_succeeded": "minSucceededTaskCount",
    "completion.min_failed": "minFailedTaskCount",
}


def is_openpai_v1(doc: dict[str, Any]) -> bool:
    """A v1 job: ``jobName``, or ``taskRoles`` given as a list."""
    return "jobName" in doc or isinstance(doc.get("taskRoles"), list)


def translate(doc: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """OpenPAI v1 job -> pasture spec dict. Raises TranslateError naming the v1 field."""
    ctx.check_fields(
        doc,
        "",
        honoured={
            "jobName",
            "image",
            "codeDir",
            "dataDir",
            "outputDir",
            "taskRoles",
            "jobEnvs",
            "retryCount",
            "virtualCluster",
            "gpuType",
            "killAllOnCompletedTaskNumber",
            "authFile",
        },
        ignored=_JOB_IGNORED,
    )
    auth = doc.get("authFile")
    if auth not in (None, ""):  # "" (no credentials at all) is what many examples carry
        raise ctx.refuse(
            "authFile",
            "private registry credentials are not read here: make the image available to "
            f"the nodes with `pasture image push {doc.get('image') or 'IMAGE'}` and drop "
            'authFile (or set it to "")',
            auth,
        )
    gpu_type = doc.get("gpuType")
    roles: dict[str, Any] = {}
    task_roles = doc.get("taskRoles")
    if isinstance(task_roles, dict):  # tolerated: a mapping name -> role
        items = [
            ({"name": k, **ctx.mapping(v, f"taskRoles.{k}")}, f"taskRoles.{k}")
            for k, v in task_roles.items()
        ]
    else:
        items = [
            (ctx.mapping(tr, f"taskRoles[{i}]"), f"taskRoles[{i}]")
            for i, tr in enumerate(ctx.sequence(task_roles, "taskRoles"))
        ]
    if not items:
        raise ctx.refuse("taskRoles", "expected at least one task role")
    for key, src in (
        ("name", "jobName"),
        ("image", "image"),
        ("vc", "virtualCluster"),
        ("retry", "retryCount"),
        ("env", "jobEnvs"),
        ("code_dir", "codeDir"),
        ("min_succeeded", "killAllOnCompletedTaskNumber"),
    ):
        ctx.origin(key, src)
    for tr, loc in items:
        ctx.origins_under(f"roles.{tr.get('name')}", loc, _ROLE_ORIGINS)
        if gpu_type:
            ctx.origin(f"roles.{tr.get('name')}.resources.gpu_model", "gpuType")
        name, role = _role(tr, loc, ctx)
        if gpu_type:
            role["resources"]["gpu_model"] = str(gpu_type)
        if name in roles:
            raise ctx.refuse(f"{loc}.name", f"duplicate task role name {name!r}", name)
        roles[name] = role
    spec: dict[str, Any] = {
        "name": job_name(doc.get("jobName"), ctx, "jobName"),
        "roles": roles,
    }
    if doc.get("image"):
        spec["image"] = doc["image"]
    if doc.get("virtualCluster"):
        spec["vc"] = doc["virtualCluster"]
    if doc.get("retryCount") is not None:
        retries = as_int(doc["retryCount"], ctx, "retryCount", minimum=-2)
        if retries < 0:  # -1 / -2: OpenPAI retries without limit
            ctx.warn("retryCount", f"{retries} (retry without limit) is capped at 100 attempts")
            retries = 99
        spec["retry"] = {"max_attempts": retries + 1}
    env = {str(k): str(v) for k, v in ctx.mapping(doc.get("jobEnvs"), "jobEnvs").items()}
    if doc.get("codeDir"):
        spec["code_dir"] = code_dir(doc["codeDir"], ctx, "codeDir", spec["name"])
    for key, var in (("dataDir", "PAI_DATA_DIR"), ("outputDir", "PAI_OUTPUT_DIR")):
        value = doc.get(key)
        if value:
            if not isinstance(value, str):
                raise ctx.refuse(key, "expected a path", value)
            if is_hdfs(value):
                ctx.warn(key, f"an HDFS path; pasture has no HDFS: {var} is set to it unchanged")
            env[var] = value
    if env:
        spec["env"] = env
    kill = doc.get("killAllOnCompletedTaskNumber")
    if kill not in (None, 0):
        spec["min_succeeded"] = as_int(kill, ctx, "killAllOnCompletedTaskNumber", minimum=1)
    return spec


def _role(tr: dict[str, Any], loc: str, ctx: Context) -> tuple[str, dict[str, Any]]:
    ctx.check_fields(
        tr,
        loc,
        honoured={
            "name",
            "taskNumber",
            "cpuNumber",
            "memoryMB",
            "gpuNumber",
            "shmMB",
            "portList",
            "minSucceededTaskCount",
            "minFailedTaskCount",
            "command",
        },
        ignored=_ROLE_IGNORED,
    )
    name = tr.get("name")
    if not isinstance(name, str) or not name:
        raise ctx.refuse(f"{loc}.name", "expected a task role name", name)
    command = tr.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ctx.refuse(f"{loc}.command", "expected a command", command)
    role: dict[str, Any] = {
        "replicas": as_int(tr.get("taskNumber", 1), ctx, f"{loc}.taskNumber", minimum=1),
        "resources": {
            "cpu": tr.get("cpuNumber", 1),
            "memory": f"{as_int(tr.get('memoryMB', 1024), ctx, f'{loc}.memoryMB', minimum=1)}Mi",
            "gpu": tr.get("gpuNumber", 0),
        },
        "command": command,
    }
    if tr.get("shmMB") is not None:
        role["shm"] = f"{as_int(tr['shmMB'], ctx, f'{loc}.shmMB', minimum=1)}Mi"
    ports = []
    for j, p in enumerate(ctx.sequence(tr.get("portList"), f"{loc}.portList")):
        ploc = f"{loc}.portList[{j}]"
        p = ctx.mapping(p, ploc)
        ctx.check_fields(
            p,
            ploc,
            honoured={"label", "portNumber"},
            ignored={
                "beginAt": "pasture picks free ports; read them from "
                "PAI_PORT_LIST_* / PAI_<role>_<i>_<label>_PORT"
            },
        )
        if as_int(p.get("portNumber", 1), ctx, f"{ploc}.portNumber", minimum=1) != 1:
            raise ctx.refuse(
                f"{ploc}.portNumber",
                "one port per label here; declare one label per port",
                p.get("portNumber"),
            )
        ports.append(str(p.get("label")))
    if ports:
        role["ports"] = ports
    completion = completion_counts(
        tr.get("minSucceededTaskCount"),
        tr.get("minFailedTaskCount"),
        role["replicas"],
        ctx,
        (f"{loc}.minSucceededTaskCount", f"{loc}.minFailedTaskCount"),
    )
    if completion:
        role["completion"] = completion
    return name, role
