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
import secrets
import shlex
from typing import Any

from scheduler.spec.formats.common import Context, TranslateError, as_int, job_name
from scheduler.spec.model import env_name
from scheduler.spec.quantity import parse_memory

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
_C = "template.spec.containers[0]"
_ROLE_ORIGINS = {
    "replicas": "replicas",
    "min_available": "minAvailable",
    "max_task_retries": "maxRetry",
    "depends_on": "dependsOn.name",
    "node_selector": "template.spec.nodeSelector",
    "shm": "template.spec.volumes",
    "command": f"{_C}.command",
    "args": f"{_C}.args",
    "working_dir": f"{_C}.workingDir",
    "image": f"{_C}.image",
    "env": f"{_C}.env",
    "ports": f"{_C}.ports",
    "resources": f"{_C}.resources",
}
"""Where each translated role field of a task came from (errors name it)."""
_K8S_META = "Kubernetes object metadata; no meaning here"


def object_metadata(doc: dict[str, Any], ctx: Context, names: set[str]) -> dict[str, Any]:
    """Check a Volcano object's top-level fields (apiVersion, kind, metadata, spec; status
    ignored) and its ``metadata`` (``names`` honoured; namespace, labels and annotations
    ignored with a warning), and return ``metadata``. Raises TranslateError naming the
    field that is not a mapping."""
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
        honoured=names,
        ignored={k: _K8S_META for k in ("namespace", "labels", "annotations")},
    )
    return meta


_POD_IGNORED = {
    "schedulerName": "pasture schedules every task",
    "terminationGracePeriodSeconds": "pasture stops tasks with its own grace period",
    "imagePullSecrets": "registry credentials are not read; `pasture image push` the image",
    "dnsPolicy": "tasks resolve each other through the discovery environment and hosts files",
    "hostNetwork": "tasks use the node's network here",
    "serviceAccountName": "no Kubernetes API access from tasks",
    "automountServiceAccountToken": "no Kubernetes API access from tasks",
    "imagePullPolicy": "a container field (Kubernetes drops it here); images are pulled when "
    "absent",
    "priorityClassName": "the job's priority is spec.priorityClassName",
    "hostname": "tasks are reached by address and ssh alias here",
    "subdomain": "tasks are reached by address and ssh alias here",
    "enableServiceLinks": "no Kubernetes services here",
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
        str(doc.get("apiVersion", "")).startswith("batch.volcano.sh/")
        and str(doc.get("kind", "")).lower() == "job"
    )


def is_list(doc: dict[str, Any]) -> bool:
    """A Kubernetes ``kind: List`` (``apiVersion: v1``, ``items``), which is also how
    several ``---``-separated manifests in one file are read (spec/bounded.py)."""
    return doc.get("kind") == "List" and isinstance(doc.get("items"), list)


def translate_list(
    doc: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[str], list[dict[str, str]]]:
    """A List of Volcano Jobs (or a file of several Job manifests) -> one pasture spec per
    Job (stored together, as ``kubectl apply -f`` creates them), the warnings, and each
    spec's origins. Field paths carry ``items[i].`` (document i + 1 of the file). Another
    kind of object (a Queue, a PodGroup...) is refused: pasture's VCs are the cluster's,
    set by its admin.

    Raises:
        TranslateError: an item that is not a Volcano Job, or a field of one refused.
    """
    items = doc["items"]
    if not items:
        raise TranslateError("items", f"{FORMAT} field items: expected at least one Job")
    specs: list[dict[str, Any]] = []
    warnings: list[str] = []
    origins: list[dict[str, str]] = []
    classes = priority_classes(items, warnings)
    for i, item in enumerate(items):
        where = f"items[{i}]"
        if not isinstance(item, dict) or not is_volcano(item):
            kind = item.get("kind") if isinstance(item, dict) else type(item).__name__
            if kind == "PriorityClass":
                continue  # read by priority_classes; named by the Jobs that use it
            how = (
                "a Queue's counterpart is a virtual cluster, which the cluster's admin "
                "configures (docs/operations.md); jobs naming it in spec.queue run in the VC "
                "of that name"
                if kind == "Queue"
                else "only Volcano Jobs (and the PriorityClasses they name) are read here"
            )
            warnings.append(
                f"{FORMAT} field {where}.kind (document {i + 1} of the file): {kind} is not "
                f"created: {how}"
            )
            continue
        ctx = Context(FORMAT)
        try:
            spec = translate(item, ctx, classes)
        except TranslateError as exc:
            loc = f"{where}.{exc.loc}" if exc.loc else where
            message = exc.message.replace(f"{FORMAT} field {exc.loc}", f"{FORMAT} field {loc}", 1)
            raise TranslateError(loc, message, exc.given) from None
        specs.append(spec)
        warnings += [
            w.replace(f"{FORMAT} field ", f"{FORMAT} field {where}.", 1) for w in ctx.warnings
        ]
        origins.append({k: f"{where}.{v}" for k, v in ctx.origins.items()})
    if not specs:
        kinds = [it.get("kind") if isinstance(it, dict) else type(it).__name__ for it in items]
        raise TranslateError(
            "items",
            f"{FORMAT} field items: no {API_VERSION} Job among the file's documents "
            f"(kinds {kinds}); a Queue's counterpart is a virtual cluster, which the cluster's "
            "admin configures: submit a Job",
            kinds,
        )
    names = [s["name"] for s in specs]
    if len(set(names)) != len(names):
        raise TranslateError("items", f"{FORMAT} field items: two Jobs named alike: {names}", names)
    return specs, warnings, origins


