"""The operations metrics the alerting rules use (HealthCollector) against a real
redis-server, a real certificate and a Redis that is gone."""

import datetime as dt
import time

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry, generate_latest

from scheduler.api.collectors import HealthCollector
from scheduler.dev import free_port
from scheduler.spec import parse_job_spec
from scheduler.store import Store
from scheduler.store.records import NodeRecord


def scrape(collector) -> str:
    reg = CollectorRegistry()
    reg.register(collector)
    return generate_latest(reg).decode()


def self_signed(path, days: int) -> float:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pasture-api")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=days))
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert.not_valid_after_utc.timestamp()


def test_nodes_gpus_pending_and_certificate(redis_url, tmp_path):
    store = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    store.register_node(NodeRecord(name="a", address="10.0.0.1", cpu_m=4000, memory=2**30))
    store.register_node(NodeRecord(name="b", address="10.0.0.2", cpu_m=4000, memory=2**30))
    store.heartbeat(
        "b",
        {
            "gpu_health": [
                {"index": 0, "healthy": True, "temperature_c": 41, "power_w": 88.5, "xids": []},
                {"index": 1, "healthy": False, "ecc_uncorrected": 2, "xids": [95, 13]},
            ]
        },
    )
    store.set_node_state("b", "cordoned", "cordoned by the GPU health probe: GPU 1 unhealthy")
    store.set_node_state("a", "cordoned", "cordon by admin")
    store.create_job(
        parse_job_spec({"name": "w", "vc": "default", "roles": {"r": {"command": "true"}}})
    )
    time.sleep(1.1)
    expiry = self_signed(tmp_path / "api.crt", days=10)
    text = scrape(HealthCollector(store, str(tmp_path / "api.crt")))
    assert "pasture_store_up 1.0" in text
    assert 'pasture_node_state{node="b",state="cordoned"} 1.0' in text
    assert 'pasture_node_state{node="b",state="ready"} 0.0' in text
    assert 'pasture_node_cordoned{node="b",reason="gpu_health"} 1.0' in text
    assert 'pasture_node_cordoned{node="a",reason="operator"} 1.0' in text
    assert 'pasture_gpu_healthy{gpu="1",node="b"} 0.0' in text
    assert 'pasture_gpu_healthy{gpu="0",node="b"} 1.0' in text
    assert 'pasture_gpu_temperature_celsius{gpu="0",node="b"} 41.0' in text
    assert 'pasture_gpu_ecc_uncorrected_errors{gpu="1",node="b"} 2.0' in text
    assert 'pasture_gpu_critical_xids{gpu="1",node="b"} 1.0' in text  # 95 counts, 13 not
    line = next(x for x in text.splitlines() if x.startswith("pasture_vc_oldest_pending"))
    assert line.startswith('pasture_vc_oldest_pending_seconds{vc="default"}')
    assert 1.0 <= float(line.split()[-1]) < 60
    cert = next(x for x in text.splitlines() if x.startswith("pasture_api_certificate"))
    assert abs(float(cert.split()[-1]) - expiry) < 1


def test_redis_gone_reports_store_down_not_a_failed_scrape():
    port = free_port()  # nothing listens there
    store = Store(redis.Redis(port=port, socket_connect_timeout=0.5, decode_responses=True))
    text = scrape(HealthCollector(store))
    assert "pasture_store_up 0.0" in text
    assert "pasture_node_state" not in text
