"""Issue 37, sixth point: the submit's VC and fit refusals name the field the user wrote in
the file (``spec.queue``, ``defaults.virtualCluster``, ``taskRoles.x.resourcePerInstance``),
not pasture's ``vc`` / ``roles``; a pasture spec keeps ``vc`` / ``roles``. Real
redis-server, real corpus files."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.services.errors import InvalidSpecError
from scheduler.services.jobs import JobService
from scheduler.settings import SchedulerSettings
from scheduler.spec import load_document
from scheduler.store import NodeRecord, Store
from scheduler.store.tokens import TokenInfo, TokenRole

ADMIN = TokenInfo("root", TokenRole.ADMIN)
CORPUS = Path(__file__).parent / "corpus"


@pytest.fixture()
def store(redis_url) -> Store:
    settings = SchedulerSettings.model_validate(
        {"redis": {"url": redis_url}, "virtual_clusters": [{"name": "default"}]}
    )
    s = Store(settings.redis.client())
    s.apply_vcs(settings.virtual_clusters)
    s.register_node(NodeRecord(name="small", address="10.0.0.1", cpu_m=8000, memory=32 << 30))
    return s


def _refusal(store: Store, doc: dict) -> dict:
    with pytest.raises(InvalidSpecError) as info:
        JobService(store).submit(ADMIN, doc)
    (error,) = info.value.errors
    return error


def test_a_volcano_queue_that_is_no_vc_is_refused_as_spec_queue(store):
    doc = load_document((CORPUS / "volcano/hierarchical-jobs.yaml").read_text())
    error = _refusal(store, doc)
    assert error["loc"] == ["items[0]", "spec", "queue"]
    assert error["msg"].startswith("Volcano field items[0].spec.queue: no virtual cluster")
    assert "'root-eng-prod'" in error["msg"] and "(checked as pasture's vc)" in error["msg"]


def test_an_openpai_v2_virtual_cluster_that_is_none_is_refused_as_its_field(store):
    doc = load_document((CORPUS / "openpai-v2/hello-world-job.yaml").read_text())
    doc["defaults"]["virtualCluster"] = "vc1"
    error = _refusal(store, doc)
    assert error["loc"] == ["defaults", "virtualCluster"]
    assert error["msg"].startswith("OpenPAI v2 field defaults.virtualCluster: no virtual")


def test_an_openpai_v2_role_no_node_can_hold_is_refused_as_its_resource_per_instance(store):
    """microsoft/pai contrib/edu-examples Resnet18_12cpu.yaml: 12 CPUs and 3 GPUs per
    instance on a cluster whose one node has 8 cores and no GPU."""
    doc = load_document((CORPUS / "openpai-v2/Resnet18_12cpu.yaml").read_text())
    error = _refusal(store, doc)
    assert error["loc"] == ["taskRoles", "taskrole", "resourcePerInstance"]
    assert error["msg"].startswith("OpenPAI v2 field taskRoles.taskrole.resourcePerInstance: ")
    assert "can never be placed" in error["msg"]


def test_a_pasture_spec_keeps_vc_and_roles(store):
    spec = {"name": "p", "vc": "nowhere", "roles": {"w": {"command": "true"}}}
    assert _refusal(store, spec)["loc"] == ["vc"]
    spec = {"name": "p", "roles": {"w": {"command": "true", "resources": {"cpu": 64}}}}
    assert _refusal(store, spec)["loc"] == ["roles", "w", "resources"]