def priority_classes(items: list[Any], warnings: list[str]) -> dict[str, tuple[int, str]]:
    """The ``scheduling.k8s.io`` PriorityClasses among a file's documents: ``{name:
    (value, field path)}``; fields meaning nothing here are added to ``warnings``. Raises
    TranslateError for one without a name or a whole ``value`` (Kubernetes requires
    both), or with an unknown field."""
    out: dict[str, tuple[int, str]] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("kind") != "PriorityClass":
            continue
        where = f"items[{i}]"
        ctx = Context(FORMAT)
        name = ctx.mapping(item.get("metadata"), f"{where}.metadata").get("name")
        if not isinstance(name, str) or not name:
            raise ctx.refuse(f"{where}.metadata.name", "expected the PriorityClass's name", name)
        value = as_int(item.get("value"), ctx, f"{where}.value")
        ctx.check_fields(
            item,
            where,
            honoured={"apiVersion", "kind", "metadata", "value"},
            ignored={
                "description": "a note for people",
                "globalDefault": "pasture's default priority is normal (50), whatever a class says",
                "preemptionPolicy": "pasture has no per-class preemption policy: a job of "
                "this priority may preempt jobs of a lower one (docs/jobs.md)",
            },
        )
        out[name] = (value, f"{where}.value")
        warnings += ctx.warnings
    return out


def class_priority(value: int) -> int:
    """A Kubernetes PriorityClass value as a pasture priority (0..100, larger first): the
    value itself within 0..100, else the nearest end (a negative value 0, opportunistic;
    above 100, 100, critical). Kubernetes also runs larger values first."""
    return max(0, min(100, value))


def translate(
    doc: dict[str, Any], ctx: Context, classes: dict[str, tuple[int, str]] | None = None
) -> dict[str, Any]:
    """Volcano Job -> pasture spec dict. ``classes``: the PriorityClasses defined beside
    it in the same file (:func:`priority_classes`). Raises TranslateError naming the
    Volcano field."""
    if doc.get("apiVersion") != API_VERSION:
        raise ctx.refuse(
            "apiVersion",
            f"expected {API_VERSION} (write apiVersion: {API_VERSION})",
            doc.get("apiVersion"),
        )
    if doc.get("kind") != "Job":  # Volcano's own TTL guide writes `kind: job`
        ctx.warn("kind", "read as Job (Kubernetes kinds are case-sensitive: write Job)")
    meta = object_metadata(doc, ctx, {"name", "generateName"})
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
            "volumes",
        },
        ignored={"schedulerName": "pasture schedules every job"},
        refused={
            "runningEstimate": "pasture has no running estimate field for Volcano jobs; drop it "
            "(a pasture spec's estimated_duration_s is the equivalent)",
            "networkTopology": "network-topology-aware placement is not supported; drop it",
        },
    )
    out: dict[str, Any] = {"name": _name(meta, ctx), "roles": {}}
    if spec.get("queue"):
        out["vc"] = str(spec["queue"])
    if spec.get("priorityClassName"):
        out["priority"] = _priority(spec["priorityClassName"], ctx, classes or {})
    for key, src in (
        ("name", "metadata.name" if meta.get("name") is not None else "metadata.generateName"),
        ("vc", "spec.queue"),
        ("priority", "spec.priorityClassName"),
        ("min_available", "spec.minAvailable"),
        ("min_succeeded", "spec.minSuccess"),
        ("retry", "spec.maxRetry"),
        ("ttl_after_finished", "spec.ttlSecondsAfterFinished"),
        ("policies", "spec.policies"),
        ("mpi_host", "spec.plugins.mpi"),
        ("mounts", "spec.volumes"),
    ):
        ctx.origin(key, src)
    rules = _policies(spec.get("policies"), "spec.policies", None, ctx)
    volumes: list[dict[str, Any]] = []
    mounts = _job_volumes(spec.get("volumes"), ctx, volumes)
    if volumes:
        out["volumes"] = volumes
        ctx.origin("volumes", "spec.volumes")
    tasks = ctx.sequence(spec.get("tasks"), "spec.tasks")
    if not tasks:
        raise ctx.refuse("spec.tasks", "expected at least one task")
    for i, task in enumerate(tasks):
        loc = f"spec.tasks[{i}]"
        name_ = task.get("name") if isinstance(task, dict) else i
        ctx.origins_under(f"roles.{name_}", loc, _ROLE_ORIGINS)
        name, role, task_rules, task_mounts = _task(ctx.mapping(task, loc), loc, ctx, spec)
        if name in out["roles"]:
            raise ctx.refuse(f"{loc}.name", f"duplicate task name {name!r}", name)
        out["roles"][name] = role
        rules = task_rules + rules  # a task's own rules are checked before the job's
        for m in task_mounts:
            if m not in mounts:
                mounts.append(m)
    if mounts:
        out["mounts"] = mounts
    _plugins(ctx.mapping(spec.get("plugins"), "spec.plugins"), out, ctx)
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


