"""Every pod the kubernetes executor builds is a valid Kubernetes object: the wire form
(what create_namespaced_pod sends) passes kubernetes-validate --strict on 1.30-1.34, for
tasks with and without GPUs, share, image, and with the tolerations of a Spot pool."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client as k8s

from scheduler.agent.executor import TaskLaunch
from scheduler.agent.kubernetes import PodSettings, build_pod
from scheduler.k8s.taints import SPOT_TAINT
from tests.k8s_manifests import validate

API = k8s.ApiClient()


def launch(**kw) -> TaskLaunch:
    fields = {
        "task_id": "Mnist_DDP-worker-1-a1",
        "job": "Mnist_DDP",
        "role": "worker",
        "index": 1,
        "attempt": 1,
        "node": "aks-a100-38541297-vmss000000",
        "command": "python -m train --epochs 3",
        "image": "pastureacr.azurecr.io/train:1",
        "env": {"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "20000"},
        "cpu_m": 3500,
        "memory": 8 * 1024**3,
        "gpus": [0, 1],
        "log_path": Path("/mnt/pasture/jobs/Mnist_DDP/logs/worker-1.log"),
        "share_dir": Path("/mnt/pasture"),
        "state_dir": Path("/var/lib/pasture/tasks/x"),
    }
    fields.update(kw)
    return TaskLaunch(**fields)


SPOT_POOL = PodSettings(
    namespace="pasture",
    share_claim="pasture-share",
    default_image="pastureacr.azurecr.io/pasture@sha256:" + "0" * 64,
    tolerations=("nvidia.com/gpu=present:NoSchedule", SPOT_TAINT, "dedicated:NoExecute"),
)


@pytest.mark.parametrize(
    ("task", "settings"),
    [
        (launch(), SPOT_POOL),
        (launch(gpus=[], image=None), SPOT_POOL),
        (launch(task_id="x" * 80), PodSettings(share_claim=None, tolerations=())),
        (launch(), PodSettings(host_network=False, labels={"team": "vision"})),
        (launch(entrypoint=True, args=["--epochs", "3"], working_dir="/app"), SPOT_POOL),
    ],
    ids=["gpu-spot", "cpu-default-image", "long-id-no-share", "pod-network", "entrypoint"],
)
def test_task_pods_are_valid_objects(task, settings):
    pod = API.sanitize_for_serialization(build_pod(task, settings))
    validate(pod)
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
