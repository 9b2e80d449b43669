"""Several Volcano Job manifests in one body are several jobs, stored together (issue 26;
volcano-sh/volcano example/hierarchical-jobs/jobs.yaml is such a file)."""

from __future__ import annotations

from pathlib import Path

import yaml

CORPUS = Path(__file__).resolve().parents[2] / "compat" / "corpus" / "volcano"


def test_a_file_of_job_manifests_stores_every_job(api, http):
    _, env = api
    client = http(env.admin)
    docs = [d for d in yaml.safe_load_all((CORPUS / "hierarchical-jobs.yaml").read_text()) if d]
    for doc in docs:  # the file's queues are not VCs here; give the nginx a command
        doc["spec"]["queue"] = "default"
        doc["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"] = ["true"]
    text = yaml.safe_dump_all(docs)
    r = client.post("/api/v1/jobs", content=text.encode(), headers={"content-type": "text/yaml"})
    assert r.status_code == 201, r.text
    assert r.json()["jobs"] == ["eng-prod-job", "eng-dev-job", "sci-prod-job", "sci-dev-job"]
    for name in r.json()["jobs"]:
        assert client.get(f"/api/v1/jobs/{name}").json()["spec"]["min_available"] == 1


def test_a_queue_beside_a_job_is_warned_naming_the_document(api, http):
    """Issue 37: other Kubernetes kinds beside Jobs are warned about; the Jobs are submitted."""
    _, env = api
    queue = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\n"
    job = (CORPUS / "mpi-plugin-guide.yaml").read_text()
    r = http(env.admin).post(
        "/api/v1/jobs",
        content=(queue + "---\n" + job).encode(),
        headers={"content-type": "text/yaml"},
    )
    assert r.status_code == 201, r.text
    assert any(w.startswith("Volcano field items[0].kind") for w in r.json()["warnings"])
    assert http(env.admin).get("/api/v1/jobs/lm-mpi-job").status_code == 200
