"""Volcano ``batch.volcano.sh/v1alpha1`` Job.

Source: volcano-sh/volcano pkg/apis (batch/v1alpha1 job types), docs/user-guide and
example/*.yaml. Field map (docs/compat.md has the table):

- metadata.name -> name; spec.queue -> vc; spec.priorityClassName -> priority (a pasture
  priority name, optionally with a ``-priority`` suffix); spec.minAvailable -> min_available
  (job-wide); spec.minSuccess -> min_succeeded; spec.maxRetry -> retry.max_attempts (maxRetry + 1);
  spec.policies / tasks[].policies -> policies.on_events (task rules carry the role);
  spec.plugins: ssh -> ssh, env and svc honoured (their variables and hosts files are always
  given), mpi -> mpi + ssh, pytorch honoured (MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK);
  spec.ttlSecondsAfterFinished -> ttl_after_finished.
- tasks[]: name, replicas, minAvailable -> min_available, maxRetry -> max_task_retries,
  dependsOn.name -> depends_on, template.spec: one container (image, command + args as one
  shell-quoted line; without command: entrypoint (the image's ENTRYPOINT) with args ->
  args and workingDir -> working_dir; workingDir, env name/value, ports -> port names,
  resources.requests/limits cpu, memory, nvidia.com/gpu), nodeSelector -> node_selector,
  restartPolicy OnFailure -> max_task_retries 3 unless set.

Events: PodEvicted -> task_evicted, PodFailed / TaskFailed -> task_failed, TaskCompleted ->
task_completed, Unknown -> unknown, ``*`` -> every event; OutOfSync (a Kubernetes object
update) is warned and dropped. Actions: RestartJob -> restart_job, RestartTask -> restart_role
(Volcano restarts every pod of the task), RestartPod -> restart_task, CompleteJob ->
complete_job, AbortJob / TerminateJob -> terminate_job.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from scheduler.spec.formats.common import Context, as_int, job_name

FORMAT = "Volcano"
API_VERSION = "batch.volcano.sh/v1alpha1"

_EVENTS = {
    "PodEvicted": "task_evicted",
    "PodFailed": "task_failed",
    "TaskFailed": "task_failed",
    "TaskCompleted": "task_completed",
    "Unknown": "unknown",
}
_ACTIONS = {
    "RestartJob": "restart_job",
    "RestartTask": "restart_role",
    "RestartPod": "restart_task",
    "CompleteJob": "complete_job",
    "AbortJob": "terminate_job",
    "TerminateJob": "terminate_job",
}
_PRIORITIES = ("opportunistic", "low", "normal", "high", "critical")
_K8S_META = "Kubernetes object metadata; no meaning here"
_POD_IGNORED = {
    "schedulerName": "pasture schedules every task",
    "terminationGracePeriodSeconds": "pasture stops tasks with its own grace period",
    "imagePullSecrets": "registry credentials are not read; `pasture image push` the image",
    "dnsPolicy": "tasks resolve each other through the discovery environment and hosts files",
    "hostNetwork": "tasks use the node's network here",
    "serviceAccountName": "no Kubernetes API access from tasks",
    "automountServiceAccountToken": "no Kubernetes API access from tasks",
}
_CONTAINER_IGNORED = {
    "imagePullPolicy": "images are pulled when absent",
    "stdin": "tasks have no stdin",
    "tty": "tasks have no terminal",
    "livenessProbe": "probes are not run",
    "readinessProbe": "probes are not run",
    "terminationMessagePath": "the task's log holds its output",
    "terminationMessagePolicy": "the task's log holds its output",
}


def is_volcano(doc: dict[str, Any]) -> bool:
    """A Volcano Job: ``apiVersion: batch.volcano.sh/...`` and ``kind: Job``."""
    return (
        str(doc.get("apiVersion", "")).startswith("batch.volcano.sh/") and doc.get("kind") == "Job"
    )


def translate(doc: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Volcano Job -> pasture spec dict. Raises TranslateError naming the Volcano field."""
    if doc.get("apiVersion") != API_VERSION:
        raise ctx.refuse("apiVersion", f"expected {API_VERSION}", doc.get("apiVersion"))
    ctx.check_fields(
        doc,
        "",
        honoured={"apiVersion", "kind", "metadata", "spec"},
        ignored={"status": "written by Kubernetes"},
    )
    meta = ctx.mapping(doc.get("metadata"), "metadata")
    ctx.check_fields(
        meta,
        "metadata",
        honoured={"name"},
        ignored={k: _K8S_META for k in ("namespace", "labels", "annotations", "generateName")},
    )
    spec = ctx.mapping(doc.get("spec"), "spec")
    ctx.check_fields(
        spec,
        "spec",
        honoured={
            "tasks",
            "minAvailable",
            "maxRetry",
            "queue",
            "priorityClassName",
            "policies",
            "plugins",
            "ttlSecondsAfterFinished",
            "minSuccess",
        },
        ignored={"schedulerName": "pasture schedules every job"},
        refused={
            "volumes": "Kubernetes volumes are not mounted; put data in the cluster share",
            "runningEstimate": "not supported",
            "networkTopology": "not supported",
        },
    )
    out: dict[str, Any] = {"name": job_name(meta.get("name"), ctx, "metadata.name"), "roles": {}}
    if spec.get("queue"):
        out["vc"] = str(spec["queue"])
    if spec.get("priorityClassName"):
        out["priority"] = _priority(spec["priorityClassName"], ctx)
    rules = _policies(spec.get("policies"), "spec.policies", None, ctx)
    _plugins(ctx.mapping(spec.get("plugins"), "spec.plugins"), out, ctx)
    tasks = ctx.sequence(spec.get("tasks"), "spec.tasks")
    if not tasks:
        raise ctx.refuse("spec.tasks", "expected at least one task")
    for i, task in enumerate(tasks):
        loc = f"spec.tasks[{i}]"
        name, role, task_rules = _task(ctx.mapping(task, loc), loc, ctx, spec)
        if name in out["roles"]:
            raise ctx.refuse(f"{loc}.name", f"duplicate task name {name!r}", name)
        out["roles"][name] = role
        rules = task_rules + rules  # a task's own rules are checked before the job's
    if rules:
        out["policies"] = {"on_events": rules}
    if spec.get("minAvailable") is not None:
        n = as_int(spec["minAvailable"], ctx, "spec.minAvailable", minimum=0)
        if n > 0:
            out["min_available"] = n
    if spec.get("minSuccess") is not None:
        out["min_succeeded"] = as_int(spec["minSuccess"], ctx, "spec.minSuccess", minimum=1)
    retries = spec.get("maxRetry")
    if retries is not None:
        out["retry"] = {"max_attempts": as_int(retries, ctx, "spec.maxRetry", minimum=0) + 1}
    elif any(r["action"] in ("restart_job", "restart_role") for r in rules):
        out["retry"] = {"max_attempts": 4}  # Volcano's default maxRetry is 3
    if spec.get("ttlSecondsAfterFinished") is not None:
        out["ttl_after_finished"] = as_int(
            spec["ttlSecondsAfterFinished"], ctx, "spec.ttlSecondsAfterFinished", minimum=0
        )
    return out


