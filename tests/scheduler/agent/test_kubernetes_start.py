"""Task pods that never start, and what the kubelet saw of a finished pod, reach the
failure diagnosis (scheduler/agent/kubernetes.py, scheduler/rules/diagnosis_rules.yaml).

Pods are constructed as the API server returns them (V1Pod through the client's own
deserializer); the executor reads them through an in-memory stand-in of ``CoreV1Api``
(no cluster on the build machine). The last test runs the real agent over a real
redis-server with that executor."""

from __future__ import annotations

import json

import pytest
import redis
from kubernetes import client as k8s

from scheduler.agent.kubernetes import (
    START_FAILED_EXIT,
    KubernetesExecutor,
    PodSettings,
    pod_evidence,
    start_failure,
)
from scheduler.rules.diagnosis import diagnose_report
from scheduler.store import Store
from tests.scheduler.agent.test_agent import make_agent, place, until

API = k8s.ApiClient()
HANDLE = "pasture/task-train-w-0-a1"


def as_pod(d: dict) -> k8s.V1Pod:
    return API.deserialize(json.dumps(d), "V1Pod", "application/json")


def pod(
    phase: str = "Pending",
    *,
    waiting: str | None = None,
    terminated: str | None = None,
    exit_code: int = 0,
    reason: str | None = None,
    message: str = "",
    name: str = "task-train-w-0-a1",
) -> dict:
    """A task pod as GET /api/v1/namespaces/pasture/pods/<name> returns it."""
    if waiting:
        state = {"waiting": {"reason": waiting, "message": f"{waiting}: details"}}
    elif terminated:
        state = {"terminated": {"exitCode": exit_code, "reason": terminated}}
    else:
        state = {"running": {"startedAt": "2024-11-04T09:40:00Z"}}
    status: dict = {
        "phase": phase,
        "containerStatuses": [
            {
                "name": "task",
                "ready": False,
                "restartCount": 0,
                "image": "x",
                "imageID": "",
                "state": state,
            }
        ],
    }
    if reason:
        status.update(reason=reason, message=message)
        if phase == "Failed" and not terminated:
            del status["containerStatuses"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "pasture"},
        "spec": {"nodeName": "aks-a100-1", "containers": [{"name": "task", "image": "x"}]},
        "status": status,
    }


