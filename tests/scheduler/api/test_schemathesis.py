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

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 60


@pytest.fixture(scope="module")
def st_env(redis_server, tmp_path_factory):
    """One seeded cluster for the module (schemathesis calls the test once per operation):
    a high failed-auth limit, so that ignored_auth's wrong tokens do not block the rest."""
    import redis

    redis.Redis.from_url(redis_server).flushdb()
    env = make_env(redis_server, tmp_path_factory.mktemp("st"))
    api = env.settings.api.model_copy(
        update={"auth_failures_per_window": 1_000_000, "request_limit": "", "submit_limit": ""}
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
# The one relaxed expectation: a job spec body is documented as "an object" (three formats
# are accepted: pasture, OpenPAI v2, MARO, each with rules JSON Schema cannot state, such
# as quantities and whether the gang fits the cluster), so a schema-valid object may still
# be an invalid spec, answered 400/422 with its field paths.
CONFIG = SchemathesisConfig.from_dict(
    {
        "operations": [
            {
                "include-path": "/api/v1/jobs",
                "include-method": "POST",
                "checks": {
                    "positive_data_acceptance": {
                        "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "422"]
                    }
                },
            }
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
