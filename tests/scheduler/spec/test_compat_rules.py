"""Issue 26 rules: accept what the source system accepts (with its meaning), refuse naming
the source field with a how-to built from the file's own values, and control characters
refused at submit (issue 25 item 5)."""

from __future__ import annotations

import json

import pytest

from scheduler.core.failure import invalid_job
from scheduler.spec import SpecError, load_job, parse_job

V1 = {
    "jobName": "mnist_024",
    "image": "openpai/pai.example.tensorflow",
    "authFile": "",
    "taskRoles": [{"name": "worker", "taskNumber": 2, "command": "python train.py"}],
}
V2 = """
protocolVersion: 2
name: hived
type: job
prerequisites:
  - {name: img, type: dockerimage, uri: 'ubuntu:22.04'}
taskRoles:
  worker:
    instances: 2
    dockerImage: img
    completion: {minSucceededInstances: 4, minFailedInstances: 3}
    resourcePerInstance: {cpu: 1, memoryMB: 1024, gpu: 0}
    commands: [sleep 1]
"""
MPI = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: lm-mpi-job}
spec:
  minAvailable: 1
  plugins:
    mpi: ["--master=mpimaster", "--worker=mpiworker", "--port=22"]
  tasks:
    - replicas: 1
      name: mpimaster
      policies:
        - {event: TaskCompleted, action: CompleteJob}
      template:
        spec:
          containers:
            - command: [/bin/sh, -c, "mpiexec --host ${MPI_HOST} -np 2 hello"]
              image: volcanosh/example-mpi:0.0.1
          restartPolicy: OnFailure
    - replicas: 2
      name: mpiworker
      template:
        spec:
          containers:
            - command: [/bin/sh, -c, "/usr/sbin/sshd -D"]
              image: volcanosh/example-mpi:0.0.1
          restartPolicy: OnFailure
