"""Per-node credentials for Kubernetes agents (scheduler/nodecred.py): the checks on a
TokenReview answer of the documented shape (tests/scheduler/data/tokenreview-pod-bound.yaml,
from the Kubernetes docs) and its pod, and the issued ACL user on a real redis-server:
it reaches its own node's keys and nothing else. No cluster here: the TokenReview and pod
reads are answered from those documents."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import redis
import yaml

from scheduler.nodecred import AUDIENCE, CredentialRefused, exchange, issue, node_of

DOC = yaml.safe_load((Path(__file__).parent / "data" / "tokenreview-pod-bound.yaml").read_text())
NS, SA, DS = "pasture", "pasture-agent", "pasture-agent-"
NODE = "kind-control-plane"


def review(**status) -> dict:
    r = copy.deepcopy(DOC)
    r["status"]["audiences"] = [AUDIENCE]
    r["status"]["user"]["username"] = f"system:serviceaccount:{NS}:{SA}"
    r["status"].update(status)
    return r


def pod(**spec) -> dict:
    return {
        "metadata": {
            "name": "test-pod",
            "uid": "e87dbbd6-3d7e-45db-aafb-72b24627dff5",
            "ownerReferences": [
                {"kind": "DaemonSet", "name": "pasture-agent-a100", "controller": True}
            ],
        },
        "spec": {"nodeName": NODE, "serviceAccountName": SA, **spec},
    }


def check(r, p):
    return node_of(r, p, NS, SA, DS)


def test_the_token_of_an_agent_pod_names_its_node():
    assert check(review(), pod()) == NODE


@pytest.mark.parametrize(
    ("mutate", "says"),
    [
        (lambda r, p: r["status"].update(authenticated=False, error="expired"), "expired"),
        (lambda r, p: r["status"].update(audiences=["https://kubernetes.default.svc"]), "lack"),
        (lambda r, p: r["status"]["user"].update(username="system:serviceaccount:x:y"), "user"),
        # before Kubernetes 1.30 tokens carry no node
        (
            lambda r, p: r["status"]["user"]["extra"].pop("authentication.kubernetes.io/node-name"),
            "1.30",
        ),
        (
            lambda r, p: r["status"]["user"]["extra"].update(
                {"authentication.kubernetes.io/node-name": ["n*"]}
            ),
            "valid pasture node name",
        ),
        (lambda r, p: p["metadata"].update(uid="another"), "uid"),
        (lambda r, p: p["spec"].update(nodeName="aks-other-1"), "runs on"),
        (lambda r, p: p["spec"].update(serviceAccountName="default"), "does not run as"),
        # a pod some agent created itself, with the agents' service account
        (lambda r, p: p["metadata"].update(ownerReferences=[]), "DaemonSet"),
        (
            lambda r, p: p["metadata"].update(
                ownerReferences=[
                    {"kind": "ReplicaSet", "name": "pasture-agent-x", "controller": True}
                ]
            ),
            "DaemonSet",
        ),
    ],
)
def test_each_check_refuses_by_name(mutate, says):
    r, p = review(), pod()
    mutate(r, p)
    with pytest.raises(CredentialRefused, match=says):
        check(r, p)


def test_a_deleted_pod_is_refused():
    with pytest.raises(CredentialRefused, match="no longer exists"):
        check(review(), None)


class Recorded:
    """The Kubernetes answers, from the documents above."""

    def __init__(self, r, p):
        self.r, self.p, self.asked = r, p, []

    def review(self, token):
        self.asked.append(("review", token))
        return self.r

    def pod(self, namespace, name):
        self.asked.append(("pod", namespace, name))
        return self.p


@pytest.fixture()
def admin(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    for user in client.execute_command("ACL", "USERS"):
        if user.startswith("node-"):
            client.execute_command("ACL", "DELUSER", user)


def test_the_exchange_issues_a_user_that_reaches_only_its_own_node(admin, redis_url):
    k8s = Recorded(review(), pod())
    cred = exchange(
        k8s,
        admin,
        "tok",
        secret="s3cret",
        namespace=NS,
        service_account=SA,
        daemonset_prefix=DS,
    )
    assert k8s.asked == [("review", "tok"), ("pod", NS, "test-pod")]
    assert (cred.node, cred.username) == (NODE, f"node-{NODE}")
    node = redis.Redis.from_url(
        redis_url, username=cred.username, password=cred.password, decode_responses=True
    )
    node.hset(f"pasture:node:{NODE}", "heartbeat", "1")  # its own record
    for key in ("pasture:node:other", "pasture:token:x", "pasture:ledger"):
        with pytest.raises(redis.exceptions.NoPermissionError):
            node.hset(key, "f", "1")
    # idempotent: a second exchange (after a Redis restart) gives the same password
    assert issue(admin, "s3cret", NODE) == cred
    # another node's token gives that node's user, which cannot touch the first node
    other = review()
    other["status"]["user"]["extra"]["authentication.kubernetes.io/node-name"] = ["n2"]
    cred2 = exchange(
        Recorded(other, pod(nodeName="n2")),
        admin,
        "t2",
        secret="s3cret",
        namespace=NS,
        service_account=SA,
        daemonset_prefix=DS,
    )
    assert cred2.password != cred.password
    n2 = redis.Redis.from_url(redis_url, username=cred2.username, password=cred2.password)
    with pytest.raises(redis.exceptions.NoPermissionError):
        n2.hset(f"pasture:node:{NODE}", "heartbeat", "2")


def test_a_refused_token_creates_no_user(admin):
    k8s = Recorded(review(authenticated=False), pod())
    with pytest.raises(CredentialRefused):
        exchange(
            k8s, admin, "tok", secret="s", namespace=NS, service_account=SA, daemonset_prefix=DS
        )
    assert not [u for u in admin.execute_command("ACL", "USERS") if u.startswith("node-")]
