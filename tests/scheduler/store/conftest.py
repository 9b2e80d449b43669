import pytest
import redis

from scheduler.settings import VirtualClusterSettings
from scheduler.spec import parse_job_spec
from scheduler.store import NodeRecord, Store


@pytest.fixture()
def store(redis_url: str) -> Store:
    s = Store(redis.Redis.from_url(redis_url, decode_responses=True))
    s.apply_vcs(
        [
            VirtualClusterSettings.model_validate(
                {"name": "default", "guarantee": {"cpu": 8, "memory": "16Gi"}}
            )
        ]
    )
    return s


@pytest.fixture()
def add_node():
    return _add_node


@pytest.fixture()
def job_spec():
    return _job_spec


def _add_node(
    store: Store,
    name: str,
    cpu: int = 4,
    mem_gi: int = 8,
    gpu: int = 0,
    ports: tuple[int, int] = (30000, 30099),
) -> NodeRecord:
    return store.register_node(
        NodeRecord(
            name=name,
            address=f"10.0.0.{len(name)}",
            cpu_m=cpu * 1000,
            memory=mem_gi * 2**30,
            gpu=gpu,
            port_range=ports,
        )
    )


def _job_spec(name: str, replicas: int = 2, cpu: int = 1, vc: str = "default", **extra):
    return parse_job_spec(
        {
            "name": name,
            "vc": vc,
            "roles": {
                "w": {
                    "replicas": replicas,
                    "command": "true",
                    "resources": {"cpu": cpu, "memory": "1Gi"},
                }
            },
            **extra,
        }
    )