def _priority(value: object, ctx: Context) -> str:
    name = str(value).lower().removesuffix("-priority").removesuffix("priority").strip("-")
    if name in _PRIORITIES:
        return name
    raise ctx.refuse(
        "spec.priorityClassName",
        f"pasture priority classes are {list(_PRIORITIES)} (a '-priority' suffix is allowed)",
        value,
    )


def _policies(value: object, loc: str, role: str | None, ctx: Context) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for i, p in enumerate(ctx.sequence(value, loc)):
        ploc = f"{loc}[{i}]"
        p = ctx.mapping(p, ploc)
        ctx.check_fields(
            p,
            ploc,
            honoured={"event", "events", "action"},
            refused={
                "exitCode": "exit-code policies are not supported; use retry.retry_on_exit_codes "
                "in a pasture spec",
                "timeout": "policy timeouts are not supported",
            },
        )
        events = ctx.sequence(p.get("events"), f"{ploc}.events") or [p.get("event")]
        action = p.get("action")
        if action not in _ACTIONS:
            raise ctx.refuse(f"{ploc}.action", f"expected one of {sorted(_ACTIONS)}", action)
        for event in events:
            names = sorted(set(_EVENTS.values())) if event in ("*", "AnyEvent") else None
            if names is None:
                if event == "OutOfSync":
                    ctx.warn(
                        f"{ploc}.event", "OutOfSync (a Kubernetes object update) never happens here"
                    )
                    continue
                if event not in _EVENTS:
                    raise ctx.refuse(
                        f"{ploc}.event",
                        f"expected one of {sorted([*_EVENTS, 'OutOfSync', '*'])}",
                        event,
                    )
                names = [_EVENTS[event]]
            for e in names:
                rule = {"event": e, "action": _ACTIONS[action]}
                if role is not None:
                    rule["role"] = role
                if rule not in rules:
                    rules.append(rule)
    return rules