def _priority(value: object, ctx: Context, classes: dict[str, tuple[int, str]]) -> str | int:
    """``spec.priorityClassName``: a PriorityClass of the same file (its value, see
    :func:`class_priority`), else a pasture class name. Raises TranslateError otherwise."""
    if isinstance(value, str) and value in classes:
        number, where = classes[value]
        priority = class_priority(number)
        if priority != number:
            ctx.warn(
                "spec.priorityClassName",
                f"PriorityClass {value} has value {number} ({where}); pasture priorities are "
                f"0..100, so the job's priority is {priority}",
            )
        return priority
    name = str(value).lower().removesuffix("-priority").removesuffix("priority").strip("-")
    if name in _PRIORITIES:
        return name
    raise ctx.refuse(
        "spec.priorityClassName",
        f"pasture priority classes are {list(_PRIORITIES)} (a '-priority' suffix is allowed), "
        "or give a PriorityClass of that name in the same file (its value, 0..100, is the "
        "job's priority)",
        value,
    )


def _policies(value: object, loc: str, role: str | None, ctx: Context) -> list[dict[str, Any]]:
    """A ``policies`` list as pasture rules, checked as Volcano's admission webhook does
    (volcano-sh/volcano pkg/webhooks/admission/jobs/validate/util.go ``validatePolicies``):
    an event named by two policies of the same list, or ``*`` beside other events, is
    refused (the second rule could never fire); ``event`` and ``events`` may be given
    together (their union) and ``events`` may be one string."""
    rules: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for i, p in enumerate(ctx.sequence(value, loc)):
        ploc = f"{loc}[{i}]"
        p = ctx.mapping(p, ploc)
        ctx.check_fields(
            p,
            ploc,
            honoured={"event", "events", "action", "timeout"},
            refused={
                "exitCode": "exit-code policies are not supported; write event: PodFailed "
                "(any non-zero exit) with the same action instead",
            },
        )
        after = (
            None if p.get("timeout") is None else go_duration(p["timeout"], ctx, f"{ploc}.timeout")
        )
        raw = p.get("events")
        events = [raw] if isinstance(raw, str) else list(ctx.sequence(raw, f"{ploc}.events"))
        if p.get("event") is not None:
            events.append(p.get("event"))
        events = list(dict.fromkeys(str(e) for e in events))
        if not events:
            raise ctx.refuse(f"{ploc}.event", "expected an event (or events)")
        action = p.get("action")
        if action not in _ACTIONS:
            raise ctx.refuse(f"{ploc}.action", f"expected one of {sorted(_ACTIONS)}", action)
        for event in events:
            where = f"{ploc}.events" if isinstance(raw, list | str) else f"{ploc}.event"
            if event in seen:
                raise ctx.refuse(
                    where,
                    f"event {event} is already handled by {seen[event]}; Volcano's webhook "
                    "refuses an event named by two policies (the second could never run): "
                    "keep one of them",
                    event,
                )
            seen[event] = ploc
            if event in ("*", "AnyEvent") and len(seen) > 1 or "*" in seen and len(seen) > 1:
                raise ctx.refuse(
                    where,
                    "'*' (any event) must be the only event of the list, as Volcano's webhook "
                    "requires: drop the other policies or name events instead of '*'",
                    event,
                )
            names = sorted(set(_EVENTS.values())) if event in ("*", "AnyEvent") else None
            if names is None:
                if event in ("OutOfSync", "JobUpdated"):
                    ctx.warn(where, f"{event} (a Kubernetes object update) never happens here")
                    continue
                if event not in _EVENTS:
                    raise ctx.refuse(
                        where,
                        f"expected one of {sorted([*_EVENTS, 'OutOfSync', 'JobUpdated', '*'])}",
                        event,
                    )
                names = [_EVENTS[event]]
            for e in names:
                rule: dict[str, Any] = {"event": e, "action": _ACTIONS[action]}
                if role is not None:
                    rule["role"] = role
                if after is not None:
                    rule["after_s"] = after
                if rule not in rules:
                    rules.append(rule)
    return rules


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(value: object, ctx: Context, loc: str) -> float:
    """A Kubernetes ``metav1.Duration`` (Go's ``time.ParseDuration``: ``10m``, ``1h30m``,
    ``90s``, ``1.5h``) in seconds. Raises TranslateError for anything else, or a duration
    that is not positive or above 30 days (pasture's ``after_s`` bound)."""
    text = str(value).strip() if isinstance(value, str | int | float) else ""
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_S[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise ctx.refuse(
            loc, f"expected a duration such as 10m, 90s or 1h30m, got {value!r}", value
        )
    if not 0 < total <= 30 * 86400:
        raise ctx.refuse(loc, f"expected a duration above 0 and at most 720h, got {value!r}")
    return total


def _name(meta: dict[str, Any], ctx: Context) -> str:
    """``metadata.name``, else a name made from ``metadata.generateName`` as Kubernetes
    does (the prefix as written and 5 random characters; a warning gives the name)."""
    if meta.get("name") is not None or not meta.get("generateName"):
        return job_name(meta.get("name"), ctx, "metadata.name")
    raw = str(meta["generateName"])
    prefix = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).lstrip("-")[:58]
    if not prefix:
        raise ctx.refuse("metadata.generateName", "no letter or digit in the prefix", raw)
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' utilrand alphabet
    name = prefix + "".join(secrets.choice(alphabet) for _ in range(5))
    ctx.warn(
        "metadata.generateName",
        f"the job is named {name} (the prefix and 5 random characters, as Kubernetes names "
        "it); give metadata.name for a fixed name",
    )
    return name


