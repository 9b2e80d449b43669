"""A Spot preemption must reach the scheduler as the node's loss, not as the task's own
failure. AKS node auto-drain evicts a Spot node's pods on the preemption notice (its
DaemonSet agent stays), then Azure deletes the VM and the agent with it. The kubernetes
executor therefore reports a task pod that the infrastructure ended (``DisruptionTarget``
condition) or that vanished as still running for ``disruption_hold_s``: the agent's
heartbeat stops first and the loop marks the node and its tasks lost.

The pods are API server answers (JSON) deserialized by the Kubernetes client, replayed
in order by :class:`RecordedPods` (no cluster exists on the build machine)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s

from scheduler.agent.kubernetes import KubernetesExecutor, PodSettings, disruption

API = k8s.ApiClient()
HANDLE = "pasture/task-mnist-ddp-worker-1-a1"


def pod(phase: str, *, exit_code: int | None = None, disrupted: str | None = None) -> dict:
    """A task pod as GET /api/v1/namespaces/pasture/pods/<name> returns it."""
    conditions = [
        {"type": "Ready", "status": "False" if exit_code is not None else "True"},
        {"type": "PodScheduled", "status": "True"},
    ]
    if disrupted:
        conditions.insert(
            0,
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": disrupted,
                "message": "Eviction API: evicting",
                "lastTransitionTime": "2024-11-04T10:02:11Z",
            },
        )
    state = (
        {"running": {"startedAt": "2024-11-04T09:40:00Z"}}
        if exit_code is None
        else {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Error",
                "finishedAt": "2024-11-04T10:02:41Z",
            }
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": HANDLE.split("/")[1], "namespace": "pasture"},
        "spec": {
            "nodeName": "aks-a100-38541297-vmss000000",
            "containers": [{"name": "task", "image": "x"}],
        },
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": "task",
                    "ready": exit_code is None,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                    "state": state,
                }
            ],
        },
    }


class RecordedPods:
    """``read_namespaced_pod`` answering the recorded pods in order (None: 404), and
    ``delete_namespaced_pod`` recording deletions."""

    def __init__(self, *answers: dict | None) -> None:
        self.answers = list(answers)
        self.deleted: list[str] = []

    def read_namespaced_pod(self, name: str, namespace: str) -> k8s.V1Pod:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer is None:
            raise k8s.ApiException(status=404, reason="Not Found")
        return API.deserialize(json.dumps(answer), "V1Pod", "application/json")

    def delete_namespaced_pod(self, name: str, namespace: str, **kw) -> None:
        self.deleted.append(name)
        self.answers = [None]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def executor(api: RecordedPods, clock: Clock) -> KubernetesExecutor:
    return KubernetesExecutor(settings=PodSettings(), api=api, disruption_hold_s=120, clock=clock)


def test_the_disruption_reason_is_read_from_the_pod():
    as_pod = lambda d: API.deserialize(json.dumps(d), "V1Pod", "application/json")  # noqa: E731
    assert disruption(as_pod(pod("Failed", exit_code=143, disrupted="EvictionByEvictionAPI"))) == (
        "EvictionByEvictionAPI"
    )
    assert disruption(as_pod(pod("Failed", exit_code=1))) is None
    assert disruption(None) == "pod deleted"


@pytest.mark.parametrize(
    "after_drain",
    [
        pod("Failed", exit_code=143, disrupted="EvictionByEvictionAPI"),  # drained, SIGTERM
        pod("Failed", exit_code=137, disrupted="TerminationByKubelet"),  # node shutdown
        None,  # evicted and already gone
    ],
    ids=["evicted", "node-shutdown", "deleted"],
)
def test_a_drained_task_is_reported_running_until_the_node_is_gone(after_drain):
    clock = Clock()
    api = RecordedPods(pod("Running"), after_drain)
    ex = executor(api, clock)
    assert ex.poll(HANDLE) is None  # running
    assert ex.poll(HANDLE) is None  # ended by the drain: held, no failure reported
    clock.now += 119
    assert ex.poll(HANDLE) is None
    # Had the node not gone (a drain without deletion), its exit code is reported after
    # 120 s, and the agent reports the task lost with the cause the pod shows.
    clock.now += 1
    assert ex.poll(HANDLE) == (
        -1
        if after_drain is None
        else after_drain["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
    )


def test_the_tasks_own_failure_is_reported_at_once():
    ex = executor(RecordedPods(pod("Failed", exit_code=3)), Clock())
    assert ex.poll(HANDLE) == 3


def test_a_pod_the_agent_stopped_is_not_held():
    """The agent's own stop (job stopped, preempted by the scheduler) deletes the pod; its
    disappearance is reported at once."""
    api = RecordedPods(pod("Running"))
    ex = executor(api, Clock())
    ex.stop(HANDLE, grace_s=0)
    assert api.deleted == [HANDLE.split("/")[1]]
    assert ex.poll(HANDLE) == -1


@pytest.mark.parametrize(
    ("after", "want"),
    [
        (
            pod("Failed", exit_code=143, disrupted="EvictionByEvictionAPI"),
            ("evicted", "EvictionByEvictionAPI"),
        ),
        (
            pod("Failed", exit_code=143, disrupted="TerminationByKubelet"),
            ("node_shutdown", "TerminationByKubelet"),
        ),
        (pod("Failed", exit_code=3), None),
    ],
    ids=["evicted", "node-shutdown", "own-failure"],
)
def test_a_pod_the_platform_ended_is_named_after_the_hold(after, want):
    """Issue 35 item 5: once the hold is over, the executor names what ended the pod so
    that the agent reports it lost (requeued free), never the task's own failure; a task's
    own exit is not the platform's."""
    clock = Clock()
    ex = executor(RecordedPods(pod("Running"), after), clock)
    assert ex.poll(HANDLE) is None
    code = ex.poll(HANDLE)
    if want is not None:
        assert code is None
        clock.now += 120
        code = ex.poll(HANDLE)
    assert code == after["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
    assert ex.infrastructure_ending(HANDLE) == want
