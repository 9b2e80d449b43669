"""A role without a command runs its image's own ENTRYPOINT, with real podman: a tiny image
built FROM the base image with an ENTRYPOINT, CMD and WORKDIR (removed after), run by the
agent from a Volcano job whose containers give no command (Kubernetes semantics: args
replace CMD; neither = ENTRYPOINT + CMD; a command replaces the ENTRYPOINT)."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from scheduler.logpaths import job_log_dir
from tests.scheduler.agent.test_container_executor import container_agent
from tests.scheduler.agent.test_startup import place_all, run_to_end

BASE = "localhost/pasture-base:bookworm"
IMAGE = f"localhost/volcano-ep-test:{uuid.uuid4().hex[:8]}"

pytestmark = [
    pytest.mark.skipif(
        shutil.which("podman") is None
        or subprocess.run(["podman", "image", "exists", BASE], check=False).returncode != 0,
        reason=f"podman or {BASE} missing (scripts build the base image)",
    ),
    pytest.mark.xdist_group("podman"),
]

CONTAINERFILE = f"""FROM {BASE}
WORKDIR /opt/app
RUN printf '#!/bin/sh\\necho "entrypoint in $(pwd) args: $* rank $VC_TASK_INDEX"\\n' \\
      > /opt/app/ep.sh && chmod +x /opt/app/ep.sh
ENTRYPOINT ["/opt/app/ep.sh"]
CMD ["from-cmd"]
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    ctx = tmp_path_factory.mktemp("ep-image")
    (ctx / "Containerfile").write_text(CONTAINERFILE)
    subprocess.run(
        ["podman", "build", "-q", "-t", IMAGE, "-f", str(ctx / "Containerfile"), str(ctx)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    yield IMAGE
    subprocess.run(["podman", "rmi", "-f", IMAGE], check=False, capture_output=True)


def _task(name: str, container: dict) -> dict:
    return {
        "name": name,
        "replicas": 1,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "c",
                        "image": IMAGE,
                        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}},
                        **container,
                    }
                ],
            }
        },
    }


def test_agent_runs_image_entrypoints_from_a_volcano_job(image, redis_url, tmp_path):
    import redis

    from scheduler.spec import parse_job_spec
    from scheduler.store import Store

    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    job = f"ep-{uuid.uuid4().hex[:6]}"
    agent = container_agent(store, tmp_path, redis_url, (33100, 33199))
    assert store.get_node("c1").labels["pasture.io/image-entrypoint"] == "true"
    spec = parse_job_spec(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": job},
            "spec": {
                "tasks": [
                    _task("args", {"args": ["--kv-store=dist_sync", "two words"]}),
                    _task("plain", {}),
                    _task("cmd", {"command": ["sh", "-c", 'echo "command in $(pwd)"']}),
                    _task("wd", {"workingDir": "/tmp"}),
                ]
            },
        }
    )
    place_all(store, spec, "c1")
    run_to_end(store, agent, job)
    assert {t.role: t.state for t in store.tasks(job)} == dict.fromkeys(
        ("args", "plain", "cmd", "wd"), "succeeded"
    )
    logs = job_log_dir(tmp_path / "share", job, store.get_job(job).uid)

    def out(role: str) -> list[str]:
        return (logs / f"{role}-0.log").read_text().splitlines()[1:]

    assert out("args") == ["entrypoint in /opt/app args: --kv-store=dist_sync two words rank 0"]
    assert out("plain") == ["entrypoint in /opt/app args: from-cmd rank 0"]
    assert out("cmd") == [f"command in {tmp_path / 'share' / 'jobs' / job}"]
    assert out("wd") == ["entrypoint in /tmp args: from-cmd rank 0"]
    left = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label=pasture.job={job}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert left == []