def _pytorch(args: list[Any], loc: str, out: dict[str, Any], ctx: Context) -> None:
    """Volcano's pytorch plugin (volcano-sh/volcano pkg/controllers/job/plugins/
    distributed-framework/pytorch/pytorch.go): MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK are
    always given; RANK 0 is the master's task and the workers follow, so the master and
    worker roles go first. ``--wait-master-enabled`` (an init container in each worker pod
    that waits for the master's port, docs/user-guide/how_to_use_pytorch_plugin.md): the
    worker role ``depends_on`` the master role, so workers start once the master runs."""
    roles = list(out["roles"])
    flags = _flags(
        args,
        loc,
        {
            "master": "master",
            "worker": "worker",
            "port": "23456",
            "wait-master-enabled": "false",
            "wait-master-timeout": "300",
            "wait-master-image": "busybox:1.36.1",
        },
        ctx,
        booleans={"wait-master-enabled"},
    )
    for which in ("master", "worker"):
        if flags[which] not in roles:
            ctx.warn(loc, f"--{which}={flags[which]} names no task of this job")
    first = [r for r in (flags["master"], flags["worker"]) if r in out["roles"]]
    out["roles"] = {
        **{r: out["roles"][r] for r in first},
        **{r: v for r, v in out["roles"].items() if r not in first},
    }
    if any(str(a).lstrip("-").startswith("port") for a in args):
        ctx.warn(
            f"{loc} --port",
            f"MASTER_PORT is the master task's own port here, not {flags['port']}",
        )
    wait = flags["wait-master-enabled"].lower()
    if wait not in ("true", "false", "1", "0", "t", "f"):
        raise ctx.refuse(loc, f"--wait-master-enabled expects true or false, got {wait!r}")
    if wait in ("true", "1", "t"):
        master, worker = flags["master"], flags["worker"]
        if master in out["roles"] and worker in out["roles"]:
            deps = out["roles"][worker].setdefault("depends_on", [])
            if master not in deps:
                deps.append(master)
        ctx.warn(
            f"{loc} --wait-master-enabled",
            f"the {worker} tasks start once the {master} tasks run (depends_on), without an "
            "init container: --wait-master-timeout and --wait-master-image have no effect "
            "(a worker waits as long as the master is not running)",
        )


_RAY_PORTS = ("gcs", "dashboard", "client_server")
"""The head role's ports for the ray plugin (ray.go's gcs, dashboard, client-server)."""


