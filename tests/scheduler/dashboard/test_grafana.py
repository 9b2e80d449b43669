"""The Grafana dashboard queries only metrics the API really exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

DASHBOARD = Path(__file__).resolve().parents[3] / "templates" / "grafana" / "pasture.json"
METRIC = re.compile(r"\b(pasture_[a-z_]+)\b")


def test_dashboard_metrics_exist(base, env):
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v.get("query", "") for v in dashboard["templating"]["list"]]
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert len(used) >= 10
    headers = {"Authorization": f"Bearer {env.admin}"}
    httpx.get(f"{base}/api/v1/status", headers=headers)  # so the request histogram has data
    text = httpx.get(f"{base}/metrics", headers=headers).text
    exposed = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    # families without samples yet (no job, no usage report) still announce themselves
    exposed |= {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    missing = sorted(used - exposed)
    assert not missing, f"the dashboard queries metrics /metrics does not expose: {missing}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
