"""Refused clients are held and answered before anything is read
(scheduler/api/refusals.py), and a dashboard token over its handler-time budget is
refused while other tokens go on (scheduler/api/fairness.py TimeBudget); issue 32 item 5.
The integration tests run the real API (uvicorn + redis-server) and count the commands
Redis processed."""

from __future__ import annotations

import dataclasses
import re

import httpx
import pytest
import redis
from live import serve
from test_auth_limits import client, dashboard_login

from scheduler.api.fairness import TimeBudget
from scheduler.api.refusals import ANY_ROUTE, RefusalHold, credentials
from scheduler.settings import ApiSettings, parse_limit
from scheduler.spec import parse_job_spec


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def never_known(bearer: str | None, sid: str | None) -> bool:
    return False


def test_a_held_credential_is_held_on_its_route_or_on_all_until_the_hold_ends():
    clock = Clock()
    hold = RefusalHold(1.0, clock=clock)
    hold.hold_credential("tok-a", None, 5, "over its submit limit", "POST /dashboard/submit")
    assert hold.held("1.2.3.4", "tok-a", None, "POST /dashboard/submit", never_known) == (
        1.0,
        "over its submit limit",
    )
    # another route, another token: not held
    assert hold.held("1.2.3.4", "tok-a", None, "GET /dashboard/jobs", never_known)[0] == 0
    assert hold.held("1.2.3.4", "tok-b", None, "POST /dashboard/submit", never_known)[0] == 0
    hold.hold_credential(None, "sid-1", 0.4, "over its request limit")  # every route
    left, what = hold.held("9.9.9.9", None, "sid-1", "GET /x", never_known)
    assert (left, what) == (pytest.approx(0.4), "over its request limit")
    clock.t += 0.5  # never past the refusal's own Retry-After
    assert hold.held("9.9.9.9", None, "sid-1", "GET /x", never_known)[0] == 0
    left = hold.held("1.2.3.4", "tok-a", None, "POST /dashboard/submit", never_known)[0]
    assert left == pytest.approx(0.5)
    clock.t += 0.5
    assert hold.held("1.2.3.4", "tok-a", None, "POST /dashboard/submit", never_known)[0] == 0


def test_an_address_hold_spares_credentials_seen_valid():
    hold = RefusalHold(2.0, clock=Clock())
    hold.hold_address("10.0.0.1", 30, "too many failed authentications from this address")
    assert hold.held("10.0.0.1", "spray-1", None, "GET /api/v1/jobs", never_known)[0] == 2.0
    assert hold.held("10.0.0.1", None, "bad-sid", "GET /dashboard/", never_known)[0] == 2.0
    # no credential at all (/healthz, the login page): never counted, never held
    assert hold.held("10.0.0.1", None, None, "GET /healthz", never_known)[0] == 0
    assert hold.held("10.0.0.1", "good", None, "GET /", lambda b, s: b == "good")[0] == 0
    assert hold.held("10.0.0.2", "spray-1", None, "GET /api/v1/jobs", never_known)[0] == 0


def test_holds_off_and_bad_settings():
    off = RefusalHold(0)
    off.hold_credential("t", None, 10, "x")
    off.hold_address("a", 10, "x")
    assert len(off) == 0
    with pytest.raises(ValueError, match="api.refusal_hold_s: expected >= 0, got -1"):
        RefusalHold(-1)
    with pytest.raises(ValueError, match="refusal_hold_s"):
        ApiSettings.model_validate({"refusal_hold_s": -1})
    with pytest.raises(ValueError, match="api.token_time_limit: expected limits like"):
        ApiSettings.model_validate({"token_time_limit": "lots"})


def test_credentials_are_read_from_raw_headers():
    headers = [
        (b"cookie", b"a=1; pasture_session=abc; b=2"),
        (b"authorization", b"Bearer  tok "),
    ]
    assert credentials(headers) == ("tok", "abc")
    assert credentials([(b"authorization", b"Basic xyz")]) == (None, None)
    assert ANY_ROUTE == ""


def test_a_time_budget_drains_and_says_when_the_token_is_back_within_it():
    clock = Clock()
    budget = TimeBudget(parse_limit("2 per 10 seconds", "t"), clock=clock)  # 0.2 s a second
    assert budget.retry_after("alice") is None
    budget.charge("alice", 1.5)
    assert budget.retry_after("alice") is None
    budget.charge("alice", 1.0)  # 2.5 s used: 0.5 s over, drains in 2.5 s
    assert budget.retry_after("alice") == 3
    assert budget.retry_after("bob") is None
    clock.t += 2.6
    assert budget.retry_after("alice") is None
    assert TimeBudget([]).retry_after("alice") is None


