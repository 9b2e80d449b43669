"""Pods of the kubernetes executor, checked as Kubernetes client models: each serializes
to the API's wire form and deserializes back into a valid V1Pod with the same spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client as k8s

from scheduler.agent.agent import make_executor
from scheduler.agent.executor import TaskLaunch, log_redirect
from scheduler.agent.kubernetes import (
    KubernetesExecutor,
    PodSettings,
    build_pod,
    exit_code,
    pod_name,
)

API = k8s.ApiClient()
DISCOVERY = {
    "PASTURE_JOB_NAME": "mnist-ddp",
    "PASTURE_TASK_ROLE": "worker",
    "PASTURE_TASK_INDEX": "1",
    "PASTURE_ROLES": "ps,worker",
    "PASTURE_ROLE_WORKER_HOSTS": "10.224.0.5:20000,10.224.0.6:20000",
    "WORLD_SIZE": "3",
    "RANK": "2",
    "MASTER_ADDR": "10.224.0.4",
    "MASTER_PORT": "20000",
    "PAI_TASK_ROLE_worker_HOST_LIST": "10.224.0.5:20000,10.224.0.6:20000",
    "PASTURE_SHARE_DIR": "/mnt/pasture",
}


def launch(**kw) -> TaskLaunch:
    fields = {
        "task_id": "mnist-ddp-worker-1-a1",
        "job": "mnist-ddp",
        "role": "worker",
        "index": 1,
        "attempt": 1,
        "node": "aks-a100-12345678-vmss000002",
        "command": "python -m train --epochs 3",
        "image": "pastureacr.azurecr.io/train:1",
        "env": dict(DISCOVERY),
        "cpu_m": 3500,
        "memory": 8 * 1024**3,
        "gpus": [0, 1],
        "log_path": Path("/mnt/pasture/jobs/mnist-ddp/logs/worker-1.log"),
        "share_dir": Path("/mnt/pasture"),
        "state_dir": Path("/var/lib/pasture/tasks/x"),
    }
    fields.update(kw)
    return TaskLaunch(**fields)


def round_trip(pod: k8s.V1Pod) -> tuple[dict, k8s.V1Pod]:
    """Wire form (camelCase JSON) and the V1Pod the client deserializes from it."""
    wire = API.sanitize_for_serialization(pod)
    text = json.dumps(wire)  # what is sent to the API server is plain JSON
    return wire, API.deserialize(text, "V1Pod", "application/json")


SETTINGS = PodSettings(
    namespace="pasture",
    share_claim="pasture-share",
    default_image="pastureacr.azurecr.io/pasture:0.1.0",
    tolerations=(
        "nvidia.com/gpu=present:NoSchedule",
        "kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
        "dedicated:NoExecute",
    ),
)


def test_pod_is_bound_to_the_node_the_core_chose():
    wire, pod = round_trip(build_pod(launch(), SETTINGS))
    assert wire["spec"]["nodeName"] == "aks-a100-12345678-vmss000002"
    assert pod.spec.node_name == "aks-a100-12345678-vmss000002"
    assert pod.spec.restart_policy == "Never"
    assert wire["metadata"]["namespace"] == "pasture"
    assert wire["metadata"]["name"] == "task-mnist-ddp-worker-1-a1"
    assert wire["metadata"]["labels"]["pasture/job"] == "mnist-ddp"
    assert wire["metadata"]["labels"]["pasture/index"] == "1"
    assert wire["metadata"]["annotations"]["pasture/task-id"] == "mnist-ddp-worker-1-a1"


def test_resources_requests_equal_limits_with_gpus():
    wire, pod = round_trip(build_pod(launch(), SETTINGS))
    (container,) = wire["spec"]["containers"]
    limits = container["resources"]["limits"]
    assert limits == {"cpu": "3500m", "memory": str(8 * 1024**3), "nvidia.com/gpu": "2"}
    assert container["resources"]["requests"] == limits
    cpu_only = API.sanitize_for_serialization(build_pod(launch(gpus=[]), SETTINGS))
    assert "nvidia.com/gpu" not in cpu_only["spec"]["containers"][0]["resources"]["limits"]


def test_tolerations_match_the_gpu_pool_taints():
    wire, _ = round_trip(build_pod(launch(), SETTINGS))
    assert wire["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {
            "key": "kubernetes.azure.com/scalesetpriority",
            "operator": "Equal",
            "value": "spot",
            "effect": "NoSchedule",
        },
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
    ]


def test_only_the_job_directory_of_the_share_is_mounted_and_logs_go_to_it():
    wire, _ = round_trip(build_pod(launch(), SETTINGS))
    (container,) = wire["spec"]["containers"]
    assert container["volumeMounts"] == [  # the job's directory only, never the claim's root
        {
            "name": "pasture-share",
            "mountPath": "/mnt/pasture/jobs/mnist-ddp",
            "subPath": "jobs/mnist-ddp",
        }
    ]
    assert container["workingDir"] == "/mnt/pasture/jobs/mnist-ddp"
    assert wire["spec"]["volumes"] == [
        {"name": "pasture-share", "persistentVolumeClaim": {"claimName": "pasture-share"}}
    ]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    script = container["command"][2]
    assert script == (
        log_redirect(Path("/mnt/pasture/jobs/mnist-ddp/logs/worker-1.log"))
        + "\npython -m train --epochs 3"
    )


def test_discovery_env_is_passed_whole_and_network_is_the_nodes():
    wire, _ = round_trip(build_pod(launch(), SETTINGS))
    env = {e["name"]: e["value"] for e in wire["spec"]["containers"][0]["env"]}
    assert env == DISCOVERY
    assert wire["spec"]["hostNetwork"] is True
    assert wire["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    bridged = PodSettings(host_network=False)
    other = API.sanitize_for_serialization(build_pod(launch(), bridged))
    assert other["spec"]["hostNetwork"] is False and other["spec"]["dnsPolicy"] == "ClusterFirst"


def test_image_defaults_when_the_role_names_none():
    wire, _ = round_trip(build_pod(launch(image=None), SETTINGS))
    assert wire["spec"]["containers"][0]["image"] == "pastureacr.azurecr.io/pasture:0.1.0"


@pytest.mark.parametrize(
    "task_id",
    ["Big_Job.v2-Worker-0-a3", "x" * 80 + "-worker-0-a1", "job-ps-0-a1"],
)
def test_pod_names_are_dns_labels_and_unique(task_id):
    name = pod_name(task_id)
    assert len(name) <= 63
    assert name[0].isalnum() and name[-1].isalnum()
    assert all(c.islower() or c.isdigit() or c == "-" for c in name)
    assert pod_name(task_id + "x") != name


def test_malformed_taint_is_rejected():
    with pytest.raises(ValueError, match="taint"):
        build_pod(launch(), PodSettings(tolerations=("no-effect",)))


def status(phase, terminated=None) -> k8s.V1Pod:
    cs = []
    if terminated is not None:
        cs = [
            k8s.V1ContainerStatus(
                name="task",
                image="i",
                image_id="",
                ready=False,
                restart_count=0,
                state=k8s.V1ContainerState(
                    terminated=k8s.V1ContainerStateTerminated(exit_code=terminated)
                ),
            )
        ]
    return k8s.V1Pod(status=k8s.V1PodStatus(phase=phase, container_statuses=cs))


def test_exit_code_from_pod_status():
    assert exit_code(status("Pending")) is None
    assert exit_code(status("Running")) is None
    assert exit_code(status("Succeeded", 0)) == 0
    assert exit_code(status("Failed", 137)) == 137
    assert exit_code(status("Failed")) == 1  # evicted before the container ran


def test_settings_from_agent_environment():
    s = PodSettings.from_env(
        {
            "PASTURE_K8S_NAMESPACE": "jobs",
            "PASTURE_K8S_SHARE_CLAIM": "share",
            "PASTURE_K8S_IMAGE": "reg/p:1",
            "PASTURE_K8S_TOLERATIONS": '["gpu=yes:NoSchedule"]',
        },
        network="bridge",
    )
    assert s == PodSettings(
        namespace="jobs",
        share_claim="share",
        default_image="reg/p:1",
        tolerations=("gpu=yes:NoSchedule",),
        host_network=False,
    )
    with pytest.raises(ValueError, match="PASTURE_K8S_TOLERATIONS"):
        PodSettings.from_env({"PASTURE_K8S_TOLERATIONS": '{"a": 1}'})


def test_agent_factory_builds_the_kubernetes_executor():
    api = k8s.CoreV1Api(API)  # not called: no cluster here
    executor = make_executor("kubernetes", cli="podman", network="host", api=api, settings=SETTINGS)
    assert isinstance(executor, KubernetesExecutor)
    assert executor.kind == "kubernetes" and executor.settings is SETTINGS


def test_a_gpu_less_task_pod_sees_no_gpu_and_no_task_picks_its_own():
    """Issue 35 item 7: AKS GPU nodes run the NVIDIA runtime, which exposes every GPU to a
    container that asks for none unless NVIDIA_VISIBLE_DEVICES=void (the container
    executor's isolation); a job's own GPU variables never reach a pod (on main a
    GPU-less pod had neither, and a job's NVIDIA_VISIBLE_DEVICES=all went through)."""
    hostile = {**DISCOVERY, "NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0,1"}
    wire, _ = round_trip(build_pod(launch(gpus=[], env=hostile), PodSettings()))
    env = {e["name"]: e.get("value") for e in wire["spec"]["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert "nvidia.com/gpu" not in wire["spec"]["containers"][0]["resources"]["limits"]
    wire, _ = round_trip(build_pod(launch(env=hostile), PodSettings()))
    env = {e["name"]: e.get("value") for e in wire["spec"]["containers"][0]["env"]}
    # the device plugin sets both to the pod's allocated devices at admission
    assert "NVIDIA_VISIBLE_DEVICES" not in env and "CUDA_VISIBLE_DEVICES" not in env
    assert wire["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