"""


def _error(doc, **kw) -> dict:
    with pytest.raises(SpecError) as info:
        load_job(doc, **kw) if isinstance(doc, str) else parse_job(doc)
    return info.value.errors[0]


@pytest.mark.parametrize(
    ("role", "loc"),
    [
        ({"command": "echo a\0b"}, "roles.a.command"),
        ({"command": "echo \x1b[31m"}, "roles.a.command"),
        ({"command": "t", "env": {"K": "v\0"}}, "roles.a.env"),
        ({"command": "t", "image": "img\0"}, "roles.a.image"),
        ({"entrypoint": True, "image": "i", "args": ["a\0"]}, "roles.a.args"),
        ({"command": "t", "resources": {"gpu_model": "a\nb"}}, "roles.a.resources.gpu_model"),
    ],
)
def test_control_characters_are_refused_with_the_field(role, loc):
    error = _error({"name": "x", "roles": {"a": role}})
    assert error["loc"] == loc and "control character" in error["msg"]


def test_tab_newline_and_carriage_return_stay_allowed_in_commands_and_env():
    spec = parse_job(
        {"name": "x", "env": {"A": "1\t2\n"}, "roles": {"a": {"command": "a\tb\r\nc"}}}
    ).spec
    assert spec.roles["a"].command == "a\tb\r\nc"


def test_a_translated_nul_names_the_source_field():
    doc = json.loads(json.dumps(V1))
    doc["taskRoles"][0]["command"] = "python\0 train.py"
    error = _error(doc)
    assert error["loc"] == "taskRoles[0].command"
    assert error["msg"].startswith("OpenPAI v1 field taskRoles[0].command: ")


def test_openpai_v1_empty_auth_file_is_ignored_and_credentials_refused_naming_the_image():
    assert parse_job(V1).spec.image == "openpai/pai.example.tensorflow"
    error = _error({**V1, "authFile": "hdfs://x/auth"})
    assert error["loc"] == "authFile"
    assert "pasture image push openpai/pai.example.tensorflow" in error["msg"]


def test_completion_counts_above_the_instances_mean_all_as_in_frameworkcontroller():
    parsed = load_job(V2)
    completion = parsed.spec.roles["worker"].completion
    assert completion is not None
    assert (completion.min_succeeded, completion.min_failed) == (None, -1)
    assert any("minSucceededInstances" in w for w in parsed.warnings)


def test_code_dir_how_to_uses_the_files_own_directory():
    error = _error({**V1, "codeDir": "https://10.0.0.1:9000/user/me/cifar10/"})
    assert error["loc"] == "codeDir"
    assert "pasture data push ./cifar10 code/cifar10" in error["msg"]
    assert "codeDir to code/cifar10" in error["msg"]


def test_translated_errors_name_the_source_field():
    error = _error(V2.replace("'ubuntu:22.04'", "'ubuntu 22.04'"))
    assert error["loc"] == "taskRoles.worker.dockerImage"
    doc = json.loads(json.dumps(V1))
    doc["taskRoles"][0]["memoryMB"] = 2**40
    assert _error(doc)["loc"] == "taskRoles[0].memoryMB"


def test_volcano_mpi_guide_job_wide_min_available_and_mpi_host():
    spec = load_job(MPI).spec
    assert spec.mpi and spec.ssh
    assert spec.mpi_host is not None
    assert (spec.mpi_host.master, spec.mpi_host.worker) == ("mpimaster", "mpiworker")
    assert spec.role_minima() == {"mpimaster": 1, "mpiworker": 0}
    assert invalid_job(spec.to_core()) is None  # the loop starts it (was: queued forever)


def test_volcano_mpi_worker_that_names_no_task_is_refused():
    error = _error(MPI.replace("--worker=mpiworker", "--worker=workers"))
    assert error["loc"] == "spec.plugins.mpi" and "--worker=workers" in error["msg"]


def test_volcano_pytorch_plugin_puts_the_master_first_for_rank_0():
    text = MPI.replace(
        'mpi: ["--master=mpimaster", "--worker=mpiworker", "--port=22"]',
        'pytorch: ["--master=mpimaster", "--worker=mpiworker"]',
    )
    text = text.replace(
        "    - replicas: 1\n      name: mpimaster", "    - replicas: 1\n      name: mpimaster"
    )
    # declare the worker first: the plugin's master still gets rank 0
    head, tasks = text.split("  tasks:\n")
    master, worker = tasks.split("    - replicas: 2\n")
    spec = load_job(head + "  tasks:\n    - replicas: 2\n" + worker + master).spec
    assert list(spec.roles) == ["mpimaster", "mpiworker"]


@pytest.mark.parametrize("events", ["events: PodFailed", "events: [PodFailed]", "event: PodFailed"])
def test_volcano_event_forms(events):
    text = MPI.replace(
        "{event: TaskCompleted, action: CompleteJob}", f"{{{events}, action: RestartJob}}"
    )
    rules = load_job(text).spec.policies.on_events
    assert [(r.event, r.action, r.role) for r in rules] == [
        ("task_failed", "restart_job", "mpimaster")
    ]


def test_volcano_duplicate_event_rules_are_refused_as_its_webhook_does():
    dup = (
        "{event: TaskCompleted, action: CompleteJob}\n"
        "        - {event: TaskCompleted, action: RestartJob}"
    )
    error = _error(MPI.replace("{event: TaskCompleted, action: CompleteJob}", dup))
    assert error["loc"] == "spec.tasks[0].policies[1].event" and "already handled" in error["msg"]
    star = "{event: '*', action: RestartJob}\n        - {event: PodFailed, action: AbortJob}"
    error = _error(MPI.replace("{event: TaskCompleted, action: CompleteJob}", star))
    assert "'*'" in error["msg"]


def test_volcano_generate_name_is_warned_not_refused():
    parsed = load_job(MPI.replace("metadata: {name: lm-mpi-job}", "metadata: {generateName: mpi-}"))
    assert parsed.spec.name.startswith("mpi-") and len(parsed.spec.name) == 9
    assert any("generateName" in w for w in parsed.warnings)


def test_volcano_volumes_with_their_kubernetes_meaning():
    mounts = """
              volumeMounts:
                - {name: data, mountPath: /data}
                - {name: ref, mountPath: /ref, readOnly: true}
                - {name: dshm, mountPath: /dev/shm}
          volumes:
            - {name: data, persistentVolumeClaim: {claimName: mnist}}
            - {name: ref, persistentVolumeClaim: {claimName: reference}}
            - {name: dshm, emptyDir: {medium: Memory, sizeLimit: 2Gi}}
          restartPolicy: OnFailure
    - replicas: 2"""
    text = MPI.replace("\n          restartPolicy: OnFailure\n    - replicas: 2", mounts, 1)
    parsed = load_job(text)
    # a claim is mounted read-write unless the volumeMount says readOnly, as on Kubernetes
    assert [m.model_dump() for m in parsed.spec.mounts] == [
        {"source": "mnist", "target": "/data", "read_only": False},
        {"source": "reference", "target": "/ref", "read_only": True},
    ]
    assert parsed.spec.roles["mpimaster"].shm == 2 * 2**30
    host = text.replace("persistentVolumeClaim: {claimName: mnist}", "hostPath: {path: /mnt/d}")
    error = _error(host)
    assert error["loc"] == "spec.tasks[0].template.spec.volumes[0].hostPath"
    assert "pasture data push ./data data" in error["msg"] and "claimName: data" in error["msg"]


MARO = """
mode: grass
name: my_job_1
components:
  actor:
    command: "bash {project root}/my_training_data/job_1/actor.sh"
    image: my_image
    mount: {target: "\\u201c{project root}\\u201d"}
    num: 2
    resources: {cpu: 1, gpu: 0, memory: 1024m}
  learner:
    command: ["python", "{project root}/my data/learner.py"]
    image: my_image
    mount: {target: "/home/admin/data:/data"}
    num: 1
    resources: {cpu: 1, gpu: 0, memory: 1024m}
