"""Smoke test of the pasture image (the repository's Containerfile): built with podman
FROM the local Debian base image, then the API, the loop and a node agent each run from
it in their own container (host network) against a real redis-server on this machine,
and a job submitted with the client CLI runs to success inside the agent's container.

Skipped only when podman is absent. Builds ``localhost/pasture-test-aks:<id>`` (~2 min
on 2 cores: pip installs the package and its dependencies from PyPI) and removes it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.dev import free_port
from tests.devcluster import agent_yaml, scheduler_yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/pasture-base:bookworm"
RUN_ID = uuid.uuid4().hex[:8]
PREFIX = f"pasture-test-aks-{RUN_ID}"
JOB = """\
name: from-image
roles:
  main:
    replicas: 1
    resources: {cpu: 100m, memory: 64Mi}
    command: python3 -c "import scheduler, sys; print('ran in', sys.prefix)"
"""


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, check=check, timeout=timeout
    )


def ca_bundle() -> Path | None:
    """The machine's CA bundle, given to the build as secret ``ca-bundle`` (needed behind a
    TLS-intercepting proxy; harmless elsewhere)."""
    for candidate in (os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="module")
def pasture_image():
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make deps installs it): the image cannot be built")
    if podman("image", "exists", BASE_IMAGE, check=False).returncode != 0:
        subprocess.run(["bash", str(REPO / "scripts/build-base-image.sh")], check=True)
    tag = f"localhost/pasture-test-aks:{RUN_ID}"
    secret = ["--secret", f"id=ca-bundle,src={ca_bundle()}"] if ca_bundle() else []
    # --layers=false: only the final image is stored (no intermediate images left behind
    # in the machine's shared image store once the tag is removed).
    build = podman(
        "build", "--layers=false", "-f", str(REPO / "Containerfile"), "-t", tag, *secret,
        str(REPO), check=False, timeout=1200,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    try:
        yield tag
    finally:
        podman("rmi", "-f", tag, check=False)


@pytest.fixture()
def containers():
    """``start(role, *command)`` runs ``command`` detached in the image with host network
    and ``/tmp``-style mounts; every container is removed afterwards."""
    names: list[str] = []

    def start(image: str, role: str, mounts: list[Path], *command: str) -> str:
        name = f"{PREFIX}-{role}"
        volumes = [arg for m in mounts for arg in ("-v", f"{m}:{m}")]
        podman("run", "-d", "--pull=never", "--network", "host", "--name", name, *volumes,
               image, *command)  # fmt: skip
        names.append(name)
        return name

    yield start
    for name in names:
        podman("rm", "-f", "-t", "5", name, check=False)


@pytest.mark.timeout(1800)
def test_api_loop_and_agent_run_a_job_from_the_image(
    pasture_image, containers, redis_url, tmp_path, monkeypatch
):
    share, work, home = tmp_path / "share", tmp_path / "work", tmp_path / "home"
    for d in (share, work, home):
        d.mkdir()
    port = free_port()
    scheduler_cfg = scheduler_yaml(
        tmp_path / "scheduler.yaml", "image-smoke", redis_url, share, port, loop={"interval_s": 0.5}
    )
    agent_cfg = agent_yaml(tmp_path / "agent.yaml", "image-node", redis_url, share, work)
    token = podman(
        "run", "--rm", "--pull=never", "--network", "host", "-v", f"{tmp_path}:{tmp_path}",
        pasture_image, "pasture", "admin", "token", "create", "--config", str(scheduler_cfg),
        "--name", "admin", "--role", "admin", "--output", str(tmp_path / "admin.token"),
    )  # fmt: skip
    assert token.returncode == 0
    mounts = [tmp_path]
    api = containers(pasture_image, "api", mounts, "pasture", "serve", "api", "--config",
                     str(scheduler_cfg))  # fmt: skip
    containers(pasture_image, "loop", mounts, "pasture", "serve", "loop", "--config",
               str(scheduler_cfg))  # fmt: skip
    agent = containers(pasture_image, "agent", mounts, "pasture", "agent", "run", "--config",
                       str(agent_cfg))  # fmt: skip

    def logs(name: str) -> str:
        out = podman("logs", name, check=False)
        return out.stdout[-2000:] + out.stderr[-2000:]

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, logs(api)
        time.sleep(0.5)

    for var in ("PASTURE_CONFIG", "PASTURE_CA_CERT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PASTURE_CONFIG_HOME", str(home / "pasture-config"))
    monkeypatch.setenv("PASTURE_ENDPOINT", url)
    monkeypatch.setenv("PASTURE_TOKEN", (tmp_path / "admin.token").read_text().strip())
    cli = CliRunner()
    while "image-node" not in cli.invoke(app, ["node", "list"]).output:
        assert time.monotonic() < deadline, logs(agent)
        time.sleep(0.5)
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB)
    r = cli.invoke(app, ["job", "submit", str(spec), "--wait", "--timeout", "120"])
    assert r.exit_code == 0, (r.output, logs(agent))
    r = cli.invoke(app, ["job", "logs", "from-image"])
    assert "ran in /opt/pasture" in r.output, r.output  # the task ran in the image's venv
