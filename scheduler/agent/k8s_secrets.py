"""Job secrets of a task pod: one Kubernetes ``Secret`` per task, referenced by the pod.

The agent opens a job's sealed values at a task's start-up (:mod:`scheduler.sealed`) and
hands them to the executor in the task's environment as ``PASTURE_SECRET_<NAME>``
(:func:`scheduler.spec.secrets.env_name`). A pod's ``env`` values are part of its spec,
which the Kubernetes API keeps and shows in clear (``kubectl get pod -o yaml``), so the
kubernetes executor never puts them there:

    launch.env --split_env()--> plain vars  -> pod env ``value``
                            └─> secret vars -> Secret <pod name>-secrets (data: base64)
                                               pod env ``valueFrom.secretKeyRef``

The Secret is created right after its pod, with an ``ownerReference`` to the pod (uid from
the create answer), so the garbage collector deletes it with the pod; the executor's
cleanup deletes it too. Until the Secret exists the kubelet holds the container in
``CreateContainerConfigError`` and retries, so the order costs at most a retry.

Values then live in etcd as Kubernetes Secrets: encrypted at rest when the cluster's API
server has an ``EncryptionConfiguration`` (AKS encrypts etcd at rest; KMS with a key of
your Key Vault is optional). Reading them takes ``get`` on Secrets of the namespace, which
the agents' Role has (create/get/delete, no list) and users should not (docs/api.md
"Job secrets"). Not run against a cluster here (none on the test machine): the objects are
checked as the Kubernetes client's models.
"""

from __future__ import annotations

import base64

from kubernetes import client as k8s

from scheduler.spec.secrets import ENV_PREFIX

SECRET_SUFFIX = "-secrets"


def secret_name(pod: str) -> str:
    """Name of the Secret of pod ``pod`` (a DNS-1123 subdomain: ``pod_name`` is <= 63
    characters, so the result is <= 71 of at most 253)."""
    return pod + SECRET_SUFFIX


def is_secret_var(name: str) -> bool:
    """Whether environment variable ``name`` holds a job secret."""
    return name.startswith(ENV_PREFIX)


def split_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(plain, secret)`` variables of a task's environment; ``secret`` holds every
    ``PASTURE_SECRET_*`` variable (whether the agent or the job's own env set it)."""
    plain = {k: str(v) for k, v in env.items() if not is_secret_var(k)}
    secret = {k: str(v) for k, v in env.items() if is_secret_var(k)}
    return plain, secret


def env_vars(env: dict[str, str], pod: str) -> list[k8s.V1EnvVar]:
    """The pod's ``env``: plain variables by value, secret ones by ``secretKeyRef`` to key
    ``<variable>`` of Secret :func:`secret_name` (sorted by name)."""
    plain, secret = split_env(env)
    ref = secret_name(pod)
    out = {k: k8s.V1EnvVar(name=k, value=v) for k, v in plain.items()}
    for k in secret:
        out[k] = k8s.V1EnvVar(
            name=k,
            value_from=k8s.V1EnvVarSource(
                secret_key_ref=k8s.V1SecretKeySelector(name=ref, key=k, optional=False)
            ),
        )
    return [out[k] for k in sorted(out)]


def build_secret(env: dict[str, str], pod: k8s.V1Pod, uid: str | None) -> k8s.V1Secret | None:
    """The Secret of ``pod`` holding the secret variables of ``env``, None when it has none.

    Args:
        env: the task's environment (``launch.env``).
        pod: the pod as built (name, namespace, labels).
        uid: the pod's uid from the API server's create answer; None builds the Secret
            without an owner (then only the executor's cleanup deletes it).

    Returns:
        A ``V1Secret`` of type Opaque, ``data`` = variable -> base64 value, immutable, with
        the pod's labels and an ``ownerReference`` (``Pod`` ``<name>``, ``uid``) so that it
        is deleted with the pod.
    """
    _, secret = split_env(env)
    if not secret:
        return None
    meta = pod.metadata
    assert meta is not None and meta.name is not None  # build_pod names every pod
    owners = None
    if uid:
        owners = [k8s.V1OwnerReference(api_version="v1", kind="Pod", name=meta.name, uid=uid)]
    return k8s.V1Secret(
        api_version="v1",
        kind="Secret",
        type="Opaque",
        immutable=True,
        metadata=k8s.V1ObjectMeta(
            name=secret_name(meta.name),
            namespace=meta.namespace,
            labels=dict(meta.labels or {}),
            owner_references=owners,
        ),
        data={k: base64.b64encode(v.encode()).decode() for k, v in sorted(secret.items())},
    )
