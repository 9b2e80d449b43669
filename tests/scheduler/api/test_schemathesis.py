"""schemathesis against the API's own OpenAPI document, every check on (the equivalent of
``st run --checks all``), in-process against the ASGI app over a real redis-server.

Each operation gets a bounded number of generated cases (positive and negative), sent
with an admin token; a failing check (a 5xx, a status or body the document does not
list, a valid request refused, an invalid one accepted, auth ignored...) fails the test.
"""

from __future__ import annotations

import dataclasses

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from live import make_env
from schemathesis.config import SchemathesisConfig

from scheduler.api import create_app
from scheduler.settings import SchedulerSettings
from scheduler.store.tokens import TokenStore

# serial: schemathesis' items (one per operation) share one node id, which pytest-xdist
# would run once in all (tests/conftest.py); make test-python runs serial tests without it
pytestmark = [pytest.mark.integration, pytest.mark.serial]

MAX_EXAMPLES = 60


@pytest.fixture(scope="module")
def st_env(redis_server, tmp_path_factory):
    """One seeded cluster for the module (schemathesis calls the test once per operation):
    high failed-auth limits (per token and per address), so that ignored_auth's wrong
    tokens are answered 401 and do not block the rest with 429."""
    import redis

    redis.Redis.from_url(redis_server).flushdb()
    env = make_env(redis_server, tmp_path_factory.mktemp("st"))
    api = env.settings.api.model_copy(
        update={
            "auth_failures_per_window": 1_000_000,
            "auth_failures_per_address": 1_000_000,
            "request_limit": "",
            "submit_limit": "",
        }
    )
    env = dataclasses.replace(env, settings=env.settings.model_copy(update={"api": api}))
    env.tokens = TokenStore(env.store.r)  # the app's token store, as create_app builds it
    return env


class LateApp:
    """An ASGI app that forwards to the app the ``st_app`` fixture builds: the document
    must exist when tests are collected, the app needs the test session's redis-server."""

    app = None

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)


LATE = LateApp()


@pytest.fixture(scope="module")
def st_app(st_env):
    """The app under test, reached in-process by every request schemathesis sends (the
    checks' own probes too, such as ignored_auth's request without a token)."""
    LATE.app = create_app(st_env.settings, store=st_env.store, tokens=st_env.tokens)
    yield LATE.app
    LATE.app = None


def _document() -> dict:
    """The app's OpenAPI document, built without a store (redis-py connects lazily)."""
    settings = SchedulerSettings.model_validate({"redis": {"url": "redis://127.0.0.1:9/0"}})
    return create_app(settings).openapi()


# schemathesis.pytest.from_fixture needs pytest < 9 (it reads Function._nodeid): the
# document is built at import instead, and each call goes to the fixture's app.
# Relaxed expectations, each for named operations only (include-name: schemathesis ORs an
# include-path with an include-method, so a path plus a method would relax every operation
# of that method). A schema-valid request may still be refused there, for a reason JSON
# Schema cannot state:
# - a job spec body (submit, dry-run, batch, a schedule's template) is documented as "an
#   object" or text: three formats are accepted (pasture, OpenPAI v2, MARO), each with
#   rules such as quantities and whether the gang fits the cluster; 400/422 name the fields;
# - a log's ``since`` is a string of three forms (a duration ago, an ISO date or time, Unix
#   seconds), calendar dates included, which a pattern cannot state whole;
# - GPU-hours' ``until`` must come after ``since`` and ``since`` before now.
SPEC_BODIES = ("POST /api/v1/jobs", "POST /api/v1/jobs:dry-run", "POST /api/v1/jobs:batch")
RELAXED = {
    **{name: ["2xx", "400", "401", "403", "404", "409", "422"] for name in SPEC_BODIES},
    "POST /api/v1/schedules": ["2xx", "400", "401", "403", "404", "409", "422"],
    "GET /api/v1/jobs/{name}/logs": ["2xx", "401", "403", "404", "409", "422"],
    "GET /api/v1/usage/gpu-hours": ["2xx", "401", "403", "422"],
}
CONFIG = SchemathesisConfig.from_dict(
    {
        "operations": [
            {
                "include-name": name,
                "checks": {"positive_data_acceptance": {"expected-statuses": statuses}},
            }
            for name, statuses in RELAXED.items()
        ]
    }
)
schema = schemathesis.openapi.from_dict(_document(), config=CONFIG)
schema.app = LATE


def _all_checks():
    from schemathesis.checks import CHECKS, load_all_checks

    load_all_checks()
    return CHECKS.get_all()


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_openapi_document(case, st_env, st_app):
    case.call_and_validate(
        headers={"Authorization": f"Bearer {st_env.admin}"}, checks=_all_checks()
    )


def test_the_document_lists_every_error_response():
    """Every authenticated route documents 401, 429 and 503; routes with a name 404; a
    body route 413 and 422."""
    doc = _document()
    missing = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            codes = set(op["responses"])
            want = {"401", "429", "503"} if path != "/healthz" else {"503"}
            if path == "/api/v1/node-credentials":  # no API token: the SA token is the proof
                want = {"400", "403", "404", "413", "422", "429", "503"}
            if "{name}" in path:
                want |= {"404"}
            if method == "post" and path == "/api/v1/jobs":
                want |= {"400", "403", "409", "413", "422"}
            if op.get("parameters"):
                want |= {"422"}
            missing += [f"{method.upper()} {path} {c}" for c in sorted(want - codes)]
    assert missing == []