def _ray(args: list[Any], loc: str, out: dict[str, Any], ctx: Context) -> None:
    """Volcano's ray plugin (volcano-sh/volcano pkg/controllers/job/plugins/
    distributed-framework/ray/ray.go; docs/user-guide/how_to_use_ray_plugin.md): the head
    task's command becomes ``ray start --head --block`` on its GCS, dashboard and client
    server ports, each worker's ``ray start --block --address=<head>:<GCS port>``. Here the
    ports are the head task's own (``ports: [gcs, dashboard, client_server]``, the GCS port
    first, so ``$PASTURE_ROLE_<HEAD>_HOSTS`` is the head's ``address:gcs-port``); the
    workers depend on the head (started once it runs, as ``ray start`` needs it). The
    plugin's Service is not made (tasks reach the head by that address). Raises
    TranslateError for a --head task that is not in the job."""
    roles = list(out["roles"])
    flags = _flags(
        args,
        loc,
        {
            "head": "head",
            "worker": "worker",
            "headContainer": "head",
            "workerContainer": "worker",
            "port": "6379",
            "dashboardPort": "8265",
            "clientPort": "10001",
        },
        ctx,
    )
    head, worker = flags["head"], flags["worker"]
    if head not in roles:
        raise ctx.refuse(
            loc,
            f"--head={head} names no task of this job (tasks: {roles}); Volcano refuses to "
            "create its pods: write --head=<the head task's name>",
            head,
        )
    ports = {p: f"$PASTURE_PORT_{env_name(p)}" for p in _RAY_PORTS}
    head_role = out["roles"][head]
    head_role["ports"] = [
        *_RAY_PORTS,
        *(p for p in head_role.get("ports", []) if p not in _RAY_PORTS),
    ]
    head_role["command"] = (
        f"ray start --head --block --dashboard-host=0.0.0.0 --port={ports['gcs']} "
        f"--dashboard-port={ports['dashboard']} "
        f"--ray-client-server-port={ports['client_server']}"
    )
    head_role.pop("entrypoint", None)
    head_role.pop("args", None)
    if worker in out["roles"]:
        w = out["roles"][worker]
        w["command"] = f"ray start --block --address=$PASTURE_ROLE_{env_name(head)}_HOSTS"
        w.pop("entrypoint", None)
        w.pop("args", None)
        deps = w.setdefault("depends_on", [])
        if head not in deps:
            deps.append(head)
    else:
        ctx.warn(loc, f"--worker={worker} names no task of this job: only the head starts")
    fixed = [a for a in ("port", "dashboardPort", "clientPort") if flags[a] != _RAY_DEFAULTS[a]]
    ctx.warn(
        loc,
        "the head's ray ports are its own task ports here ($PASTURE_PORT_GCS, "
        "$PASTURE_PORT_DASHBOARD, $PASTURE_PORT_CLIENT_SERVER), not "
        f"{flags['port']}/{flags['dashboardPort']}/{flags['clientPort']}; workers reach it at "
        f"$PASTURE_ROLE_{env_name(head)}_HOSTS; no Kubernetes Service is made"
        + (f" (arguments {fixed} ignored)" if fixed else ""),
    )


_RAY_DEFAULTS = {"port": "6379", "dashboardPort": "8265", "clientPort": "10001"}


_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9-]*)(?:=(.*))?$")


def _flags(
    args: list[Any],
    loc: str,
    known: dict[str, str],
    ctx: Context,
    booleans: frozenset[str] | set[str] = frozenset(),
) -> dict[str, str]:
    """A plugin's arguments parsed as Go's ``flag`` package does (``--name=value``,
    ``-name=value``, ``--name value``; a boolean flag of ``booleans`` alone is "true")
    into ``known`` (name -> default). Volcano logs and ignores a flag it does not know;
    here that is refused, naming the plugin's flags."""
    out = dict(known)
    items = [str(a) for a in args]
    i = 0
    while i < len(items):
        m = _FLAG.match(items[i])
        if not m or m.group(1) not in known:
            raise ctx.refuse(
                loc, f"unknown argument {items[i]!r}; this plugin takes {sorted(known)}", items[i]
            )
        value = m.group(2)
        if value is None and m.group(1) in booleans:
            value = "true"
        if value is None:
            if i + 1 >= len(items):
                raise ctx.refuse(loc, f"{items[i]} needs a value", items[i])
            i += 1
            value = items[i]
        out[m.group(1)] = value
        i += 1
    return out


def _plugins(plugins: dict[str, Any], out: dict[str, Any], ctx: Context) -> None:
    roles = list(out["roles"])
    known = ("env", "svc", "ssh", "mpi", "pytorch", "ray")
    for name, args in plugins.items():
        loc = f"spec.plugins.{name}"
        if name not in known:
            raise ctx.refuse(
                loc,
                "only the env, svc, ssh, mpi, pytorch and ray plugins are known here; drop it "
                "(and give what it would set in the tasks' env or commands)",
                name,
            )
        args = [] if args == {} else ctx.sequence(args, loc)
        if name in ("env", "svc"):
            if args:
                ctx.warn(loc, f"plugin arguments {args} have no meaning here")
        elif name == "ssh":
            out["ssh"] = True
            if args:
                ctx.warn(
                    loc,
                    f"plugin arguments {args}: the job's ssh key and configuration are "
                    "pasture's ($PASTURE_SSH_DIR, $PASTURE_SSH_CONFIG)",
                )
        elif name == "mpi":
            flags = _flags(args, loc, {"master": "master", "worker": "worker", "port": "22"}, ctx)
            out["mpi"] = True
            out["ssh"] = True
            _plugin_roles(flags, roles, loc, "MPI_HOST is set on no task", ctx)
            if flags["worker"] in roles:
                out["mpi_host"] = {"master": flags["master"], "worker": flags["worker"]}
            if flags["port"] != "22" or any(str(a).lstrip("-").startswith("port") for a in args):
                ctx.warn(
                    f"{loc} --port",
                    f"ssh between the tasks uses each task's own ssh port, not {flags['port']}: "
                    "the job's ssh configuration reaches it ($PASTURE_SSH_PORT names it)",
                )
        elif name == "pytorch":
            _pytorch(args, loc, out, ctx)
        elif name == "ray":
            _ray(args, loc, out, ctx)
        else:
            raise ctx.refuse(
                loc,
                "only the env, svc, ssh, mpi and pytorch plugins are known here; drop it "
                "and give what it would set in the tasks' env",
                name,
            )