"""


def test_maro_project_root_is_the_share_and_host_container_targets_mount_it():
    parsed = load_job(MARO)
    roles = parsed.spec.roles
    assert roles["actor"].command == "bash ${PASTURE_SHARE_DIR}/my_training_data/job_1/actor.sh"
    assert roles["learner"].command == "python \"${PASTURE_SHARE_DIR}\"'/my data/learner.py'"
    assert [m.target for m in parsed.spec.mounts] == ["/data"]
    assert any("pasture data push /home/admin/data ." in w for w in parsed.warnings)


def test_several_job_manifests_are_several_jobs_and_other_kinds_warned_by_document():
    job = MPI.strip()
    parsed = load_job(job + "\n---\n" + job.replace("lm-mpi-job", "second"))
    assert [s.name for s in parsed.specs] == ["lm-mpi-job", "second"]
    assert parsed.specs[1].mpi_host is not None
    queue = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\n"
    parsed = load_job(queue + "---\n" + job)  # issue 37: the Jobs are submitted
    assert [s.name for s in parsed.specs] == ["lm-mpi-job"]
    assert any(
        w.startswith("Volcano field items[0].kind") and "virtual cluster" in w
        for w in parsed.warnings
    )
    error = _error(queue + "---\n" + queue.replace("q}", "r}"))  # no Job at all
    assert error["loc"] == "items" and "no batch.volcano.sh/v1alpha1 Job" in error["msg"]
    bad = job.replace("replicas: 2", "replicas: 20000")
    error = _error(job.replace("lm-mpi-job", "first") + "\n---\n" + bad)
    assert error["loc"] == "items[1].spec.tasks[1].replicas"
    with pytest.raises(SpecError):  # two non-Kubernetes documents stay refused
        load_job("name: a\nroles: {a: {command: t}}\n---\nname: b\nroles: {a: {command: t}}\n")


def test_every_split_of_a_job_wide_min_available_is_a_valid_gang():
    """Volcano's spec.minAvailable is a count of tasks over all of them: for every role
    layout (up to 3 roles of 1..3 replicas, each with or without its own minimum) and every
    allowed job-wide count, the roles' minima sum to the count, each within 0..replicas,
    and the core accepts the job."""
    import itertools

    layouts = [
        list(zip(reps, mins, strict=True))
        for n in (1, 2, 3)
        for reps in itertools.product((1, 2, 3), repeat=n)
        for mins in itertools.product(*[(None, *range(1, r + 1)) for r in reps])
    ]
    checked = 0
    for layout in layouts:
        roles = {
            f"r{i}": {"command": "t", "replicas": r, **({"min_available": m} if m else {})}
            for i, (r, m) in enumerate(layout)
        }
        floor = max(1, sum(m or 0 for _, m in layout))
        for count in range(floor, sum(r for r, _ in layout) + 1):
            spec = parse_job({"name": "x", "min_available": count, "roles": roles}).spec
            minima = spec.role_minima()
            assert sum(minima.values()) == count
            for (r, m), got in zip(layout, minima.values(), strict=True):
                assert (m or 0) <= got <= r
            assert invalid_job(spec.to_core()) is None
            checked += 1
    assert checked > 500


def test_files_that_are_not_jobs_say_what_they_are_and_what_to_submit():
    queue = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\n"
    error = _error(queue)
    assert error["loc"] == "kind" and "virtual cluster" in error["msg"]
    create = "mode: grass\nname: c\ncloud: {infra: azure}\nmaster: {node_size: x}\n"
    error = _error(create)
    assert error["loc"] == "mode" and "start-job" in error["msg"]


def test_a_priority_class_of_the_file_is_the_jobs_priority():
    """Issue 37: the value of the PriorityClass the Job names, within pasture's 0..100
    (beyond it the nearest end, warned); a name neither in the file nor pasture's refused."""
    job = MPI.strip()
    pc = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: %s}\nvalue: %d\n"
    named = job.replace("spec:\n", "spec:\n  priorityClassName: team-high\n", 1)
    parsed = load_job(pc % ("team-high", 80) + "---\n" + named)
    assert parsed.specs[0].priority == 80
    parsed = load_job(pc % ("team-high", 1000000) + "---\n" + named)
    assert parsed.specs[0].priority == 100
    assert any("value 1000000" in w and "priority is 100" in w for w in parsed.warnings)
    error = _error(pc % ("other", 80) + "---\n" + named)
    assert error["loc"] == "items[1].spec.priorityClassName"
    assert "PriorityClass of that name in the same file" in error["msg"]