_RAY = (
    "the ray plugin replaces the head and worker containers' commands with `ray start` on "
    "fixed ports (6379, 8265, 10001) and adds a Kubernetes Service, which pasture does not "
    "do for you; drop the plugin and give the commands yourself with pasture's ports: head "
    "ports [gcs, dashboard, client_server] and command [sh, -c, 'ray start --head --block "
    "--dashboard-host=0.0.0.0 --port=$PASTURE_PORT_GCS --dashboard-port=$PASTURE_PORT_DASHBOARD "
    "--ray-client-server-port=$PASTURE_PORT_CLIENT_SERVER'], worker command [sh, -c, "
    "'ray start --block --address=$PASTURE_ROLE_HEAD_HOSTS'] (docs/compat.md)"
)
"""Why ``plugins.ray`` is refused (volcano-sh/volcano pkg/controllers/job/plugins/
distributed-framework/ray/ray.go: OnPodCreate sets the commands, OnJobAdd the Service)."""


def _plugins(plugins: dict[str, Any], out: dict[str, Any], ctx: Context) -> None:
    for name, args in plugins.items():
        loc = f"spec.plugins.{name}"
        args = ctx.sequence(args, loc)
        if name in ("env", "svc"):
            if args:
                ctx.warn(loc, f"plugin arguments {args} have no meaning here")
        elif name == "ssh":
            out["ssh"] = True
            if args:
                ctx.warn(loc, f"plugin arguments {args} have no meaning here")
        elif name == "mpi":
            out["mpi"] = True
            out["ssh"] = True
        elif name == "pytorch":
            if args:
                ctx.warn(loc, f"arguments {args}: MASTER_ADDR is the first role's task 0 here")
        elif name == "ray":
            raise ctx.refuse(loc, _RAY, name)
        else:
            raise ctx.refuse(
                loc, "only the env, svc, ssh, mpi and pytorch plugins are known here", name
            )


