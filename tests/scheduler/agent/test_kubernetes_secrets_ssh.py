"""Job secrets and ssh on the kubernetes executor, checked as the Kubernetes client's models
(no cluster on the test machine): the values go to a per-task Secret owned by the pod and
never into the pod spec; a job with ssh gets its node-local ssh directory as a hostPath
volume and the start-up script starts sshd on the task's ``ssh`` port."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path

import pytest
from kubernetes import client as k8s

from scheduler import jobkey
from scheduler.agent import startup
from scheduler.agent.executor import ExecutorError
from scheduler.agent.k8s_secrets import build_secret, secret_name
from scheduler.agent.kubernetes import KubernetesExecutor, build_pod, pod_of
from scheduler.spec import parse_job_spec
from scheduler.store import TaskRecord
from tests.k8s_manifests import validate
from tests.scheduler.agent.test_kubernetes_pods import SETTINGS, launch, round_trip

API = k8s.ApiClient()
TOKEN = "hf_s3cr3t-Value-42"
POD = "task-mnist-ddp-worker-1-a1"


def secret_launch(**kw):
    env = {"PASTURE_JOB_NAME": "mnist-ddp", "PASTURE_SECRET_HF_TOKEN": TOKEN}
    return launch(env=env, command="huggingface-cli login --token ${PASTURE_SECRET_HF_TOKEN}", **kw)


def test_secret_values_are_referenced_never_written_into_the_pod():
    wire, pod = round_trip(build_pod(secret_launch(), SETTINGS))
    assert TOKEN not in json.dumps(wire)
    env = {e["name"]: e for e in wire["spec"]["containers"][0]["env"]}
    assert env["PASTURE_JOB_NAME"] == {"name": "PASTURE_JOB_NAME", "value": "mnist-ddp"}
    assert env["PASTURE_SECRET_HF_TOKEN"] == {
        "name": "PASTURE_SECRET_HF_TOKEN",
        "valueFrom": {
            "secretKeyRef": {
                "name": f"{POD}-secrets",
                "key": "PASTURE_SECRET_HF_TOKEN",
                "optional": False,
            }
        },
    }
    assert pod.spec.containers[0].env[1].value_from.secret_key_ref.name == secret_name(POD)


def test_the_secret_holds_the_values_and_is_owned_by_the_pod():
    pod = build_pod(secret_launch(), SETTINGS)
    secret = build_secret(secret_launch().env, pod, "0b7d1c4e-uid")
    wire = API.sanitize_for_serialization(secret)
    back = API.deserialize(json.dumps(wire), "V1Secret", "application/json")
    assert back.metadata.name == f"{POD}-secrets" and back.metadata.namespace == "pasture"
    assert back.immutable is True and back.type == "Opaque"
    assert {k: base64.b64decode(v).decode() for k, v in back.data.items()} == {
        "PASTURE_SECRET_HF_TOKEN": TOKEN
    }
    (owner,) = wire["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": "0b7d1c4e-uid"}
    assert back.metadata.labels["pasture/job"] == "mnist-ddp"
    assert build_secret({"PASTURE_JOB_NAME": "x"}, pod, "u") is None  # no secrets, no Secret


class Api:
    """The CoreV1Api calls of start and cleanup, answered from memory like the API server
    (uids on create, 404 on deleting what is gone, a chosen status for secrets)."""

    def __init__(self, secret_status: int | None = None):
        self.pods: dict[str, k8s.V1Pod] = {}
        self.secrets: dict[str, k8s.V1Secret] = {}
        self.secret_status = secret_status

    def create_namespaced_pod(self, namespace, pod):
        pod.metadata.uid = f"uid-{pod.metadata.name}"
        self.pods[pod.metadata.name] = pod
        return pod

    def create_namespaced_secret(self, namespace, secret):
        if self.secret_status:
            raise k8s.ApiException(status=self.secret_status, reason="Forbidden")
        self.secrets[secret.metadata.name] = secret

    def delete_namespaced_pod(self, name, namespace, grace_period_seconds=None):
        if self.pods.pop(name, None) is None:
            raise k8s.ApiException(status=404, reason="NotFound")

    def delete_namespaced_secret(self, name, namespace, grace_period_seconds=None):
        if self.secrets.pop(name, None) is None:
            raise k8s.ApiException(status=404, reason="NotFound")


def test_start_creates_the_secret_with_the_pods_uid_and_cleanup_deletes_both():
    api = Api()
    ex = KubernetesExecutor(settings=SETTINGS, api=api)
    handle = ex.start(secret_launch())
    assert pod_of(handle) == ("pasture", POD)
    secret = api.secrets[f"{POD}-secrets"]
    assert secret.metadata.owner_references[0].uid == f"uid-{POD}"
    ex.cleanup(handle)
    assert api.pods == {} and api.secrets == {}
    ex.start(launch())  # a task without secrets makes no Secret
    assert api.secrets == {} and list(api.pods) == [POD]


def test_a_secret_the_api_refuses_fails_the_start_and_removes_the_pod():
    api = Api(secret_status=403)
    ex = KubernetesExecutor(settings=SETTINGS, api=api)
    with pytest.raises(ExecutorError, match=r"cannot create secret .*403.*secrets create"):
        ex.start(secret_launch())
    assert api.pods == {}


SSH_SPEC = parse_job_spec(
    {
        "name": "hvd",
        "ssh": True,
        "roles": {"worker": {"replicas": 2, "command": "horovodrun -np 2 python train.py"}},
    }
)


KEY = jobkey.generate()


def ssh_boot(tmp_path: Path):
    tasks = [
        TaskRecord("worker", i, 1, f"n{i}", f"10.224.0.{5 + i}", {"main": 31000, "ssh": 31001 + i})
        for i in range(2)
    ]
    share = tmp_path / "share"
    task_dir = tmp_path / "agent" / "tasks" / "hvd-worker-1-a1"
    boot = startup.prepare(
        job="hvd",
        user="u",
        spec=SSH_SPEC,
        tasks=tasks,
        me=tasks[1],
        node="n1",
        share=share,
        task_dir=task_dir,
        task_id="hvd-worker-1-a1",
        executor_kind="kubernetes",
        ssh_key=KEY,
    )
    return boot, share, task_dir


def test_the_startup_script_of_a_pod_starts_sshd_on_the_tasks_ssh_port(tmp_path):
    boot, share, task_dir = ssh_boot(tmp_path)
    assert (str(task_dir / "ssh"), "/run/pasture/ssh") in boot.mounts
    assert "-D -e -f /run/pasture/ssh/sshd_config" in boot.command
    assert 'cp /run/pasture/ssh/config "$HOME/.ssh/config"' in boot.command  # own filesystem
    assert "not available with the kubernetes executor" not in boot.command
    assert "Port 31002\n" in (task_dir / "ssh" / "sshd_config").read_text()
    assert (task_dir / "ssh" / "id_job").read_text() == KEY  # the submission's, not the share's
    assert not (share / "jobs" / "hvd" / ".ssh").exists()
    config = (task_dir / "ssh" / "config").read_text()
    assert "Host worker-0 " in config and "HostName 10.224.0.5\n  Port 31001" in config
    assert boot.env["PASTURE_SSH_PORT"] == "31002"
    assert boot.env["PASTURE_SSH_CONFIG"] == "/run/pasture/ssh/config"


def test_the_pod_mounts_the_ssh_directory_from_the_node_and_runs_the_script(tmp_path):
    boot, share, task_dir = ssh_boot(tmp_path)
    settings = replace(SETTINGS, agent_dir=str(tmp_path / "agent"))
    task = launch(
        command=boot.command, env=boot.env, mounts=boot.mounts, share_dir=share, state_dir=task_dir
    )
    wire, _ = round_trip(build_pod(task, settings))
    spec = wire["spec"]
    assert spec["hostNetwork"] is True
    (vol,) = [v for v in spec["volumes"] if "hostPath" in v and v["name"].startswith("pasture-m")]
    assert vol["hostPath"] == {"path": str(task_dir / "ssh"), "type": "Directory"}
    mounts = spec["containers"][0]["volumeMounts"]
    assert {"name": vol["name"], "mountPath": "/run/pasture/ssh"} in mounts
    script = spec["containers"][0]["command"][2]
    assert "/run/pasture/ssh/sshd_config" in script and script.endswith(
        "horovodrun -np 2 python train.py"
    )
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["PASTURE_SSH_PORT"] == "31002"


def test_ssh_needs_host_network_and_the_agent_dir(tmp_path):
    boot, share, task_dir = ssh_boot(tmp_path)
    task = launch(mounts=boot.mounts, share_dir=share, state_dir=task_dir)
    pod_net = replace(SETTINGS, agent_dir=str(tmp_path / "agent"), host_network=False)
    with pytest.raises(ExecutorError, match="hostNetwork"):
        KubernetesExecutor(settings=pod_net, api=Api()).start(task)
    with pytest.raises(ExecutorError, match="PASTURE_K8S_AGENT_DIR=unset"):
        KubernetesExecutor(settings=SETTINGS, api=Api()).start(task)


def test_job_mounts_on_the_share_become_sub_paths_of_its_claim():
    task = launch(mounts=[("/mnt/pasture/datasets/imagenet", "/data:ro")])
    wire, _ = round_trip(build_pod(task, SETTINGS))
    mounts = wire["spec"]["containers"][0]["volumeMounts"]
    assert {
        "name": "pasture-share",
        "mountPath": "/data",
        "subPath": "datasets/imagenet",
        "readOnly": True,
    } in mounts


def test_the_secret_and_the_pods_are_valid_kubernetes_objects(tmp_path):
    """kubernetes-validate --strict on 1.30-1.34, as test_kubernetes_validate does."""
    pod = build_pod(secret_launch(), SETTINGS)
    validate(API.sanitize_for_serialization(pod))
    validate(API.sanitize_for_serialization(build_secret(secret_launch().env, pod, "uid-1")))
    boot, share, task_dir = ssh_boot(tmp_path)
    settings = replace(SETTINGS, agent_dir=str(tmp_path / "agent"))
    task = launch(command=boot.command, env=boot.env, mounts=boot.mounts, state_dir=task_dir)
    validate(API.sanitize_for_serialization(build_pod(replace(task, share_dir=share), settings)))


def test_an_agent_on_kubernetes_starts_a_job_with_secrets(tmp_path, redis_url):
    """The agent (real redis-server) opens the job's sealed values and its kubernetes
    executor puts them in the pod's Secret only: the pod, the task record and the store's
    job record hold no value (the agent no longer refuses secrets on kubernetes)."""
    import redis as redis_py

    from scheduler.sealed import seal, write_key
    from scheduler.store import Store
    from tests.scheduler.agent.test_agent import make_agent, place

    key_file = write_key(tmp_path / "secrets.key")
    store = Store(redis_py.Redis.from_url(redis_url, decode_responses=True))
    agent = make_agent(store, tmp_path, redis_url, secrets_key_file=str(key_file))
    api = Api()
    agent.executor = KubernetesExecutor(settings=replace(SETTINGS, share_claim=None), api=api)
    real_create = store.create_job

    def create_sealed(spec, user="", sealed_secrets=""):
        token = seal(key_file.read_bytes().strip(), spec.name, {"HF_TOKEN": TOKEN})
        return real_create(spec, user, sealed_secrets=token)

    store.create_job = create_sealed
    agent.register()
    place(store, "sj", "echo ${PASTURE_SECRET_HF_TOKEN} | sha256sum", secrets={"HF_TOKEN": TOKEN})
    agent.reconcile()
    (pod,) = api.pods.values()
    (secret,) = api.secrets.values()
    assert TOKEN not in json.dumps(API.sanitize_for_serialization(pod))
    assert base64.b64decode(secret.data["PASTURE_SECRET_HF_TOKEN"]).decode() == TOKEN
    assert secret.metadata.owner_references[0].name == pod.metadata.name
    rec = store.task("sj", "w-0")
    assert rec.state == "running", rec
    assert TOKEN not in json.dumps(store.r.hgetall("job:sj"))
