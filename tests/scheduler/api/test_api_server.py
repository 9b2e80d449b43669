"""`python -m scheduler.api --config F` as a real process: TLS from api.tls_cert/tls_key."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from scheduler.cli import app as cli_app
from scheduler.cli.output import UNAVAILABLE
from scheduler.dev import free_port
from scheduler.logpaths import job_log_dir
from scheduler.settings import SchedulerSettings
from scheduler.store.tokens import TokenStore

pytestmark = pytest.mark.integration


def _cert(subject: str, issuer_key, issuer_name, key, ca: bool, ip: str | None = None):
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ip:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.fixture()
def tls_files(tmp_path: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (PEM files)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pasture test CA")])
    ca = _cert("pasture test CA", ca_key, ca_name, ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert("127.0.0.1", ca_key, ca_name, key, ca=False, ip="127.0.0.1")
    out = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "api.crt", "key": tmp_path / "api.key"}
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out["key"].write_bytes(_pem_key(key))
    return out


@pytest.fixture()
def tls_api(redis_url, tmp_path, tls_files):
    """The API as ``python -m scheduler.api`` with TLS; yields (url, admin token, ca path).
    A port taken between :func:`free_port` and the API's bind (another xdist worker's
    connection) is retried with a new port, at most 3 times."""
    for attempt in range(3):
        port = free_port()
        config = {
            "cluster_name": "tls",
            "redis": {"url": redis_url},
            "share_dir": str(tmp_path),
            "api": {
                "host": "127.0.0.1",
                "port": port,
                "tls_cert": str(tls_files["cert"]),
                "tls_key": str(tls_files["key"]),
            },
        }
        cfg = tmp_path / "scheduler.yaml"
        cfg.write_text(yaml.safe_dump(config))
        if attempt == 0:
            token = TokenStore(SchedulerSettings.model_validate(config).redis.client()).create(
                "root", "admin"
            )
        log = (tmp_path / "api.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.api", "--config", str(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        healthy = False
        while not healthy:
            try:
                context = ssl.create_default_context(cafile=tls_files["ca"])
                healthy = httpx.get(url + "/healthz", verify=context).status_code == 200
            except httpx.TransportError:
                pass
            if healthy or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if healthy:
            break
        proc.kill()
        proc.wait()
        log.close()
        text = (tmp_path / "api.log").read_text()
        if "address already in use" not in text or attempt == 2:
            raise RuntimeError(text)
    try:
        yield url, token, tls_files["ca"]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("the API did not stop within 30 s of SIGTERM")
        finally:
            log.close()


def test_tls_is_served_and_verified_against_the_cluster_ca(tls_api, tmp_path, monkeypatch):
    url, token, ca = tls_api
    with pytest.raises(httpx.ConnectError):  # not signed by a system CA
        httpx.get(url + "/healthz")
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port is refused
        httpx.get(url.replace("https", "http") + "/healthz").raise_for_status()
    r = httpx.get(
        url + "/api/v1/status",
        verify=ssl.create_default_context(cafile=ca),
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200 and r.json()["cluster"] == "tls"

    monkeypatch.setenv("PASTURE_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("PASTURE_DEV_DIR", str(tmp_path / "no-dev"))
    for var in ("PASTURE_ENDPOINT", "PASTURE_TOKEN", "PASTURE_CA_CERT"):
        monkeypatch.delenv(var, raising=False)
    runner = CliRunner()
    r = runner.invoke(cli_app, ["login", url, "--token", token])
    assert r.exit_code == UNAVAILABLE  # certificate not verifiable without the CA
    r = runner.invoke(cli_app, ["login", url, "--token", token, "--ca-cert", str(ca)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli_app, ["status", "--json"])
    assert r.exit_code == 0, r.output
    assert '"cluster": "tls"' in r.output


def test_only_one_tls_file_is_a_settings_error(tmp_path, redis_url):
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text(yaml.safe_dump({"redis": {"url": redis_url}, "api": {"tls_cert": "/x.crt"}}))
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler.api", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "tls_cert and api.tls_key" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_open_log_stream_does_not_hold_a_restart(tls_api, tmp_path):
    """SIGTERM while a client follows the log of a job that never ends: the API exits."""
    url, token, ca = tls_api
    headers = {"Authorization": f"Bearer {token}"}
    verify = ssl.create_default_context(cafile=ca)
    spec = "name: forever\nroles: {m: {replicas: 1, resources: {cpu: 1, memory: 1Gi}, command: x}}"
    r = httpx.post(url + "/api/v1/jobs", content=spec, headers=headers, verify=verify)
    assert r.status_code == 201, r.text
    log = job_log_dir(tmp_path, "forever", r.json()["uid"]) / "m-0.log"
    log.parent.mkdir(parents=True)
    log.write_text("started\n")
    api = next(p for p in psutil.Process().children() if "scheduler.api" in " ".join(p.cmdline()))
    with httpx.stream(
        "GET",
        url + "/api/v1/jobs/forever/logs",
        params={"follow": "true"},
        headers=headers,
        verify=verify,
        timeout=60,
    ) as r:
        assert next(r.iter_bytes()) == b"started\n"
        start = time.monotonic()
        api.terminate()
        api.wait(30)
        assert time.monotonic() - start < 15