def _plugin_roles(
    flags: dict[str, str], roles: list[str], loc: str, none: str, ctx: Context
) -> None:
    """Refuse a plugin whose --worker names no task (Volcano's controller would index a
    task that is not there); warn when --master names none."""
    if flags["worker"] not in roles and flags["master"] in roles:
        raise ctx.refuse(
            loc,
            f"--worker={flags['worker']} names no task of this job (tasks: {roles}); write "
            f"--worker=<the worker task's name>",
            flags["worker"],
        )
    if flags["master"] not in roles:
        ctx.warn(loc, f"--master={flags['master']} names no task of this job: {none}")


def _task(
    task: dict[str, Any], loc: str, ctx: Context, spec: dict[str, Any]
) -> tuple[str, dict[str, Any], list[dict[str, Any]], list[dict[str, str]]]:
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
        refused={"topologyPolicy": "NUMA topology policies are not supported: drop topologyPolicy"},
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
        honoured={"containers", "restartPolicy", "nodeSelector", "volumes"},
        ignored=_POD_IGNORED,
        refused={
            "initContainers": "init containers are not run; put the commands before the "
            "container's command",
            "affinity": "Kubernetes affinity is not supported: drop affinity and give "
            "nodeSelector labels instead",
            "tolerations": "taints and tolerations are not supported: drop tolerations "
            "(nodeSelector chooses nodes here)",
            "securityContext": "tasks run with the executor's fixed security settings: drop "
            "securityContext",
            "hostIPC": "not supported: drop hostIPC (tasks of a node share /dev/shm through shm)",
            "hostPID": "not supported: drop hostPID",
        },
    )
    containers = ctx.sequence(pod.get("containers"), f"{ploc}.containers")
    if len(containers) != 1:
        raise ctx.refuse(
            f"{ploc}.containers",
            f"exactly one container per task here, got {len(containers)}: run the others' "
            "commands in the first container's command (or as their own task) and drop them",
        )
    cloc = f"{ploc}.containers[0]"
    container = ctx.mapping(containers[0], cloc)
    role = _container(container, cloc, ctx)
    mounts = _pod_volumes(pod.get("volumes"), container.get("volumeMounts"), ploc, cloc, role, ctx)
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
            "Always (a service that never ends) is not a batch task here: write OnFailure "
            "(restarted after a failure) or Never",
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
    return name, role, rules, mounts


def _new_claim(value: object, path: str, i: int, loc: str, ctx: Context) -> dict[str, Any]:
    """``spec.volumes[i].volumeClaim`` (a PersistentVolumeClaimSpec Volcano creates for the
    job, named ``<job>-volume-<random>``, deleted with it): a fresh share directory of the
    job, pasture's ``volumes`` entry ``volume-<i>`` mounted at ``path``, sized as
    ``resources.requests.storage`` asks (recorded: the share enforces no per-directory
    quota, warned). ``accessModes`` and ``storageClassName`` warned. Raises TranslateError
    for a claim that is not a mapping or a storage size that is not a quantity."""
    claim = ctx.mapping(value, loc)
    ctx.check_fields(
        claim,
        loc,
        honoured={"resources"},
        ignored={
            "accessModes": "the share directory is read-write for every task of the job",
            "storageClassName": "the directory is on the cluster share",
            "volumeMode": "the directory is on the cluster share",
        },
    )
    out: dict[str, Any] = {"name": f"volume-{i}", "target": path}
    res = ctx.mapping(claim.get("resources"), f"{loc}.resources")
    requests = ctx.mapping(res.get("requests"), f"{loc}.resources.requests")
    storage = requests.get("storage")
    if storage is not None:
        try:
            out["size"] = parse_memory(storage)
        except ValueError as exc:
            raise ctx.refuse(f"{loc}.resources.requests.storage", str(exc), storage) from None
    size = f" of {storage}" if storage is not None else ""
    ctx.warn(
        loc,
        f"a new claim{size} is a fresh directory of the job on the cluster share "
        f"(jobs/<job>/volumes/<uid>/volume-{i}, $PASTURE_VOLUME_VOLUME_{i}), mounted at {path} and "
        "removed when the finished job is deleted by its ttl; the share has no "
        "per-directory quota, so the size is not enforced",
    )
    return out


