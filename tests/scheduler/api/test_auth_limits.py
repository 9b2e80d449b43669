"""Authentication under attack, against the real API (uvicorn + redis-server): wrong
tokens answer 401 (never 500), the same wrong token too often from one address answers 429
with Retry-After while every other token from that address still works, a token over its
request or submit limit answers 429, tokens expire, and admins list, revoke and rotate
them."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections import Counter

import httpx
import pytest
from live import serve

from scheduler.jobref import job_key
from scheduler.store.tokens import DAY_S, TokenStore

pytestmark = pytest.mark.integration

FAILURES, WINDOW_S = 5, 2


@pytest.fixture()
def strict(env):
    """``(base_url, env)`` of an API that allows 5 failed authentications per 2 s."""
    api = env.settings.api.model_copy(
        update={"auth_failures_per_window": FAILURES, "auth_failure_window_s": WINDOW_S}
    )
    env = dataclasses.replace(env, settings=env.settings.model_copy(update={"api": api}))
    with serve(env) as url:
        yield url, env


def client(url: str, token: str | None, address: str = "127.0.0.1") -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=url, headers=headers, transport=transport, timeout=30)


def test_500_wrong_tokens_answer_401_or_429_never_500(api):
    url, _ = api

    def attempt(i: int) -> int:
        with client(url, f"wrong-{i % 50}-" + "x" * (i % 300)) as c:
            return c.get("/api/v1/jobs").status_code

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        codes = Counter(pool.map(attempt, range(500)))
    assert set(codes) <= {401, 429}, codes
    # 50 distinct wrong tokens, each sent 10 times: under the default 20 failures per
    # token and address none is blocked by itself, but past the default 200 failures per
    # address (issue 32 item 5) the address is (401s beyond 200: requests in flight)
    assert codes[401] >= 200 and codes[429] >= 100, codes


@pytest.mark.parametrize(
    "header",
    [
        "Bearer " + "é" * 40,
        "Bearer " + "a" * 8000,
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Bearer a b c",
        "bearer lower-case-scheme",
    ],
)
def test_odd_authorization_headers_answer_401(api, header):
    url, _ = api
    with httpx.Client(base_url=url, timeout=30) as c:
        r = c.get("/api/v1/whoami", headers={"Authorization": header.encode("utf-8")})
    assert r.status_code == 401, r.text


@pytest.mark.serial  # 8 failed logins must fit in the 2 s window
def test_429_with_retry_after_for_the_wrong_token_only_then_it_may_try_again(strict):
    url, env = strict
    with client(url, "guess") as bad:
        codes = [bad.get("/api/v1/whoami").status_code for _ in range(FAILURES + 3)]
        assert codes == [401] * FAILURES + [429] * 3
        r = bad.get("/api/v1/whoami")
        assert r.status_code == 429
        assert 1 <= int(r.headers["retry-after"]) <= WINDOW_S
        assert "too many failed authentications" in r.json()["detail"]
    # the same address with a right token is served: one client's wrong token locks
    # nobody else out (the admin included)...
    with client(url, env.alice) as same:
        assert same.get("/api/v1/whoami").json()["name"] == "alice"
    with client(url, env.admin) as same:
        assert same.get("/api/v1/whoami").json()["role"] == "admin"
    # ...another wrong token from that address has its own count...
    with client(url, "other-guess") as other:
        assert other.get("/api/v1/whoami").status_code == 401
    # ...and after the window the blocked token is looked up again
    time.sleep(WINDOW_S + 0.2)
    with client(url, "guess") as bad:
        assert bad.get("/api/v1/whoami").status_code == 401
    # a request without any token is 401 and does not count
    with client(url, None) as anon:
        assert [anon.get("/api/v1/whoami").status_code for _ in range(10)] == [401] * 10
    with client(url, env.alice) as same:
        assert same.get("/api/v1/whoami").status_code == 200


def _serve_limited(env, window: str):
    api = env.settings.api.model_copy(
        update={"request_limit": f"30 per {window}", "submit_limit": f"4 per {window}"}
    )
    env = dataclasses.replace(env, settings=env.settings.model_copy(update={"api": api}))
    with serve(env) as url:
        yield url, env


@pytest.fixture()
def limited(env):
    """``(base_url, env)`` of an API that allows 30 requests and 4 submits per 2 s per token
    (for a test that waits for the window to pass: it must send its burst within 2 s)."""
    yield from _serve_limited(env, "2 seconds")


@pytest.fixture()
def limited_long(env):
    """The same limits per 60 s: for tests that only fill the window, so that a slow,
    loaded machine cannot let the window's first requests expire before the last
    (the dashboard's pages took over 2 s for 40 requests in a parallel CI run)."""
    yield from _serve_limited(env, "60 seconds")


@pytest.mark.serial  # 60 requests must fit in the limit's 2 s window
def test_per_token_request_and_submit_limits(limited):
    url, env = limited
    with client(url, env.alice) as alice:
        codes = Counter(alice.get("/api/v1/whoami").status_code for _ in range(60))
        assert codes == {200: 30, 429: 30}, codes
        r = alice.get("/api/v1/whoami")
        assert r.status_code == 429
        assert 1 <= int(r.headers["retry-after"]) <= 2
        assert "request limit" in r.json()["detail"]
        # another token behind the same address is not affected
        with client(url, env.bob) as bob:
            assert bob.get("/api/v1/whoami").status_code == 200
        time.sleep(2.2)
        assert alice.get("/api/v1/whoami").status_code == 200
    # submits have their own, lower limit (dry-runs count as submits)
    time.sleep(2.2)
    with client(url, env.bob) as bob:
        doc = {"name": "x", "vc": "research", "roles": {"w": {"command": "true"}}}
        codes = [bob.post("/api/v1/jobs:dry-run", json=doc).status_code for _ in range(6)]
        assert codes[:4] != [429] * 4 and 429 not in codes[:4], codes
        assert codes[4:] == [429, 429], codes
        r = bob.post("/api/v1/jobs:dry-run", json=doc)
        assert "submit limit" in r.json()["detail"] and int(r.headers["retry-after"]) >= 1
        assert bob.get("/api/v1/whoami").status_code == 200  # other requests still served


@pytest.mark.serial  # 8 failed logins must fit in the 2 s window
def test_dashboard_login_failures_are_rate_limited_too(strict):
    url, env = strict
    with client(url, None) as c:
        import re

        def login(token: str) -> httpx.Response:
            page = c.get("/dashboard/login")
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
            return c.post(
                "/dashboard/login",
                data={"token": token, "csrf_token": csrf},
                headers={"Cookie": f"pasture_login_csrf={csrf}"},
            )

        assert [login("nope").status_code for _ in range(FAILURES)] == [401] * FAILURES
        r = login("nope")
        assert r.status_code == 429
        assert int(r.headers["retry-after"]) >= 1
        # a right token from the same address logs in, and the API serves it
        assert login(env.alice).status_code == 303
        assert (
            c.get("/api/v1/whoami", headers={"Authorization": f"Bearer {env.alice}"}).status_code
            == 200
        )


def test_tokens_expire(env):
    now = [time.time()]
    tokens = TokenStore(env.store.r, default_ttl_s=DAY_S, max_ttl_s=2 * DAY_S, clock=lambda: now[0])
    short = tokens.create("short", "user", ["default"])
    long = tokens.create("long", "admin", ttl_s=2 * DAY_S)
    with serve(dataclasses.replace(env, tokens=tokens)) as url:
        with client(url, short) as c:
            assert c.get("/api/v1/whoami").status_code == 200
        now[0] += DAY_S + 1
        with client(url, short) as c:
            r = c.get("/api/v1/whoami")
            assert r.status_code == 401
            assert "expired" in r.json()["detail"]
        with client(url, long) as admin:
            listed = {t["name"]: t for t in admin.get("/api/v1/admin/tokens").json()}
            assert listed["short"]["expired"] is True
            assert listed["long"]["expired"] is False
            assert listed["long"]["expires"] == pytest.approx(listed["long"]["created"] + 2 * DAY_S)
            assert all("token" not in t for t in listed.values())
            # rotating an expired token gives it a new secret and a new lifetime
            r = admin.post("/api/v1/admin/tokens/short/rotate", json={"ttl_days": 0.5})
            assert r.status_code == 200, r.text
            fresh = r.json()["token"]
            assert r.json()["expires"] == pytest.approx(now[0] + 0.5 * DAY_S, abs=5)
            capped = admin.post("/api/v1/admin/tokens/long/rotate", json={"ttl_days": 3})
            assert capped.status_code == 200, capped.text  # cut to the 2-day maximum
            assert capped.json()["expires"] == pytest.approx(now[0] + 2 * DAY_S, abs=5)
            assert admin.get("/api/v1/admin/tokens").status_code == 401  # rotated away
        with client(url, fresh) as c:
            assert c.get("/api/v1/whoami").json()["name"] == "short"
        with client(url, short) as c:
            assert c.get("/api/v1/whoami").status_code == 401


def test_admin_token_routes(api, http):
    _, env = api
    admin, alice = http(env.admin), http(env.alice)
    names = [t["name"] for t in admin.get("/api/v1/admin/tokens").json()]
    assert names == ["alice", "bob", "pulumi", "root"]
    for method, path in (
        ("GET", "/api/v1/admin/tokens"),
        ("DELETE", "/api/v1/admin/tokens/bob"),
        ("POST", "/api/v1/admin/tokens/bob/rotate"),
    ):
        assert alice.request(method, path).status_code == 403
        assert http(env.agent).request(method, path).status_code == 403
    r = admin.post("/api/v1/admin/tokens/bob/rotate")
    assert r.status_code == 200
    new_bob = r.json()["token"]
    assert r.json()["vcs"] == ["research"] and r.json()["role"] == "user"
    assert http(env.bob).get("/api/v1/whoami").status_code == 401
    assert http(new_bob).get("/api/v1/whoami").json()["name"] == "bob"
    assert admin.post("/api/v1/admin/tokens/ghost/rotate").status_code == 404
    assert admin.post("/api/v1/admin/tokens/bob/rotate", json={"bogus": 1}).status_code == 422
    assert admin.delete("/api/v1/admin/tokens/bob").status_code == 204
    assert admin.delete("/api/v1/admin/tokens/bob").status_code == 404
    assert http(new_bob).get("/api/v1/whoami").status_code == 401


# -- issue 32 item 5: limits everywhere a tenant can send load ----------------------------
def dashboard_login(c: httpx.Client, token: str) -> str:
    """Log ``c`` in to the dashboard with ``token``; returns the session cookie header."""
    import re

    page = c.get("/dashboard/login")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    r = c.post(
        "/dashboard/login",
        data={"token": token, "csrf_token": csrf},
        headers={"Cookie": f"pasture_login_csrf={csrf}"},
    )
    assert r.status_code == 303, r.text
    sid = r.cookies.get("pasture_session") or next(
        h.split("=", 1)[1].split(";", 1)[0]
        for h in r.headers.get_list("set-cookie")
        if h.startswith("pasture_session=")
    )
    return f"pasture_session={sid}"


def test_dashboard_pages_count_against_the_request_limit(limited_long):
    url, env = limited_long
    with client(url, None) as c:
        cookie = dashboard_login(c, env.alice)
        codes = Counter(
            c.get("/dashboard/jobs", headers={"Cookie": cookie}).status_code for _ in range(40)
        )
        assert codes[200] <= 30 and codes[429] >= 10, codes
        r = c.get("/dashboard/", headers={"Cookie": cookie})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        # the same token's API requests share the count; another tenant's are not affected
        assert (
            c.get("/api/v1/whoami", headers={"Authorization": f"Bearer {env.alice}"}).status_code
            == 429
        )
        assert (
            c.get("/api/v1/whoami", headers={"Authorization": f"Bearer {env.bob}"}).status_code
            == 200
        )


def test_dashboard_submits_count_against_the_submit_limit(limited_long):
    url, env = limited_long
    import re

    with client(url, None) as c:
        cookie = dashboard_login(c, env.bob)
        page = c.get("/dashboard/submit", headers={"Cookie": cookie})
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        codes = []
        for i in range(8):
            spec = f"name: d{i}\nvc: research\nroles:\n  w:\n    command: 'true'\n"
            r = c.post(
                "/dashboard/submit",
                data={"csrf_token": csrf, "spec": spec, "action": "submit"},
                headers={"Cookie": cookie},
            )
            codes.append(r.status_code)
        assert codes[:4] == [303] * 4 and codes[4:] == [429] * 4, codes
        stored = [
            n
            for n in ("d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7")
            if env.store.get_job(job_key("research", n))
        ]
        assert len(stored) == 4, stored


def test_a_spray_of_distinct_wrong_tokens_is_limited_per_address(env):
    """3,962 distinct wrong tokens in 10 s were all answered 401 after a Redis read: past
    ``auth_failures_per_address`` they answer 429 unread, while a token this process
    verified recently still works from that address and other addresses are untouched."""
    api = env.settings.api.model_copy(
        # a token in use stays verified for token_cache_s (long here: a loaded machine)
        update={"auth_failures_per_address": 30, "auth_failure_window_s": 5, "token_cache_s": 60}
    )
    env = dataclasses.replace(env, settings=env.settings.model_copy(update={"api": api}))
    with serve(env) as url:
        with client(url, env.alice) as alice:
            assert alice.get("/api/v1/whoami").status_code == 200  # verified: cached
            codes = Counter()
            with client(url, None) as spray:
                for i in range(60):
                    r = spray.get("/api/v1/jobs", headers={"Authorization": f"Bearer w{i}"})
                    codes[r.status_code] += 1
                    # unknown dashboard sessions count too
                    if i % 2:
                        spray.get("/dashboard/jobs", headers={"Cookie": f"pasture_session=s{i}"})
                r = spray.get("/api/v1/jobs", headers={"Authorization": "Bearer fresh"})
                assert r.status_code == 429 and "this address" in r.json()["detail"]
                r = spray.get("/dashboard/", headers={"Cookie": "pasture_session=fresh"})
                assert r.status_code == 429
            assert codes[401] <= 30 and codes[429] >= 30, codes
            assert alice.get("/api/v1/whoami").status_code == 200
        with client(url, env.bob, address="127.0.0.2") as bob:
            assert bob.get("/api/v1/whoami").status_code == 200
