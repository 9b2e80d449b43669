"""Format detection and the field-by-field translation of OpenPAI v1/v2, MARO and Volcano
documents (the real files are in tests/compat; these cover each rule on its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.spec import SpecError, load_document, load_job, parse_job


def refused(doc: dict) -> dict:
    with pytest.raises(SpecError) as info:
        parse_job(doc)
    (error,) = info.value.errors
    return error


def test_a_document_of_no_known_format_says_so():
    err = refused({"hello": "world"})
    assert err["msg"].startswith("not a pasture, OpenPAI v1/v2, MARO or Volcano job: ")
    err = refused({"apiVersion": "apps/v1", "kind": "Deployment"})
    assert "apps/v1" in err["msg"] and "not a pasture" in err["msg"]
    err = refused({"protocol_version": "v2", "tasks": []})
    assert "marketplace" in err["msg"]


# ---------------------------------------------------------------------------- OpenPAI v1
V1 = {
    "jobName": "mnist_024",
    "image": "openpai/pai.example.tensorflow",
    "codeDir": "code/mnist",
    "dataDir": "/data/mnist",
    "gpuType": "V100",
    "virtualCluster": "research",
    "jobEnvs": {"EPOCHS": 3},
    "retryCount": 2,
    "taskRoles": [
        {
            "name": "worker",
            "taskNumber": 2,
            "cpuNumber": 2,
            "memoryMB": 1024,
            "gpuNumber": 1,
            "shmMB": 64,
            "minSucceededTaskCount": 1,
            "minFailedTaskCount": 2,
            "portList": [{"label": "http", "beginAt": 0, "portNumber": 1}],
            "command": "python train.py",
        }
    ],
}


def test_openpai_v1_fields_map_to_the_spec():
    parsed = parse_job(V1)
    assert parsed.format == "openpai-v1"
    spec = parsed.spec
    w = spec.roles["worker"]
    assert (spec.name, spec.vc, spec.code_dir) == ("mnist-024", "research", "code/mnist")
    assert spec.env == {"EPOCHS": "3", "PAI_DATA_DIR": "/data/mnist"}
    assert spec.retry.max_attempts == 3
    assert (w.replicas, w.resources.cpu, w.resources.memory, w.resources.gpu) == (
        2,
        2000,
        2**30,
        1,
    )
    assert w.resources.gpu_model == "V100" and w.shm == 64 * 2**20
    assert (w.completion.min_succeeded, w.completion.min_failed) == (1, 2)
    assert w.ports == ["http"]
    assert any("jobName" in m for m in parsed.warnings)


@pytest.mark.parametrize(
    ("code_dir", "says"),
    [
        ("hdfs://10.0.0.1:9000", "pasture data push ./code code/mnist-024"),
        ("$PAI_DEFAULT_FS_URI/$PAI_USER_NAME/code", "not HDFS"),
        ("https://example.com/code.tar", "URLs are not fetched"),
    ],
)
def test_openpai_v1_code_dir_outside_the_share_is_refused_by_name(code_dir, says):
    """An HDFS codeDir with a path maps to the share (tests/compat/test_hdfs_code_dir.py);
    one that names no directory, or holds another variable, cannot."""
    err = refused({**V1, "codeDir": code_dir})
    assert err["loc"] == "codeDir" and says in err["msg"]
    assert err["msg"].startswith("OpenPAI v1 field codeDir")


def test_openpai_v1_refuses_auth_file_and_several_ports_per_label():
    assert refused({**V1, "authFile": "hdfs://x/auth"})["loc"] == "authFile"
    role = {**V1["taskRoles"][0], "portList": [{"label": "p", "beginAt": 0, "portNumber": 2}]}
    assert refused({**V1, "taskRoles": [role]})["loc"] == "taskRoles[0].portList[0].portNumber"


# ---------------------------------------------------------------------------- OpenPAI v2
V2 = """
protocolVersion: 2
name: ddp
type: job
description: a test
prerequisites:
  - {type: dockerimage, name: img, uri: openpai/standard:pytorch}
  - {type: data, name: mnist, uri: [https://example.com/mnist.tgz]}
parameters: {epochs: 5}
jobRetryCount: 1
taskRoles:
  master:
    instances: 1
    dockerImage: img
    data: mnist
    completion: {minSucceededInstances: 1, minFailedInstances: -1}
    taskRetryCount: 2
    extraContainerOptions: {shmMB: 128}
    resourcePerInstance: {cpu: 2, memoryMB: 2048, gpu: 1, ports: {main: 1, tensorboard: 1}}
    commands: ["python train.py --epochs <% $parameters.epochs %> --data <% $data.uri[0] %>"]
  worker:
    instances: 3
    dockerImage: img
    resourcePerInstance: {cpu: 2, memoryMB: 2048, gpu: 1}
    commands: [python worker.py]
deployments:
  - name: prod
    taskRoles:
      master: {preCommands: [echo pre <% $data.name %>], postCommands: [echo post]}
defaults: {virtualCluster: research, deployment: prod}
extras:
  gangAllocation: false
  hivedScheduler:
    jobPriorityClass: prod
    taskRoles: {worker: {skuType: A100}}
  com.microsoft.pai.runtimeplugin:
    - {plugin: ssh, parameters: {jobssh: true}}
    - {plugin: tensorboard, parameters: {port: 6006}}
"""


def test_openpai_v2_in_full():
    parsed = load_job(V2)
    spec = parsed.spec
    m, w = spec.roles["master"], spec.roles["worker"]
    assert parsed.format == "openpai-v2"
    lines = m.command.splitlines()
    assert lines[:2] == [
        "echo pre mnist",
        "python train.py --epochs 5 --data https://example.com/mnist.tgz",
    ]
    assert lines[2].startswith("__pasture_rc=$?") and lines[3] == "echo post"
    assert (m.completion.min_succeeded, m.completion.min_failed) == (1, -1)
    assert m.max_task_retries == 2 and m.shm == 128 * 2**20
    assert m.ports == ["main", "tensorboard"] and m.image == "openpai/standard:pytorch"
    assert (m.min_available, w.min_available) == (1, 1)  # gangAllocation: false
    assert w.resources.gpu_model == "A100"
    assert spec.priority == 75 and spec.ssh and spec.vc == "research"
    assert spec.retry.max_attempts == 2
    assert any("tensorboard" in x for x in parsed.warnings)
    assert any("description" in x for x in parsed.warnings)


def test_volcano_restart_task_is_restart_role_within_the_default_max_retry():
    doc = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: rt}
spec:
  tasks:
    - name: worker
      replicas: 2
      policies:
        - {event: PodFailed, action: RestartTask}
      template:
        spec:
          containers: [{name: c, image: busybox, command: [sh, -c, "true"]}]
"""
    (job,) = load_job(doc).specs
    rule = {"event": "task_failed", "action": "restart_role", "role": "worker", "after_s": None}
    assert [r.model_dump() for r in job.policies.on_events] == [rule]
    assert job.retry.max_attempts == 4  # Volcano's default maxRetry (3) + 1


@pytest.mark.parametrize(
    ("old", "new", "loc"),
    [
        ("<% $parameters.epochs %>", "<% $parameters.nope %>", "taskRoles.master.commands[0]"),
        ("<% $data.uri[0] %>", "<% $data.uri[7] %>", "taskRoles.master.commands[0]"),
        ("plugin: tensorboard", "plugin: nfs", "extras.com.microsoft.pai.runtimeplugin[1].plugin"),
        ("deployment: prod", "deployment: dev", "defaults.deployment"),
        ("shmMB: 128", "infiniband: true", "taskRoles.master.extraContainerOptions.infiniband"),
        (
            "jobPriorityClass: prod",
            "jobPriorityClass: urgent",
            "extras.hivedScheduler.jobPriorityClass",
        ),
        ("  - {type: data", "  - {type: data, auth: {}", "prerequisites[1].auth"),
    ],
)
def test_openpai_v2_refusals_name_the_field(old, new, loc):
    with pytest.raises(SpecError) as info:
        load_job(V2.replace(old, new))
    assert info.value.errors[0]["loc"] == loc
    assert info.value.errors[0]["msg"].startswith("OpenPAI v2 field ")


def test_openpai_v2_deployments_without_a_default_are_not_applied_and_warned():
    parsed = load_job(V2.replace(", deployment: prod", ""))
    assert parsed.spec.roles["master"].command.splitlines()[0].startswith("python train.py")
    assert any("deployments" in w for w in parsed.warnings)


# ---------------------------------------------------------------------------- MARO
MARO_SCHEDULE = """
mode: k8s/aks
name: sched
job_names: [job_a, job_b]
components:
  actor:
    image: maro
    num: 3
    resources: {cpu: 2, memory: 4096m, gpu: 0}
    mount: {target: /mnt/data}
    command: ["python", "/mnt/data/run actor.py", "--n", 3]
"""


def test_maro_schedule_is_one_job_per_name_and_list_commands_are_quoted():
    parsed = load_job(MARO_SCHEDULE)
    assert [s.name for s in parsed.specs] == ["job-a", "job-b"]
    actor = parsed.specs[1].roles["actor"]
    assert actor.command == "python '/mnt/data/run actor.py' --n 3"
    assert actor.resources.memory == 4096 * 2**20 and actor.replicas == 3
    assert parsed.specs[0].mounts[0].target == "/mnt/data"


def test_maro_mounts_the_share_writable_as_docker_does_unless_ro():
    """MARO's mount is Docker's volume: read-write unless it ends in ``:ro`` (pasture's own
    ``mounts`` default to read-only: docs/jobs.md)."""
    assert load_job(MARO_SCHEDULE).specs[0].mounts[0].read_only is False
    ro = MARO_SCHEDULE.replace("{target: /mnt/data}", '{target: "/home/me/data:/mnt/data:ro"}')
    mount = load_job(ro).specs[0].mounts[0]
    assert (mount.target, mount.read_only) == ("/mnt/data", True)
    rw = MARO_SCHEDULE.replace("{target: /mnt/data}", '{target: "/home/me/data:/mnt/data"}')
    assert load_job(rw).specs[0].mounts[0].read_only is False


def test_maro_refuses_unknown_mode_and_component_fields():
    assert (
        refused({"mode": "swarm", "name": "x", "components": {"a": {"command": "t"}}})["loc"]
        == "mode"
    )
    err = refused({"name": "x", "components": {"a": {"command": "t", "replicas": 2}}})
    assert err["loc"] == "components.a.replicas" and err["msg"].startswith("MARO field")


# ---------------------------------------------------------------------------- Volcano
VOLCANO = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: ps-worker, namespace: team}
spec:
  minAvailable: 3
  minSuccess: 2
  maxRetry: 2
  queue: research
  priorityClassName: high-priority
  ttlSecondsAfterFinished: 600
  plugins: {env: [], svc: [], ssh: []}
  policies:
    - {event: PodEvicted, action: RestartJob}
    - {event: OutOfSync, action: RestartJob}
  tasks:
    - name: ps
      replicas: 1
      template:
        spec:
          containers:
            - image: tf:1
              command: [python, ps.py]
              args: [--port, "2222"]
              env: [{name: ROLE, value: ps}]
              ports: [{containerPort: 2222, name: tf-port}]
              resources: {requests: {cpu: 500m, memory: 1Gi}}
          restartPolicy: Never
    - name: worker
      replicas: 2
      minAvailable: 2
      maxRetry: 1
      dependsOn: {name: [ps]}
      policies:
        - {event: TaskCompleted, action: CompleteJob}
        - {events: [PodFailed], action: RestartPod}
      template:
        spec:
          nodeSelector: {pool: gpu}
          containers:
            - image: tf:1
              command: [sh, -c, "python worker.py"]
              workingDir: /work
              resources:
                requests: {cpu: 1, memory: 2Gi}
                limits: {nvidia.com/gpu: 1}
          restartPolicy: OnFailure
"""


def test_volcano_job_fields_map_to_the_spec():
    parsed = load_job(VOLCANO)
    spec = parsed.spec
    ps, w = spec.roles["ps"], spec.roles["worker"]
    assert parsed.format == "volcano"
    assert (spec.name, spec.vc, spec.priority) == ("ps-worker", "research", 75)
    assert (spec.min_available, spec.min_succeeded, spec.retry.max_attempts) == (3, 2, 3)
    assert spec.ttl_after_finished == 600 and spec.ssh
    assert ps.command == "python ps.py --port 2222" and ps.env == {"ROLE": "ps"}
    assert ps.ports == ["tf_port"] and (ps.resources.cpu, ps.resources.memory) == (500, 2**30)
    assert w.command == "cd /work && python worker.py"
    assert (w.resources.gpu, w.min_available, w.max_task_retries) == (1, 2, 1)
    assert w.depends_on == ["ps"] and w.node_selector == {"pool": "gpu"}
    rules = [(r.event, r.action, r.role) for r in spec.policies.on_events]
    assert rules == [
        ("task_completed", "complete_job", "worker"),
        ("task_failed", "restart_task", "worker"),
        ("task_evicted", "restart_job", None),
    ]
    assert any("OutOfSync" in x for x in parsed.warnings)
    assert any("namespace" in x for x in parsed.warnings)


@pytest.mark.parametrize(
    ("old", "new", "loc"),
    [
        (
            "{event: PodEvicted, action: RestartJob}",
            "{exitCode: 3, action: RestartJob}",
            "spec.policies[0].exitCode",
        ),
        ("action: CompleteJob}", "action: ResumeJob}", "spec.tasks[1].policies[0].action"),
        ("priorityClassName: high-priority", "priorityClassName: gold", "spec.priorityClassName"),
        (
            "plugins: {env: [], svc: [], ssh: []}",
            "plugins: {tensorflow: []}",
            "spec.plugins.tensorflow",
        ),
        (
            "limits: {nvidia.com/gpu: 1}",
            "limits: {amd.com/gpu: 1}",
            "spec.tasks[1].template.spec.containers[0].resources.limits.amd.com/gpu",
        ),
        (
            "value: ps}",
            "valueFrom: {fieldRef: {}}}",
            "spec.tasks[0].template.spec.containers[0].env[0].valueFrom",
        ),
    ],
)
def test_volcano_refusals_name_the_field(old, new, loc):
    with pytest.raises(SpecError) as info:
        load_job(VOLCANO.replace(old, new))
    assert info.value.errors[0]["loc"] == loc
    assert info.value.errors[0]["msg"].startswith("Volcano field ")


def test_volcano_api_version_must_be_v1alpha1():
    with pytest.raises(SpecError) as info:
        load_job(VOLCANO.replace("batch.volcano.sh/v1alpha1", "batch.volcano.sh/v9"))
    assert info.value.errors[0]["loc"] == "apiVersion"


def test_translated_specs_are_checked_against_pasture_limits_naming_the_source_field():
    with pytest.raises(SpecError) as info:
        load_job(VOLCANO.replace("replicas: 2", "replicas: 20000"))
    (error,) = info.value.errors
    assert error["loc"] == "spec.tasks[1].replicas"
    assert error["msg"].startswith("Volcano field spec.tasks[1].replicas: ")
    assert "roles.worker.replicas" in error["msg"]


# The example of OpenPAI's "Use Prerequisites" section (microsoft/pai
# docs/manual/cluster-user/advanced-jobs.md, MIT), with a taskSucceeds callback added.
PREREQS = """
protocolVersion: 2
name: test_prerequisites
type: job
jobRetryCount: 0
prerequisites:
  - type: script
    name: install-git
    plugin: com.microsoft.pai.runtimeplugin.cmd
    callbacks:
      - event: taskStarts
        commands:
          - apt update
          - apt install -y  git
  - type: data
    name: covid-19-data
    plugin: com.microsoft.pai.runtimeplugin.cmd
    require: [install-git]
    failurePolicy: ignore
    callbacks:
      - event: taskStarts
        commands:
          - mkdir -p /dataset/covid-19
      - event: taskSucceeds
        commands:
          - echo done
  - type: dockerimage
    uri: 'ubuntu:18.04'
    name: docker_image_0
taskRoles:
  taskrole:
    instances: 1
    completion:
      minFailedInstances: 1
    taskRetryCount: 0
    prerequisites:
      - covid-19-data
    dockerImage: docker_image_0
    resourcePerInstance:
      gpu: 1
      cpu: 3
      memoryMB: 29065
    commands:
      - ls -la /dataset/covid-19
defaults:
  virtualCluster: default
extras:
  com.microsoft.pai.runtimeplugin:
    - plugin: ssh
      parameters:
        jobssh: true
        sshbarrier: true
"""


def test_openpai_v2_cmd_prerequisites_run_around_the_commands():
    parsed = load_job(PREREQS)
    lines = parsed.spec.roles["taskrole"].command.splitlines()
    assert lines[:2] == ["apt update", "apt install -y  git"]  # required one first
    assert lines[2:4] == ["{ mkdir -p /dataset/covid-19", "} || true"]  # failurePolicy ignore
    assert lines[4] == "ls -la /dataset/covid-19"
    assert lines[5].startswith("__pasture_rc=$?")  # taskSucceeds only after success
    assert lines[6:] == ["{ echo done", "} || true"]
    assert any("sshbarrier" in w for w in parsed.warnings)


def test_openpai_v2_ssh_plugin_sets_up_ssh_only_with_jobssh():
    """``jobssh: true`` -> ssh between the tasks (sshd required in the image); the plugin
    with ``jobssh: false`` (user keys only) asks for none, with a warning."""
    assert "{plugin: ssh, parameters: {jobssh: true}}" in V2
    assert load_job(V2).spec.ssh
    off = load_job(V2.replace("{jobssh: true}", "{jobssh: false, userssh: {}}"))
    assert not off.spec.ssh
    assert any("jobssh" in w and "no ssh between" in w for w in off.warnings), off.warnings


def test_post_commands_keep_the_exit_code_of_the_commands(tmp_path):
    import subprocess

    failing = V2.replace("python train.py --epochs <% $parameters.epochs %>", "false #")
    script = load_job(failing).spec.roles["master"].command
    run = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    assert run.returncode == 1
    assert "post" not in run.stdout and "pre mnist" in run.stdout


@pytest.mark.parametrize(
    ("old", "new", "loc"),
    [
        (
            "plugin: com.microsoft.pai.runtimeplugin.cmd",
            "plugin: other.plugin",
            "prerequisites[0].plugin",
        ),
        ("- event: taskSucceeds", "- event: taskFails", "prerequisites[1].callbacks[1].event"),
        ("      - covid-19-data", "      - nope", "taskRoles.taskrole.prerequisites"),
        ("require: [install-git]", "require: [covid-19-data]", "taskRoles.taskrole.prerequisites"),
    ],
)
def test_openpai_v2_cmd_prerequisite_refusals(old, new, loc):
    with pytest.raises(SpecError) as info:
        load_job(PREREQS.replace(old, new, 1))
    assert info.value.errors[0]["loc"] == loc


@pytest.mark.parametrize(
    ("roles", "job_min", "expected"),
    [
        ({"ps": (1, None), "worker": (4, None)}, None, {"ps": None, "worker": None}),
        # one task of each role first, then fill in declaration order
        ({"ps": (1, None), "worker": (4, None)}, 3, {"ps": 1, "worker": 2}),
        ({"ps": (2, None), "worker": (4, None)}, 3, {"ps": 2, "worker": 1}),
        # a role's own minimum is kept; the job-wide budget covers it first
        ({"ps": (2, None), "worker": (4, 3)}, 4, {"ps": 1, "worker": 3}),
        ({"ps": (1, None), "worker": (4, None)}, 5, {"ps": 1, "worker": 4}),
    ],
)
def test_job_wide_min_available_reaches_the_core_as_role_minima(roles, job_min, expected):
    doc = {
        "name": "j",
        "roles": {
            n: {"replicas": r, "command": "true", **({"min_available": m} if m else {})}
            for n, (r, m) in roles.items()
        },
        **({"min_available": job_min} if job_min else {}),
    }
    spec = parse_job(doc).spec
    assert spec.role_minima() == expected
    core = {r.name: r.min_available for r in spec.to_core().roles}
    assert core == expected
    if job_min is not None:
        assert sum(core.values()) == job_min


def test_volcano_ray_plugin_gives_the_commands_of_rays_own_recipe():
    """Issue 37: the ray plugin is honoured (Volcano's ray.go OnPodCreate): the plugin's
    translation is the job a user would write by hand without it (head on its own gcs,
    dashboard and client-server ports, workers at the head's gcs address), plus the
    workers waiting for the head; --head naming no task is refused as Volcano does."""
    path = Path(__file__).parents[2] / "compat/corpus/volcano/ray-example.yaml"
    doc = load_document(path.read_text())
    (job,) = parse_job(doc).specs
    head_cmd = (
        "ray start --head --block --dashboard-host=0.0.0.0 --port=$PASTURE_PORT_GCS "
        "--dashboard-port=$PASTURE_PORT_DASHBOARD "
        "--ray-client-server-port=$PASTURE_PORT_CLIENT_SERVER"
    )
    worker_cmd = "ray start --block --address=$PASTURE_ROLE_HEAD_HOSTS"
    del doc["spec"]["plugins"]["ray"]
    head, worker = (t["template"]["spec"]["containers"][0] for t in doc["spec"]["tasks"])
    head["command"] = ["sh", "-c", head_cmd]
    head["ports"] = [{"name": n} for n in ("gcs", "dashboard", "client-server")]
    worker["command"] = ["sh", "-c", worker_cmd]
    doc["spec"]["tasks"][1]["dependsOn"] = {"name": ["head"]}
    (by_hand,) = parse_job(doc).specs
    assert job.roles == by_hand.roles
    doc = load_document(path.read_text())
    doc["spec"]["plugins"]["ray"] = ["--head=ray-head"]
    err = refused(doc)
    assert err["loc"] == "spec.plugins.ray" and "--head=ray-head names no task" in err["msg"]