class Pods:
    """CoreV1Api stand-in: pods created, read (with the status the test set) and deleted."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}
        self.status: dict | None = None  # the status every read pod has

    def create_namespaced_pod(self, namespace: str, body: k8s.V1Pod) -> k8s.V1Pod:
        self.pods[body.metadata.name] = API.sanitize_for_serialization(body)
        return body

    def read_namespaced_pod(self, name: str, namespace: str) -> k8s.V1Pod:
        if name not in self.pods:
            raise k8s.ApiException(status=404, reason="Not Found")
        d = dict(self.pods[name])
        if self.status is not None:
            d["status"] = self.status
        return as_pod(d)

    def delete_namespaced_pod(self, name: str, namespace: str, **kw) -> None:
        if self.pods.pop(name, None) is None:
            raise k8s.ApiException(status=404, reason="Not Found")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def executor(api, clock, timeout=300.0) -> KubernetesExecutor:
    settings = PodSettings(share_claim=None, start_timeout_s=timeout)
    return KubernetesExecutor(settings=settings, api=api, clock=clock)


class Answers:
    def __init__(self, *answers: dict) -> None:
        self.answers = list(answers)

    def read_namespaced_pod(self, name, namespace):
        return as_pod(self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])


def test_start_failures_are_read_from_every_container():
    assert start_failure(as_pod(pod(waiting="ImagePullBackOff"))) == (
        "ImagePullBackOff",
        "ImagePullBackOff: details",
    )
    assert start_failure(as_pod(pod(waiting="ContainerCreating"))) is None
    assert start_failure(as_pod(pod("Running"))) is None
    sidecar = pod(waiting=None)
    sidecar["status"]["initContainerStatuses"] = [
        {
            "name": "fence",
            "ready": False,
            "restartCount": 0,
            "image": "p",
            "imageID": "",
            "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}},
        }
    ]
    assert start_failure(as_pod(sidecar)) == ("ErrImagePull", "not found")


def test_an_image_pull_backing_off_fails_the_task_after_the_start_timeout():
    clock = Clock()
    api = Answers(pod(waiting="ErrImagePull"), pod(waiting="ImagePullBackOff"))
    ex = executor(api, clock, timeout=300)
    assert ex.poll(HANDLE) is None  # first seen failing
    clock.now += 299
    assert ex.poll(HANDLE) is None  # ErrImagePull <-> ImagePullBackOff: one failure
    clock.now += 1
    assert ex.poll(HANDLE) == START_FAILED_EXIT
    assert ex.poll(HANDLE) == START_FAILED_EXIT  # stays ended until cleaned up
    ev = ex.evidence(HANDLE)
    assert ev["k8s_reason"] == "ImagePullBackOff"
    diag = diagnose_report(None, START_FAILED_EXIT, "exited with code 125", ev)
    assert diag["kind"] == "image_pull" and diag["retry"] is False


def test_a_pod_that_recovers_restarts_the_timeout():
    clock = Clock()
    api = Answers(pod(waiting="ImagePullBackOff"))
    ex = executor(api, clock, timeout=60)
    assert ex.poll(HANDLE) is None
    clock.now += 50
    api.answers = [pod(waiting="ContainerCreating")]  # the registry answered: pulling
    assert ex.poll(HANDLE) is None
    api.answers = [pod(waiting="ImagePullBackOff")]  # and failed again
    clock.now += 50
    assert ex.poll(HANDLE) is None  # 0 s into the new failure, not 100
    clock.now += 60
    assert ex.poll(HANDLE) == START_FAILED_EXIT


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("InvalidImageName", "invalid_image_name"),
        ("ErrImageNeverPull", "image_pull"),
    ],
)
def test_permanent_start_failures_fail_at_once(reason, kind):
    ex = executor(Answers(pod(waiting=reason)), Clock())
    assert ex.poll(HANDLE) == START_FAILED_EXIT
    diag = diagnose_report(None, START_FAILED_EXIT, "", ex.evidence(HANDLE))
    assert diag["kind"] == kind and diag["retry"] is False


def test_a_missing_secret_is_a_container_config_failure():
    clock = Clock()
    ex = executor(Answers(pod(waiting="CreateContainerConfigError")), clock, timeout=30)
    assert ex.poll(HANDLE) is None
    clock.now += 30
    assert ex.poll(HANDLE) == START_FAILED_EXIT
    diag = diagnose_report(None, START_FAILED_EXIT, "", ex.evidence(HANDLE))
    assert diag["kind"] == "container_config"


@pytest.mark.parametrize(
    ("answer", "code", "kind", "retry"),
    [
        (pod("Failed", terminated="OOMKilled", exit_code=137), 137, "oom_killed", False),
        (
            pod("Failed", reason="Evicted", message="The node was low on resource: memory."),
            1,
            "evicted",
            True,
        ),
        (
            pod(
                "Failed",
                reason="UnexpectedAdmissionError",
                message="Allocate failed due to requested number of devices unavailable",
            ),
            1,
            "admission_error",
            True,
        ),
        (pod("Failed", terminated="Error", exit_code=137), 137, "signal", True),
    ],
    ids=["oom-killed", "evicted", "admission", "plain-sigkill"],
)
def test_what_the_kubelet_saw_reaches_the_classifier(answer, code, kind, retry):
    ex = executor(Answers(answer), Clock())
    assert ex.poll(HANDLE) == code
    ev = ex.evidence(HANDLE)
    assert ev == pod_evidence(as_pod(answer))
    diag = diagnose_report(None, code, f"exited with code {code}", ev)
    assert (diag["kind"], diag["retry"]) == (kind, retry)


def test_settings_read_the_start_timeout():
    env = {"PASTURE_K8S_NAMESPACE": "p", "PASTURE_K8S_START_TIMEOUT_S": "42"}
    assert PodSettings.from_env(env).start_timeout_s == 42
    assert PodSettings.from_env({"PASTURE_K8S_NAMESPACE": "p"}).start_timeout_s == 300
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ValueError, match="PASTURE_K8S_START_TIMEOUT_S"):
            PodSettings.from_env({**env, "PASTURE_K8S_START_TIMEOUT_S": bad})


def test_the_agent_fails_an_image_pull_backoff_task_with_an_image_pull_diagnosis(
    redis_url, tmp_path
):
    """The real agent, over a real redis-server, with the kubernetes executor: the pod it
    created waits in ImagePullBackOff past the start timeout; the task is reported failed
    with the ``image_pull`` diagnosis and the pod is deleted."""
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    agent = make_agent(store, tmp_path, redis_url)
    api, clock = Pods(), Clock()
    agent.executor = executor(api, clock, timeout=120)
    agent.register()
    place(store, "train", "python train.py", image="registry.example/train:does-not-exist")
    until(lambda: agent.reconcile() or api.pods)
    api.status = pod(waiting="ImagePullBackOff")["status"]
    agent.reconcile()
    clock.now += 121
    (t,) = until(lambda: agent.reconcile() or [t for t in store.tasks("train") if t.done])
    assert t.state == "failed" and t.exit_code == START_FAILED_EXIT
    assert t.diagnosis["kind"] == "image_pull" and t.diagnosis["retry"] is False
    assert api.pods == {}  # the agent's cleanup deleted the pod


def test_task_pods_keep_their_node_from_the_autoscalers_scale_down(tmp_path):
    from scheduler.agent.executor import TaskLaunch
    from scheduler.agent.kubernetes import SAFE_TO_EVICT, build_pod

    launch = TaskLaunch(
        task_id="train-w-0-a1",
        job="train",
        role="w",
        index=0,
        attempt=1,
        node="aks-a100-1",
        command="python train.py",
        image=None,
        env={},
        cpu_m=1000,
        memory=2**30,
        gpus=[0],
        log_path=tmp_path / "w-0.log",
        share_dir=tmp_path,
        state_dir=tmp_path / "state",
    )
    pod = build_pod(launch, PodSettings(share_claim=None))
    assert pod.metadata.annotations[SAFE_TO_EVICT] == "false"