def _task(
    task: dict[str, Any], loc: str, ctx: Context, spec: dict[str, Any]
) -> tuple[str, dict[str, Any], list[Any]]:
    ctx.check_fields(
        task,
        loc,
        honoured={
            "name",
            "replicas",
            "minAvailable",
            "policies",
            "maxRetry",
            "dependsOn",
            "template",
        },
        refused={"topologyPolicy": "NUMA topology policies are not supported"},
    )
    name = task.get("name")
    if not isinstance(name, str) or not name:
        raise ctx.refuse(f"{loc}.name", "expected a task name", name)
    tmpl = ctx.mapping(task.get("template"), f"{loc}.template")
    ctx.check_fields(tmpl, f"{loc}.template", honoured={"spec"}, ignored={"metadata": _K8S_META})
    pod = ctx.mapping(tmpl.get("spec"), f"{loc}.template.spec")
    ploc = f"{loc}.template.spec"
    ctx.check_fields(
        pod,
        ploc,
        honoured={"containers", "restartPolicy", "nodeSelector"},
        ignored=_POD_IGNORED,
        refused={
            "volumes": "Kubernetes volumes are not mounted; put data in the cluster share",
            "initContainers": "init containers are not run; put the commands before the "
            "container's command",
            "affinity": "Kubernetes affinity is not supported; use nodeSelector",
            "tolerations": "taints and tolerations are not supported; use nodeSelector",
            "securityContext": "tasks run with the executor's fixed security settings",
            "hostIPC": "not supported",
            "hostPID": "not supported",
        },
    )
    containers = ctx.sequence(pod.get("containers"), f"{ploc}.containers")
    if len(containers) != 1:
        raise ctx.refuse(
            f"{ploc}.containers", f"exactly one container per task here, got {len(containers)}"
        )
    role = _container(
        ctx.mapping(containers[0], f"{ploc}.containers[0]"), f"{ploc}.containers[0]", ctx
    )
    role["replicas"] = as_int(task.get("replicas", 1), ctx, f"{loc}.replicas", minimum=1)
    if task.get("minAvailable") is not None:
        role["min_available"] = as_int(task["minAvailable"], ctx, f"{loc}.minAvailable", minimum=1)
    if task.get("maxRetry") is not None:
        role["max_task_retries"] = as_int(task["maxRetry"], ctx, f"{loc}.maxRetry", minimum=0)
    restart = pod.get("restartPolicy")
    if restart not in (None, "Never", "OnFailure", "Always"):
        raise ctx.refuse(f"{ploc}.restartPolicy", "expected Never, OnFailure or Always", restart)
    if restart == "Always":
        raise ctx.refuse(
            f"{ploc}.restartPolicy",
            "Always (a service that never ends) is not a batch task here",
            restart,
        )
    if restart == "OnFailure" and "max_task_retries" not in role:
        role["max_task_retries"] = 3
    selector = {}
    for k, v in ctx.mapping(pod.get("nodeSelector"), f"{ploc}.nodeSelector").items():
        if k in _LINUX_LABELS and v == "linux":
            ctx.warn(f"{ploc}.nodeSelector.{k}", "every pasture node runs Linux")
            continue
        selector[str(k)] = str(v)
    if selector:
        role["node_selector"] = selector
    deps = ctx.mapping(task.get("dependsOn"), f"{loc}.dependsOn")
    ctx.check_fields(deps, f"{loc}.dependsOn", honoured={"name", "iteration"})
    if deps.get("iteration") not in (None, "all", "any"):
        raise ctx.refuse(f"{loc}.dependsOn.iteration", "expected all or any", deps.get("iteration"))
    if deps.get("iteration") == "any" and len(deps.get("name") or []) > 1:
        raise ctx.refuse(
            f"{loc}.dependsOn.iteration",
            "'any' of several tasks is not supported; pasture waits for all",
            "any",
        )
    if deps.get("name"):
        role["depends_on"] = [str(d) for d in ctx.sequence(deps["name"], f"{loc}.dependsOn.name")]
    rules = _policies(task.get("policies"), f"{loc}.policies", name, ctx)
    return name, role, rules


_GPU_KEYS = ("nvidia.com/gpu",)
_LINUX_LABELS = ("kubernetes.io/os", "beta.kubernetes.io/os")