# -- the real API ---------------------------------------------------------------------------
def commands(r: redis.Redis) -> int:
    """Commands the Redis server processed so far (the INFO call itself included)."""
    return int(r.info("stats")["total_commands_processed"])


def _csrf(c: httpx.Client, cookie: str) -> str:
    page = c.get("/dashboard/submit", headers={"Cookie": cookie})
    return re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)


@pytest.fixture()
def held(env):
    """``(base_url, env)`` of an API with 4 submits per 10 s, 40 requests per 10 s and a
    hold of 5 s."""
    api = env.settings.api.model_copy(
        update={
            "submit_limit": "4 per 10 seconds",
            "request_limit": "40 per 10 seconds",
            "refusal_hold_s": 5.0,
        }
    )
    env = dataclasses.replace(env, settings=env.settings.model_copy(update={"api": api}))
    with serve(env) as url:
        yield url, env


def test_a_flood_of_refused_requests_is_answered_without_a_redis_read(held):
    """Over its submit limit, a session's submits answer 429 (with the limit's reason and
    Retry-After) without their session, form or spec being read: Redis processes nothing
    for 20 of them. Its pages are still served (the hold is on the submit route only);
    over its request limit, every route of the session is held the same way."""
    url, env = held
    with client(url, None) as c:
        cookie = dashboard_login(c, env.bob)
        csrf = _csrf(c, cookie)

        def submit(i: int) -> httpx.Response:
            spec = f"name: h{i}\nvc: research\nroles:\n  w:\n    command: 'true'\n"
            return c.post(
                "/dashboard/submit",
                data={"csrf_token": csrf, "spec": spec, "action": "submit"},
                headers={"Cookie": cookie},
            )

        codes = [submit(i).status_code for i in range(5)]
        assert codes == [303] * 4 + [429], codes
        before = commands(env.store.r)
        answers = [submit(10 + i) for i in range(20)]
        assert commands(env.store.r) - before <= 1  # the INFO call, nothing else
        assert {a.status_code for a in answers} == {429}
        assert all("over its submit limit" in a.json()["detail"] for a in answers)
        assert all(1 <= int(a.headers["retry-after"]) <= 5 for a in answers)
        assert c.get("/dashboard/jobs", headers={"Cookie": cookie}).status_code == 200

        # the request limit holds every route of the session
        for _ in range(60):
            if c.get("/dashboard/jobs", headers={"Cookie": cookie}).status_code == 429:
                break
        before = commands(env.store.r)
        pages = [c.get(p, headers={"Cookie": cookie}) for p in ("/dashboard/", "/dashboard/jobs")]
        assert commands(env.store.r) - before <= 1
        assert [p.status_code for p in pages] == [429, 429]
        assert "over its request limit" in pages[0].json()["detail"]
        # another tenant is not held
        with client(url, env.alice) as alice:
            assert alice.get("/api/v1/whoami").status_code == 200


def test_a_token_over_its_handler_time_budget_is_refused_while_another_is_served(env):
    """The dashboard's pages of one token may hold the process for at most
    ``api.token_time_limit`` seconds per window: past it they answer 429 with
    Retry-After, while another token's pages and the same token's API requests go on."""
    for i in range(60):  # a jobs page of some weight
        env.store.create_job(parse_job_spec({"name": f"j{i}", "roles": {"w": {"command": "x"}}}))
    api = env.settings.api.model_copy(
        update={
            "token_time_limit": "1 per 100 seconds",
            "request_limit": "100000 per 10 seconds",
            "refusal_hold_s": 0.0,
        }
    )
    env = dataclasses.replace(env, settings=env.settings.model_copy(update={"api": api}))
    with serve(env) as url, client(url, None) as a, client(url, None) as b:
        alice = dashboard_login(a, env.alice)
        bob = dashboard_login(b, env.bob)
        codes = []
        for _ in range(2000):
            r = a.get("/dashboard/jobs", headers={"Cookie": alice})
            codes.append(r.status_code)
            if r.status_code == 429:
                break
        assert codes[-1] == 429 and set(codes[:-1]) == {200}, codes[-5:]
        assert "over its handler-time budget" in r.json()["detail"]
        assert 1 <= int(r.headers["retry-after"]) <= 100
        # still refused (no hold here: the budget itself refuses), bob is served
        assert a.get("/dashboard/", headers={"Cookie": alice}).status_code == 429
        assert b.get("/dashboard/jobs", headers={"Cookie": bob}).status_code == 200
        assert b.get("/dashboard/", headers={"Cookie": bob}).status_code == 200
        with client(url, env.alice) as rest:  # the budget is the dashboard's
            assert rest.get("/api/v1/whoami").status_code == 200