def _job_volumes(
    value: object, ctx: Context, volumes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``spec.volumes`` (Volcano VolumeSpec: ``mountPath`` + ``volumeClaimName`` of an
    existing PVC, or ``volumeClaim`` to create one) as share mounts: the claim is the share
    directory of the same name (a warning says so), mounted at ``mountPath`` in every task;
    a new claim is appended to ``volumes`` (:func:`_new_claim`)."""
    out: list[dict[str, Any]] = []
    for i, v in enumerate(ctx.sequence(value, "spec.volumes")):
        loc = f"spec.volumes[{i}]"
        v = ctx.mapping(v, loc)
        ctx.check_fields(v, loc, honoured={"mountPath", "volumeClaimName", "volumeClaim"})
        path = v.get("mountPath")
        if not isinstance(path, str) or not path.startswith("/"):
            raise ctx.refuse(f"{loc}.mountPath", "expected an absolute path", path)
        claim = v.get("volumeClaimName")
        if not claim:
            volumes.append(_new_claim(v.get("volumeClaim"), path, i, f"{loc}.volumeClaim", ctx))
            continue
        if v.get("volumeClaim") is not None:
            ctx.warn(
                f"{loc}.volumeClaim",
                f"beside volumeClaimName: the share directory {claim} is used as it is (Volcano "
                "would create the claim only when none of that name exists)",
            )
        ctx.warn(
            f"{loc}.volumeClaimName",
            f"claim {claim} is the cluster share's directory {claim} (put there with "
            f"`pasture data push`), mounted at {path}",
        )
        out.append({"source": str(claim), "target": path, "read_only": False})
    return out


def _pod_volumes(
    volumes: object,
    volume_mounts: object,
    ploc: str,
    cloc: str,
    role: dict[str, Any],
    ctx: Context,
) -> list[dict[str, str]]:
    """A pod's ``volumes`` with the container's ``volumeMounts``, as Kubernetes means them:
    ``persistentVolumeClaim`` -> the share directory named like the claim, mounted at the
    mountPath (a warning says so); ``emptyDir`` with ``medium: Memory`` at ``/dev/shm`` ->
    the role's ``shm`` (its ``sizeLimit``, else 1Gi: such a volume is there because
    Docker's 64Mi default is too small); any other ``emptyDir`` -> the task's own
    filesystem (a warning). ``hostPath``, ``configMap``, ``secret`` and the rest are
    refused, saying what to write instead with the file's own names."""
    by_name: dict[str, tuple[str, dict[str, Any]]] = {}
    for i, v in enumerate(ctx.sequence(volumes, f"{ploc}.volumes")):
        vloc = f"{ploc}.volumes[{i}]"
        v = ctx.mapping(v, vloc)
        by_name[str(v.get("name"))] = (vloc, v)
    out: list[dict[str, Any]] = []
    for j, vm in enumerate(ctx.sequence(volume_mounts, f"{cloc}.volumeMounts")):
        mloc = f"{cloc}.volumeMounts[{j}]"
        vm = ctx.mapping(vm, mloc)
        ctx.check_fields(
            vm,
            mloc,
            honoured={"name", "mountPath", "readOnly"},
            refused={
                "subPath": "subPath is not supported: name the sub-directory in the claim "
                "(the share directory) instead",
                "subPathExpr": "subPathExpr is not supported",
                "mountPropagation": "mount propagation is not supported; drop it",
            },
        )
        name, path = str(vm.get("name")), vm.get("mountPath")
        if not isinstance(path, str) or not path.startswith("/"):
            raise ctx.refuse(f"{mloc}.mountPath", "expected an absolute path", path)
        if name not in by_name:
            raise ctx.refuse(f"{mloc}.name", f"no volume named {name!r} in {ploc}.volumes", name)
        vloc, v = by_name[name]
        kinds = [k for k in v if k != "name"]
        kind = kinds[0] if len(kinds) == 1 else None
        if kind == "persistentVolumeClaim":
            claim = ctx.mapping(v[kind], f"{vloc}.{kind}").get("claimName")
            if not claim:
                raise ctx.refuse(f"{vloc}.{kind}.claimName", "expected a claim name", claim)
            ctx.warn(
                f"{vloc}.{kind}",
                f"claim {claim} is the cluster share's directory {claim} (put there with "
                f"`pasture data push`), mounted at {path}",
            )
            # Kubernetes mounts a claim read-write unless the volumeMount says readOnly
            out.append(
                {"source": str(claim), "target": path, "read_only": vm.get("readOnly") is True}
            )
        elif kind == "emptyDir":
            empty = ctx.mapping(v[kind], f"{vloc}.emptyDir")
            if empty.get("medium") == "Memory" and path.rstrip("/") == "/dev/shm":
                role["shm"] = empty.get("sizeLimit") or "1Gi"
            else:
                ctx.warn(
                    f"{vloc}.emptyDir",
                    f"{path} is a directory of the task's own filesystem here (container "
                    "tasks), not a separate volume",
                )
        else:
            what = kind or "a volume without exactly one source"
            base = path.rstrip("/").rsplit("/", 1)[-1] or name
            raise ctx.refuse(
                f"{vloc}.{kind}" if kind else vloc,
                f"{what} volumes are not mounted here: put the files in the cluster share "
                f"(`pasture data push ./{base} {base}`) and write the volume as "
                f"persistentVolumeClaim: {{claimName: {base}}} (the share directory of that "
                f"name is mounted at {path})",
                name,
            )
    return out


_GPU_KEYS = ("nvidia.com/gpu",)
_LINUX_LABELS = ("kubernetes.io/os", "beta.kubernetes.io/os")


def _container(c: dict[str, Any], loc: str, ctx: Context) -> dict[str, Any]:
    ctx.check_fields(
        c,
        loc,
        honoured={
            "name",
            "image",
            "command",
            "args",
            "workingDir",
            "env",
            "ports",
            "resources",
            "volumeMounts",
        },
        ignored=_CONTAINER_IGNORED,
        refused={
            "envFrom": "ConfigMaps and Secrets are not read; give env values",
            "securityContext": "tasks run with the executor's fixed security settings: drop "
            "securityContext",
            "lifecycle": "container lifecycle hooks are not run: put postStart commands before the "
            "command and drop lifecycle",
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
    exports: list[str] = []
    for j, e in enumerate(ctx.sequence(c.get("env"), f"{loc}.env")):
        eloc = f"{loc}.env[{j}]"
        e = ctx.mapping(e, eloc)
        ctx.check_fields(e, eloc, honoured={"name", "value", "valueFrom"})
        if e.get("valueFrom") is not None:
            exports.append(_field_ref(str(e.get("name")), e["valueFrom"], f"{eloc}.valueFrom", ctx))
            continue
        env[str(e.get("name"))] = "" if e.get("value") is None else str(e["value"])
    if env:
        role["env"] = env
    if exports and "command" in role:
        role["command"] = "; ".join(exports) + "\n" + role["command"]
    elif exports:
        raise ctx.refuse(
            f"{loc}.env",
            "valueFrom needs a command to set it before (this container runs its image's "
            "ENTRYPOINT): give the container a command",
        )
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


_FIELD_REFS = {
    "status.podIP": '"$PASTURE_TASK_HOST"',
    "status.hostIP": '"$PASTURE_TASK_HOST"',
    "metadata.name": '"$PASTURE_JOB_NAME-$PASTURE_TASK_ROLE-$PASTURE_TASK_INDEX"',
    "spec.nodeName": '"$(hostname)"',
    "metadata.namespace": "default",
}
"""Kubernetes downward-API fields (``valueFrom.fieldRef.fieldPath``) and what gives them
here: the task's address (pod and host share the node's network), Volcano's pod name
``<job>-<task>-<i>``, the node's name; the namespace is ``default``."""


def _field_ref(name: str, value: object, loc: str, ctx: Context) -> str:
    """An env ``valueFrom`` as a shell ``export`` run before the command: downward-API
    ``fieldRef`` fields of :data:`_FIELD_REFS`; ConfigMap / Secret / resource references
    are refused with what to write instead."""
    ref = ctx.mapping(value, loc)
    field = ctx.mapping(ref.get("fieldRef"), f"{loc}.fieldRef")
    path = field.get("fieldPath")
    if set(ref) != {"fieldRef"} or path not in _FIELD_REFS:
        what = path if set(ref) == {"fieldRef"} else ", ".join(sorted(map(str, ref)))
        raise ctx.refuse(
            loc,
            f"{what} is not resolved here (known: fieldRef {sorted(_FIELD_REFS)}); write "
            f"value: <the value> for {name} (a secret: a pasture spec's secrets)",
            what,
        )
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ctx.refuse(f"{loc}", f"{name!r} is not an environment variable name", name)
    return f"export {name}={_FIELD_REFS[str(path)]}"


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
            if key == "ephemeral-storage":
                ctx.warn(f"{loc}.{part}.{key}", "local disk is not reserved per task here")
            elif key not in ("cpu", "memory", *_GPU_KEYS):
                raise ctx.refuse(
                    f"{loc}.{part}.{key}",
                    "only cpu, memory and nvidia.com/gpu are known here: drop it, or ask "
                    "for whole GPUs with nvidia.com/gpu",
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