def _container(c: dict[str, Any], loc: str, ctx: Context) -> dict[str, Any]:
    ctx.check_fields(
        c,
        loc,
        honoured={"name", "image", "command", "args", "workingDir", "env", "ports", "resources"},
        ignored=_CONTAINER_IGNORED,
        refused={
            "volumeMounts": "Kubernetes volumes are not mounted; put data in the cluster share",
            "envFrom": "ConfigMaps and Secrets are not read; give env values",
            "securityContext": "tasks run with the executor's fixed security settings",
            "lifecycle": "container lifecycle hooks are not run",
        },
    )
    argv = [str(a) for a in ctx.sequence(c.get("command"), f"{loc}.command")]
    args = [str(a) for a in ctx.sequence(c.get("args"), f"{loc}.args")]
    role: dict[str, Any] = {"resources": _resources(c.get("resources"), f"{loc}.resources", ctx)}
    if not argv:
        # Kubernetes: no (or an empty) command = the image's ENTRYPOINT; non-empty args
        # replace its CMD
        role["entrypoint"] = True
        if args:
            role["args"] = args
        if c.get("workingDir"):
            role["working_dir"] = str(c["workingDir"])
    else:
        role["command"] = _command_line([*argv, *args], c.get("workingDir"), loc, ctx)
    if c.get("image"):
        role["image"] = str(c["image"])
    env: dict[str, str] = {}
    for j, e in enumerate(ctx.sequence(c.get("env"), f"{loc}.env")):
        eloc = f"{loc}.env[{j}]"
        e = ctx.mapping(e, eloc)
        ctx.check_fields(
            e,
            eloc,
            honoured={"name", "value"},
            refused={
                "valueFrom": "references to ConfigMaps, Secrets or fields are not "
                "resolved; give a value"
            },
        )
        env[str(e.get("name"))] = "" if e.get("value") is None else str(e["value"])
    if env:
        role["env"] = env
    ports = []
    for j, p in enumerate(ctx.sequence(c.get("ports"), f"{loc}.ports")):
        p = ctx.mapping(p, f"{loc}.ports[{j}]")
        label = re.sub(r"[^A-Za-z0-9_]", "_", str(p.get("name") or f"port{j}"))
        if not label[0].isalpha():
            label = "p" + label
        ports.append(label)
        if p.get("containerPort") is not None:
            ctx.warn(
                f"{loc}.ports[{j}].containerPort",
                f"pasture gives each task a free port: read it from PASTURE_PORT_{label.upper()} "
                f"instead of {p.get('containerPort')}",
            )
    if ports:
        role["ports"] = ports
    return role


def _command_line(argv: list[str], workdir: object, loc: str, ctx: Context) -> str:
    """``command`` + ``args`` (Kubernetes appends args to command) as one shell line; a
    ``sh -c SCRIPT`` keeps SCRIPT as written; ``workingDir`` becomes a leading ``cd``."""
    if len(argv) >= 3 and argv[0] in ("sh", "bash", "/bin/sh", "/bin/bash") and argv[1] == "-c":
        command = argv[2] if len(argv) == 3 else shlex.join(argv)
    else:
        command = shlex.join(argv)
    if workdir:
        command = f"cd {shlex.quote(str(workdir))} && {command}"
    return command


def _resources(value: object, loc: str, ctx: Context) -> dict[str, Any]:
    res = ctx.mapping(value, loc)
    ctx.check_fields(res, loc, honoured={"requests", "limits"})
    requests = ctx.mapping(res.get("requests"), f"{loc}.requests")
    limits = ctx.mapping(res.get("limits"), f"{loc}.limits")
    out: dict[str, Any] = {}
    for part, values in (("requests", requests), ("limits", limits)):
        for key in values:
            if key not in ("cpu", "memory", *_GPU_KEYS):
                raise ctx.refuse(
                    f"{loc}.{part}.{key}",
                    "only cpu, memory and nvidia.com/gpu are known here",
                    values[key],
                )
    for key in ("cpu", "memory"):
        value = requests.get(key, limits.get(key))
        if value is not None:
            out[key] = value
    gpu = requests.get("nvidia.com/gpu", limits.get("nvidia.com/gpu"))
    if gpu is not None:
        out["gpu"] = as_int(gpu, ctx, f"{loc}.limits.nvidia.com/gpu", minimum=0)
    if "cpu" not in out or "memory" not in out:
        ctx.warn(loc, "no cpu or memory request: pasture's default (1 core, 1Gi) is requested")
    return out
